import { randomBytes } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { isEgressguardError } from '../core/index.js';
import { createRunner } from './runner.js';
import { Faults } from './faults.js';

describe('runner root-namespace guard', () => {
  const runner = createRunner({ guard: true });

  it('refuses a change in the root namespace and runs nothing', async () => {
    await expect(runner.run(['nft', '-f', '-'], { effect: 'change', input: '' })).rejects.toThrow(
      /Refusing to run "nft -f -" in the machine's own network namespace/,
    );
    expect(runner.invocations).toHaveLength(0);
  });

  it('treats a command declared read-only but not known to be one as a change', async () => {
    await expect(
      runner.run(['ip', 'route', 'add', 'blackhole', '192.0.2.0/24'], { effect: 'read' }),
    ).rejects.toSatisfy((e: unknown) => isEgressguardError(e) && e.code === 'rootns-guard');
  });

  it('allows reads in the root namespace', async () => {
    const result = await runner.run(['ip', '-j', 'link', 'show'], { effect: 'read' });
    expect(JSON.parse(result.stdout)).toEqual(
      expect.arrayContaining([expect.objectContaining({ ifname: 'lo' })]),
    );
    expect(runner.invocations.at(-1)).toMatchObject({
      argv: ['ip', '-j', 'link', 'show'],
      netns: null,
      effect: 'read',
      exitCode: 0,
    });
  });
});

describe('runner in a network namespace', () => {
  const ns = `egtest-runner-${randomBytes(4).toString('hex')}`;
  // A backend teaches the runner its tool's reads (the nftables backend does for nft).
  const root = createRunner({
    guard: true,
    classifiers: [
      (argv) => (argv[0] === 'nft' ? (argv.includes('list') ? 'read' : 'change') : undefined),
    ],
  });

  beforeAll(async () => {
    await root.run(['ip', 'netns', 'add', ns], { effect: 'change' });
  });
  afterAll(async () => {
    await root.run(['ip', 'netns', 'delete', ns], { effect: 'change', allowFailure: true });
  });

  it('applies a change inside the named namespace only', async () => {
    const inside = root.inNamespace(ns);
    await inside.run(['nft', '-f', '-'], {
      effect: 'change',
      input: 'table inet egtest_probe {}\n',
    });
    const listed = await inside.run(['nft', '-j', 'list', 'tables'], { effect: 'read' });
    expect(listed.stdout).toContain('egtest_probe');
    const rootTables = await root.run(['nft', '-j', 'list', 'tables'], { effect: 'read' });
    expect(rootTables.stdout).not.toContain('egtest_probe');
    expect(root.invocations.some((i) => i.netns === ns && i.effect === 'change')).toBe(true);
  });

  it('reports a failing command with its stderr and the namespace', async () => {
    const inside = root.inNamespace(ns);
    await expect(
      inside.run(['nft', '-f', '-'], {
        effect: 'change',
        input: 'table inet x { chain c { bogus } }\n',
      }),
    ).rejects.toThrow(
      new RegExp(`Command "nft -f -" in namespace "${ns}" failed with exit code 1: .*Error`),
    );
  });

  it('rejects a namespace name that could smuggle arguments', () => {
    expect(() => root.inNamespace('--all')).toThrow(/Cannot use network namespace name "--all"/);
    expect(() => root.inNamespace('a b')).toThrow(/Cannot use network namespace name "a b"/);
  });
});

describe('fault points', () => {
  it('parses EGRESSGUARD_FAULTS and fails at the named point', async () => {
    const faults = Faults.fromEnv('after-nft-commit=fail, compile.kill-switch=on');
    await expect(faults.hit('before-nft-commit')).resolves.toBeUndefined();
    await expect(faults.hit('after-nft-commit')).rejects.toThrow(
      'Fault injected at "after-nft-commit"',
    );
    expect(faults.isOn('compile.kill-switch')).toBe(true);
    expect(faults.history).toEqual(['before-nft-commit', 'after-nft-commit']);
  });

  it('rejects a malformed entry', () => {
    expect(() => Faults.fromEnv('x=explode')).toThrow(
      /Cannot parse EGRESSGUARD_FAULTS entry "x=explode"/,
    );
  });
});

describe('runner binary streams', () => {
  const runner = createRunner({ guard: true });

  it('streams bytes unchanged and records the invocation', async () => {
    const running = runner.startBinary(['cat', '/proc/self/cmdline'], { effect: 'read' });
    const chunks: Uint8Array[] = [];
    for await (const chunk of running.chunks) chunks.push(chunk);
    await expect(running.exited).resolves.toBe(0);
    // cmdline is NUL-separated: line splitting would have mangled it.
    expect(Buffer.concat(chunks).toString('latin1')).toBe('cat\u0000/proc/self/cmdline\u0000');
    expect(runner.invocations.at(-1)).toMatchObject({ argv: ['cat', '/proc/self/cmdline'] });
  });

  it('keeps stderr for error messages', async () => {
    const running = runner.startBinary(['cat', '/nonexistent-egressguard'], { effect: 'read' });
    const chunks: Uint8Array[] = [];
    for await (const chunk of running.chunks) chunks.push(chunk);
    expect(chunks).toEqual([]);
    await expect(running.exited).resolves.toBe(1);
    expect(running.stderr()).toContain('No such file or directory');
  });

  it('refuses a change in the root namespace', () => {
    expect(() => runner.startBinary(['tc', 'qdisc', 'add'], { effect: 'change' })).toThrow(
      /Refusing to run "tc qdisc add"/,
    );
  });
});
