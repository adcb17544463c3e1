import {
  chmodSync,
  chownSync,
  cpSync,
  mkdirSync,
  mkdtempSync,
  readFileSync,
  rmSync,
  statSync,
  writeFileSync,
} from 'node:fs';
import { join } from 'node:path';
import { execa } from 'execa';
import { afterAll, describe, expect, it, onTestFinished } from 'vitest';
import { connectController } from '../../src/fleet/index.js';
import { REPO, runCli } from '../e2e-cli/run-cli.js';
import { createScratch, waitFor } from './support/fleet-lab.js';
import { freePort } from './support/server-process.js';

/** The SQLite store's addon and what loads it, which the bundle requires at run time. */
const NATIVE_STORE_MODULES = [
  'node_modules/better-sqlite3',
  'node_modules/bindings',
  'node_modules/file-uri-to-path',
];

/** The controller as a service: its systemd unit and its user, templated by the server itself. */
describe('server units (built CLI)', () => {
  const scratch = createScratch();
  afterAll(() => {
    scratch.cleanup();
  });

  it('prints a systemd service that passes systemd-analyze verify, runs under its own user, restarts on failure, and is sandboxed', async () => {
    // A relative path is made absolute from where the command runs: not /tmp, where a fresh
    // clone may be (the service has its own /tmp, so the CLI refuses a path there).
    const cwd = mkdtempSync('/var/lib/egressguard-unit-test-');
    onTestFinished(() => {
      rmSync(cwd, { recursive: true, force: true });
    });
    const result = await runCli(
      [
        'server',
        '--store',
        'postgres://eg@db.example/fleet',
        '--metrics-token-file',
        'metrics.token',
        '--print-unit',
        'systemd',
      ],
      { cwd },
    );
    expect(result.exitCode).toBe(0);
    const unit = result.stdout;
    expect(unit).toMatch(
      new RegExp(
        `^ExecStart=\\S+ \\S+/bin/egressguard\\.js server --store postgres://eg@db\\.example/fleet --metrics-token-file ${cwd}/metrics\\.token --state-dir /var/lib/egressguard-server$`,
        'm',
      ),
    );
    for (const line of [
      'User=egressguard',
      'Restart=on-failure',
      'StateDirectory=egressguard-server',
      'StateDirectoryMode=0700',
      'UMask=0077',
      'NoNewPrivileges=yes',
      'ProtectSystem=strict',
      'ProtectHome=yes',
      'PrivateDevices=yes',
      'CapabilityBoundingSet=',
      'SystemCallFilter=@system-service',
    ]) {
      expect(unit.split('\n')).toContain(line);
    }
    const file = join(scratch.dir('unit'), 'egressguard-server.service');
    writeFileSync(file, unit);
    const verify = await execa('systemd-analyze', ['verify', file], { reject: false });
    expect(verify.stderr).toBe('');
    expect(verify.exitCode).toBe(0);
    // systemd's own review of the sandbox: 0 (locked down) to 10 (exposed); "OK" is below 3.
    const security = await execa('systemd-analyze', ['security', '--offline=yes', file], {
      reject: false,
    });
    const exposure = Number(/Overall exposure level for .*: (\d+\.\d+)/.exec(security.stdout)?.[1]);
    expect(exposure).toBeLessThan(3);
    // A port below 1024 gets the one capability it needs, and no other.
    const low = await runCli(['server', '--listen', ':443', '--print-unit', 'systemd']);
    expect(low.stdout.split('\n')).toContain('CapabilityBoundingSet=CAP_NET_BIND_SERVICE');
    expect(low.stdout).toMatch(/ --store sqlite:\/var\/lib\/egressguard-server\/fleet\.db/);
  });

  it('makes a state directory or SQLite file given elsewhere absolute and writable for the sandboxed service, and refuses a path in a home directory or /tmp', async () => {
    // Not in /tmp (the service has its own): where an operator might keep them.
    const cwd = mkdtempSync('/var/lib/egressguard-unit-test-');
    onTestFinished(() => {
      rmSync(cwd, { recursive: true, force: true });
    });
    const result = await runCli(
      [
        'server',
        '--store',
        'sqlite:data/fleet.db',
        '--state-dir',
        'state',
        '--print-unit',
        'systemd',
      ],
      { cwd },
    );
    expect(result.stderr).toBe('');
    expect(result.exitCode).toBe(0);
    const lines = result.stdout.split('\n');
    // The service starts in /, where a relative path would name another file, read-only at that.
    expect(lines.find((l) => l.startsWith('ExecStart='))).toMatch(
      new RegExp(` server --store sqlite:${cwd}/data/fleet\\.db --state-dir ${cwd}/state$`),
    );
    expect(lines).toContain(`ReadWritePaths=${cwd}/data ${cwd}/state`);
    const file = join(scratch.dir('unit-paths'), 'egressguard-server.service');
    writeFileSync(file, result.stdout);
    const verify = await execa('systemd-analyze', ['verify', file], { reject: false });
    expect(verify.stderr).toBe('');
    expect(verify.exitCode).toBe(0);
    // Its own state directory needs no such line.
    const own = await runCli([
      'server',
      '--store',
      'sqlite:/var/lib/egressguard-server/other.db',
      '--print-unit',
      'systemd',
    ]);
    expect(own.stdout).not.toMatch(/ReadWritePaths/);

    const home = await runCli([
      'server',
      '--store',
      'sqlite:/root/fleet.db',
      '--print-unit',
      'systemd',
    ]);
    expect(home.exitCode).toBe(2);
    expect(home.stdout).toBe('');
    expect(home.stderr).toMatch(
      /Cannot template the service with --store sqlite:\/root\/fleet\.db: the service cannot see home directories \(ProtectHome=yes\)/,
    );
    const spaced = await runCli(['server', '--state-dir', 'a state', '--print-unit', 'systemd'], {
      cwd,
    });
    expect(spaced.exitCode).toBe(2);
    expect(spaced.stderr).toMatch(/must be an absolute path of letters, digits/);
    const tmp = await runCli(['server', '--tls-cert', '/tmp/cert.pem', '--print-unit', 'systemd']);
    expect(tmp.exitCode).toBe(2);
    expect(tmp.stderr).toMatch(
      /--tls-cert \/tmp\/cert\.pem: the service has a \/tmp .* of its own/,
    );
  });

  it('prints the sysusers.d entry of its user, which systemd-sysusers creates', async () => {
    const result = await runCli(['server', '--print-unit', 'sysusers']);
    expect(result.exitCode).toBe(0);
    const root = scratch.dir('root');
    mkdirSync(join(root, 'etc/sysusers.d'), { recursive: true });
    writeFileSync(join(root, 'etc/sysusers.d/egressguard-server.conf'), result.stdout);
    const created = await execa('systemd-sysusers', [`--root=${root}`], { reject: false });
    expect(created.stderr).not.toMatch(/fail|error/i);
    expect(created.exitCode).toBe(0);
    const passwd = readFileSync(join(root, 'etc/passwd'), 'utf8');
    expect(passwd).toMatch(
      /^egressguard:x:\d+:\d+:egressguard fleet controller:\/var\/lib\/egressguard-server:\/usr\/sbin\/nologin$/m,
    );
  });

  it('runs as an unprivileged user with the unit’s umask: its CA key, tokens and database are its own, 0600', async () => {
    const state = scratch.dir('unprivileged');
    chownSync(state, Number((await execa('id', ['-u', 'nobody'])).stdout), 0);
    const port = await freePort();
    // The user nobody must be able to read the CLI: a clone made by mktemp -d is root's alone.
    const install = scratch.dir('install');
    chmodSync(install, 0o755);
    for (const path of ['package.json', 'bin', 'dist/bundle', ...NATIVE_STORE_MODULES]) {
      cpSync(join(REPO, path), join(install, path), { recursive: true });
    }
    const server = execa(
      'runuser',
      [
        '-u',
        'nobody',
        '--',
        'sh',
        '-c',
        'umask 077 && exec node "$0" server --store "sqlite:$1/fleet.db" --state-dir "$1" --listen "127.0.0.1:$2"',
        join(install, 'bin/egressguard.js'),
        state,
        String(port),
      ],
      { reject: false },
    );
    try {
      await waitFor('the server to listen', async () => {
        if (server.exitCode !== null) throw new Error(`the server exited (${server.exitCode})`);
        const connection = connectController(
          `https://127.0.0.1:${port}`,
          readFileSync(join(state, 'ca.pem'), 'utf8'),
        );
        try {
          return (await connection.request('GET', '/healthz')).status === 200 ? true : undefined;
        } finally {
          connection.close();
        }
      });
      for (const file of ['ca.key', 'operator.token', 'metrics.token', 'fleet.db']) {
        const stats = statSync(join(state, file));
        expect({ file, mode: (stats.mode & 0o777).toString(8), root: stats.uid === 0 }).toEqual({
          file,
          mode: '600',
          root: false,
        });
      }
    } finally {
      server.kill('SIGTERM');
      await server;
    }
  });
});
