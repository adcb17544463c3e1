import { systemdCommandLine } from '../core/index.js';

/** What `server --print-unit` prints: the service, or the sysusers.d entry of its user. */
export type ServerUnitKind = 'systemd' | 'sysusers';

export const SERVER_UNIT_KINDS: readonly ServerUnitKind[] = ['systemd', 'sysusers'];

/** The user the controller runs as, and the state directory systemd creates for it. */
export const SERVER_USER = 'egressguard';
export const SERVER_STATE_DIR = '/var/lib/egressguard-server';

export interface ServerUnitInput {
  /** Absolute path of the node binary. */
  readonly node: string;
  /** Absolute path of bin/egressguard.js. */
  readonly bin: string;
  /** The `server` arguments the service runs with (store, listen, state dir…). */
  readonly args: readonly string[];
  /** The port it listens on: below 1024 it needs CAP_NET_BIND_SERVICE, and gets only that. */
  readonly port: number;
  /**
   * Absolute directories it writes outside its state directory (a state directory or a SQLite
   * file given elsewhere): `ProtectSystem=strict` makes every other path read-only.
   */
  readonly writablePaths?: readonly string[];
}

/**
 * Why a path cannot be given to the service, or undefined: home directories are hidden from it
 * (`ProtectHome`), /tmp and /var/tmp are its own (`PrivateTmp`), and a writable path is one word of `ReadWritePaths=`, which takes no quoting we
 * need to get right (so only plain characters).
 */
export function serverUnitPathProblem(path: string, writable: boolean): string | undefined {
  if (/^\/(home|root|run\/user)(\/|$)/.test(path)) {
    return 'the service cannot see home directories (ProtectHome=yes)';
  }
  if (/^\/(var\/)?tmp(\/|$)/.test(path)) {
    return 'the service has a /tmp and /var/tmp of its own (PrivateTmp=yes)';
  }
  if (writable && !/^\/[A-Za-z0-9_@+=:,./-]*$/.test(path)) {
    return 'a directory the service writes must be an absolute path of letters, digits and _@+=:,./-';
  }
  return undefined;
}

/**
 * The controller's systemd service: its own unprivileged user, its state directory made by
 * systemd (0700), restarted on failure, and sandboxed (systemd.exec(5)): the filesystem read-only
 * but that directory, no new privileges, no capabilities, no devices, kernel knobs or other
 * namespaces, only the address families and system calls a network service uses. The controller
 * is no root service: it holds the fleet's policy and secrets (hashed), never a host's firewall.
 */
export function renderServerUnit(
  kind: ServerUnitKind,
  input: ServerUnitInput,
): { name: string; content: string } {
  if (kind === 'sysusers') {
    return {
      name: 'egressguard-server.conf',
      content: `# /etc/sysusers.d/egressguard-server.conf: the egressguard controller's own user (systemd-sysusers)\nu ${SERVER_USER} - "egressguard fleet controller" ${SERVER_STATE_DIR} /usr/sbin/nologin\n`,
    };
  }
  const privilegedPort = input.port > 0 && input.port < 1024;
  return {
    name: 'egressguard-server.service',
    content: [
      '[Unit]',
      'Description=egressguard fleet controller: enrollment, bundles, rollouts in waves, metrics',
      // A PostgreSQL on this machine is up first; with SQLite or a remote database these are no-ops.
      'After=network-online.target postgresql.service',
      'Wants=network-online.target',
      '',
      '[Service]',
      'Type=simple',
      `User=${SERVER_USER}`,
      `Group=${SERVER_USER}`,
      `ExecStart=${systemdCommandLine(input.node, [input.bin, 'server', ...input.args])}`,
      'Restart=on-failure',
      'RestartSec=2',
      // SIGTERM ends long polls and writes the check-ins held in memory.
      'KillSignal=SIGTERM',
      'TimeoutStopSec=30',
      `StateDirectory=${SERVER_STATE_DIR.split('/').at(-1) ?? 'egressguard-server'}`,
      'StateDirectoryMode=0700',
      'UMask=0077',
      ...((input.writablePaths ?? []).length > 0
        ? [`ReadWritePaths=${(input.writablePaths ?? []).join(' ')}`]
        : []),
      'NoNewPrivileges=yes',
      'ProtectSystem=strict',
      'ProtectHome=yes',
      'PrivateTmp=yes',
      'PrivateDevices=yes',
      'ProtectKernelTunables=yes',
      'ProtectKernelModules=yes',
      'ProtectKernelLogs=yes',
      'ProtectControlGroups=yes',
      'ProtectClock=yes',
      'ProtectHostname=yes',
      'ProtectProc=invisible',
      'RestrictAddressFamilies=AF_INET AF_INET6 AF_UNIX',
      'RestrictNamespaces=yes',
      'RestrictRealtime=yes',
      'RestrictSUIDSGID=yes',
      'LockPersonality=yes',
      'RemoveIPC=yes',
      `CapabilityBoundingSet=${privilegedPort ? 'CAP_NET_BIND_SERVICE' : ''}`,
      `AmbientCapabilities=${privilegedPort ? 'CAP_NET_BIND_SERVICE' : ''}`,
      'SystemCallArchitectures=native',
      'SystemCallFilter=@system-service',
      'SystemCallErrorNumber=EPERM',
      // Not MemoryDenyWriteExecute: V8's JIT compiler writes the code it runs.
      '',
      '[Install]',
      'WantedBy=multi-user.target',
      '',
    ].join('\n'),
  };
}
