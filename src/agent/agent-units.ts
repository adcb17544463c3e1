import { escapeXml, systemdCommandLine, systemdEnvironment } from '../core/index.js';

/** The service definitions the agent templates for itself. */
export type AgentUnitKind = 'systemd' | 'launchd';

export const AGENT_UNIT_KINDS: readonly AgentUnitKind[] = ['systemd', 'launchd'];

export interface AgentUnitInput {
  /** Absolute path of the node binary. */
  readonly node: string;
  /** Absolute path of bin/egressguard.js. */
  readonly bin: string;
  /** The `agent` arguments the service runs with (server, token file, state dir, netns…). */
  readonly args: readonly string[];
  readonly stateDir: string;
}

/**
 * A systemd service (Linux) or a LaunchDaemon plist (macOS) that runs this agent with these
 * arguments, restarts it whenever it stops, and starts it after the boot-time restore of the last
 * applied policy. Rendered by the agent itself, not sent by the controller: a controller never
 * decides what runs as root on a host.
 */
export function renderAgentUnit(
  kind: AgentUnitKind,
  input: AgentUnitInput,
): { name: string; content: string } {
  const argv = [input.node, input.bin, 'agent', ...input.args];
  if (kind === 'systemd') {
    return {
      name: 'egressguard-agent.service',
      content: [
        '[Unit]',
        'Description=egressguard fleet agent: apply the controller’s policy to this host, report, repair drift',
        // The rules stay in the kernel while the agent is down; the restore unit loads them at boot.
        'After=network-online.target egressguard-restore.service',
        'Wants=network-online.target',
        '',
        '[Service]',
        'Type=simple',
        `Environment=${systemdEnvironment('EGRESSGUARD_STATE_DIR', input.stateDir)}`,
        `ExecStart=${systemdCommandLine(input.node, [input.bin, 'agent', ...input.args])}`,
        'Restart=always',
        'RestartSec=5',
        // 0: the host was decommissioned, 1: its credential revoked; a restart is refused again.
        'RestartPreventExitStatus=0 1',
        // SIGTERM stops the long poll; an apply in flight finishes under the host lock.
        'KillSignal=SIGTERM',
        'TimeoutStopSec=60',
        'NoNewPrivileges=yes',
        'ProtectHome=yes',
        'PrivateTmp=yes',
        '',
        '[Install]',
        'WantedBy=multi-user.target',
        '',
      ].join('\n'),
    };
  }
  const label = 'com.egressguard.agent';
  const strings = (values: readonly string[]): string =>
    values.map((v) => `\t\t<string>${escapeXml(v)}</string>`).join('\n');
  return {
    name: `${label}.plist`,
    content: [
      '<?xml version="1.0" encoding="UTF-8"?>',
      '<!DOCTYPE plist PUBLIC "-//Apple//DTD PLIST 1.0//EN" "http://www.apple.com/DTDs/PropertyList-1.0.dtd">',
      '<plist version="1.0">',
      '<dict>',
      '\t<key>Label</key>',
      `\t<string>${label}</string>`,
      '\t<key>ProgramArguments</key>',
      '\t<array>',
      strings(argv),
      '\t</array>',
      '\t<key>EnvironmentVariables</key>',
      '\t<dict>',
      '\t\t<key>EGRESSGUARD_STATE_DIR</key>',
      `\t\t<string>${escapeXml(input.stateDir)}</string>`,
      '\t</dict>',
      '\t<key>RunAtLoad</key>',
      '\t<true/>',
      '\t<key>KeepAlive</key>',
      '\t<true/>',
      // launchd restarts a daemon that exits at most this often (seconds).
      '\t<key>ThrottleInterval</key>',
      '\t<integer>5</integer>',
      '\t<key>StandardErrorPath</key>',
      '\t<string>/var/log/egressguard-agent.log</string>',
      '</dict>',
      '</plist>',
      '',
    ].join('\n'),
  };
}
