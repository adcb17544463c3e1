import { spawn, type ChildProcess } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createInterface } from 'node:readline';
import { execa } from 'execa';
import { afterAll, describe, expect, it } from 'vitest';
import { REPO } from '../e2e-cli/run-cli.js';
import { cliEnv } from './support/vpn-gateway-lab.js';

const BIN = join(REPO, 'bin/egressguard.js');
const POLICY = join(REPO, 'scripts/fleet-demo-policy.yaml');

// `run --netns X` kept running for 15 minutes after X was deleted: its monitors held the orphaned
// namespace alive and every check failed into its log. Now the first check that cannot enter the
// namespace ends it with an error.
describe('run --netns NAME, when NAME is deleted', () => {
  const ns = `egtest-rundel-${randomBytes(3).toString('hex')}`;
  const state = mkdtempSync(join(tmpdir(), 'egtest-rundel-'));
  let child: ChildProcess | undefined;
  afterAll(async () => {
    // Still running only when the test failed: SIGTERM stops it and its monitors.
    if (child?.exitCode === null && child.signalCode === null) child.kill('SIGTERM');
    await execa('ip', ['netns', 'delete', ns], { reject: false });
    rmSync(state, { recursive: true, force: true });
  });

  it('exits 2 with a clear error at its next check', async () => {
    const ip = (...args: string[]) => execa('ip', ['-n', ns, ...args]);
    await execa('ip', ['netns', 'add', ns]);
    await ip('link', 'set', 'lo', 'up');
    // The fleet demo's host: an uplink with the default route, the tunnel, the workloads' link.
    for (const [name, address] of [
      ['eth0', '198.51.100.10/24'],
      ['tun0', '10.200.0.2/32'],
      ['vwl0', '10.10.0.1/24'],
    ] as const) {
      await ip('link', 'add', name, 'type', 'veth', 'peer', 'name', `${name}p`);
      await ip('address', 'add', address, 'dev', name);
      await ip('link', 'set', name, 'up');
      await ip('link', 'set', `${name}p`, 'up');
    }
    await ip('route', 'add', 'default', 'via', '198.51.100.1', 'dev', 'eth0');

    const run = spawn(
      process.execPath,
      [BIN, 'run', POLICY, '--netns', ns, '--state-dir', state, '--tick', '500'],
      { env: { ...process.env, ...cliEnv() }, stdio: ['ignore', 'pipe', 'pipe'] },
    );
    child = run;
    const exited = new Promise<number | null>((resolve) => run.once('close', resolve));
    let stderr = '';
    run.stderr.on('data', (chunk: Buffer) => (stderr += chunk.toString()));
    const lines: string[] = [];
    // The handshake: its first pass is done, so it is watching the namespace.
    for await (const line of createInterface({ input: run.stdout })) {
      lines.push(line);
      if (/ checked: first pass done/.test(line)) break;
    }
    run.stdout.resume(); // what it logs from here is not read, and must not fill the pipe
    expect(lines.join('\n')).toMatch(/ applied: generation 1/);

    await execa('ip', ['netns', 'delete', ns]);
    const code = await exited;
    expect(code).toBe(2);
    expect(stderr).toContain(
      `error: Cannot act in network namespace "${ns}": it does not exist (no /run/netns/${ns})`,
    );
  });
});
