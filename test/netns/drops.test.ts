import { randomBytes } from 'node:crypto';
import { fileURLToPath } from 'node:url';
import { execa } from 'execa';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createRunner } from '../../src/runner/index.js';
import { REPO, runCli } from '../e2e-cli/run-cli.js';

// `egressguard drops --netns` through the built CLI: a log rule as the nft compiler writes it
// (`log prefix "eg drop <id> " group 2`, then the drop) in a namespace, a ping into it, and the
// record read back from the nflog group.
const root = createRunner();
const ns = `eg-drops-${randomBytes(4).toString('hex')}`;
const inside = root.inNamespace(ns);
const BIN = fileURLToPath(new URL('../../bin/egressguard.js', import.meta.url));
const DROPPED = '192.0.2.99';
const AUDITED = '192.0.2.98';

beforeAll(async () => {
  await root.run(['ip', 'netns', 'add', ns], { effect: 'change' });
  for (const argv of [
    ['ip', 'link', 'set', 'lo', 'up'],
    ['ip', 'link', 'add', 'eg0', 'type', 'veth', 'peer', 'name', 'eg0-far'],
    ['ip', 'link', 'set', 'eg0', 'up'],
    ['ip', 'link', 'set', 'eg0-far', 'up'],
    ['ip', 'addr', 'add', '192.0.2.1/24', 'dev', 'eg0'],
  ]) {
    await inside.run(argv, { effect: 'change' });
  }
  await inside.run(['nft', '-f', '-'], {
    effect: 'change',
    input: `table inet egtest {
\tchain output {
\t\ttype filter hook output priority filter; policy accept;
\t\tip daddr ${DROPPED} log prefix "eg drop x/y " group 2
\t\tip daddr ${DROPPED} drop
\t\tip daddr ${AUDITED} log prefix "eg audit deny-private " group 2
\t\tip daddr ${AUDITED} log prefix "someone else " group 2
\t}
}
`,
  });
});

afterAll(async () => {
  await root.run(['ip', 'netns', 'delete', ns], { effect: 'change', allowFailure: true });
});

/**
 * Runs `drops` and pings `to` until it exits: tcpdump binds the group a moment after start, so
 * the pings go on until drops has printed its --count (its --duration only bounds a hang).
 */
async function dropsWhilePinging(to: string, args: readonly string[]) {
  const cli = execa('node', [BIN, 'drops', '--netns', ns, ...args], {
    cwd: REPO,
    env: { NO_COLOR: '1' },
    reject: false,
  });
  const state = { done: false };
  void cli.finally(() => {
    state.done = true;
  });
  for (let i = 0; i < 100 && !state.done; i++) {
    await inside.run(['ping', '-c', '1', '-W', '1', to], { effect: 'read', allowFailure: true });
    await new Promise((r) => setTimeout(r, 100));
  }
  const result = await cli;
  return { exitCode: result.exitCode, stdout: result.stdout, stderr: result.stderr };
}

describe('egressguard drops in a namespace', () => {
  it('prints the dropped packet with its rule id and class as JSON lines', async () => {
    const startedAt = Date.now();
    const result = await dropsWhilePinging(DROPPED, ['--json', '--count', '1', '--duration', '90']);
    expect(result.stderr).toBe('');
    expect(result.exitCode).toBe(0);
    const lines = result.stdout.trim().split('\n');
    expect(lines).toHaveLength(1);
    const record = JSON.parse(lines[0] ?? '') as Record<string, unknown>;
    expect(record).toMatchObject({
      action: 'drop',
      class: 'x',
      rule: 'x/y',
      family: 4,
      src: '192.0.2.1',
      dst: DROPPED,
      protocol: 'icmp',
      port: null,
      icmp: { type: 8, code: 0 },
      hook: 'output',
      in: null,
      out: 'eg0',
    });
    // Stamped by the capture while this test ran (not the epoch, not a fixed time).
    expect(Date.parse(String(record['time']))).toBeGreaterThanOrEqual(startedAt - 1000);
    expect(Date.parse(String(record['time']))).toBeLessThanOrEqual(Date.now());
  });

  it('looks up the class of a policy rule id, skips foreign prefixes, and prints lines for people', async () => {
    const result = await dropsWhilePinging(AUDITED, [
      'testdata/policies/valid/macos-runner-fleet/policy.yaml',
      '--count',
      '2',
      '--duration',
      '90',
    ]);
    expect(result.exitCode).toBe(0);
    const lines = result.stdout.trim().split('\n');
    expect(lines.slice(0, 2)).toEqual([
      expect.stringMatching(
        /^\d\d:\d\d:\d\d\.\d{3} {2}audit {2}vm {12}deny-private {14}192\.0\.2\.1 → 192\.0\.2\.98 {2}icmp type 8 code 0 {2}\(output, out eg0\)$/,
      ),
      expect.stringMatching(/ audit {2}vm {12}deny-private /),
    ]);
    expect(lines[2]).toBe('2 packets');
    expect(result.stdout).not.toContain('someone else');
  });

  // Without --duration's timer drops would read for ever: the test's own timeout is the bound.
  it('stops after --duration with nothing to show', async () => {
    const result = await runCli(['drops', '--netns', ns, '--json', '--duration', '0.5']);
    expect(result).toMatchObject({ exitCode: 0, stdout: '', stderr: '' });
  });

  it('says who holds the group when another reader has bound it', async () => {
    const other = inside.startBinary(['tcpdump', '-i', 'nflog:2', '-U', '-w', '-'], {
      effect: 'read',
    });
    try {
      for (let i = 0; i < 200 && !other.stderr().includes('listening on'); i++) {
        await new Promise((r) => setTimeout(r, 100));
      }
      expect(other.stderr()).toContain('listening on nflog:2');
      const result = await runCli(['drops', '--netns', ns, '--count', '1', '--duration', '5']);
      expect(result.exitCode).toBe(2);
      expect(result.stderr).toContain(
        'error: Cannot read nflog group 2: "tcpdump -i nflog:2 -U -w -" exited with 1',
      );
      expect(result.stderr).toContain(
        'hint: another program (ulogd, another `egressguard drops`) listens on nflog group 2',
      );
    } finally {
      await other.stop();
    }
  });
});
