import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { execa } from 'execa';
import { afterAll, describe, expect, it } from 'vitest';
// The launchd plist lint the pf backend's own daemons are checked with (macOS cannot run here).
import { lintLaunchdPlist } from '../../src/backends/pf/launchd-plist.js';
import { runCli } from '../e2e-cli/run-cli.js';

const AGENT = [
  'agent',
  '--server',
  'https://controller.example:8443',
  '--token-file',
  '/etc/egressguard/bootstrap token',
  '--netns',
  'runner-1',
  '--retry-cap',
  '5m',
];

describe('agent units, templated by the agent itself (built CLI)', () => {
  const dir = mkdtempSync(join(tmpdir(), 'eg-agent-units-'));
  afterAll(() => {
    rmSync(dir, { recursive: true, force: true });
  });

  it('prints a systemd service that passes systemd-analyze verify and runs this agent’s options', async () => {
    const result = await runCli([...AGENT, '--print-unit', 'systemd']);
    expect(result.exitCode).toBe(0);
    const file = join(dir, 'egressguard-agent.service');
    writeFileSync(file, result.stdout);
    expect(result.stdout).toMatch(
      /^ExecStart=\S+ \S+\/bin\/egressguard\.js agent --server https:\/\/controller\.example:8443 --token-file "\/etc\/egressguard\/bootstrap token" --netns runner-1 --retry-cap 5m --state-dir \/var\/lib\/egressguard$/m,
    );
    expect(result.stdout).toContain('Restart=always');
    expect(result.stdout).toContain('After=network-online.target egressguard-restore.service');
    const verify = await execa('systemd-analyze', ['verify', file], { reject: false });
    expect(verify.stderr).toBe('');
    expect(verify.exitCode).toBe(0);
  });

  it('prints a LaunchDaemon plist that passes the launchd lint, arguments escaped', async () => {
    const result = await runCli([...AGENT, '--hostname', 'ci&co', '--print-unit', 'launchd']);
    expect(result.exitCode).toBe(0);
    expect(lintLaunchdPlist(result.stdout)).toEqual([]);
    expect(result.stdout).toContain('<string>ci&amp;co</string>');
    expect(result.stdout).toContain('<key>KeepAlive</key>\n\t<true/>');
  });

  it('refuses a unit kind it does not have, with the ones it has', async () => {
    const result = await runCli([...AGENT, '--print-unit', 'upstart']);
    expect(result.exitCode).toBe(2);
    expect(result.stderr).toContain('Cannot use --print-unit "upstart"');
    expect(result.stderr).toContain('systemd, launchd');
  });
});
