import { existsSync, readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { FILES, readGeneration } from '../../src/apply/index.js';
import type { Lab } from '../../src/prove/index.js';
import { StateDir } from '../../src/state/index.js';
import {
  FACTS,
  HOST,
  POLICY_A,
  apply,
  cli,
  createGatewayLab,
  createTempDir,
  holdHostLock,
  liveStamp,
  ownTableJson,
  routingListing,
  startCli,
  status,
  target,
  writePolicyB,
} from './support/vpn-gateway-lab.js';

// Confirm or revert (DESIGN.md §5), driven step by step: the revert the timer would run is run
// here at once (`restore --unconfirmed N`), so each case takes a second, not a timeout. The timer
// processes the applies start are killed by pid when each case ends. Real kernel, one lab; each
// case has a state directory of its own.

describe('confirm or revert', () => {
  let lab: Lab;
  const dirs: ReturnType<typeof createTempDir>[] = [];

  beforeAll(async () => {
    lab = await createGatewayLab();
  });

  afterAll(async () => {
    killTimers(dirs.map((d) => d.path));
    await lab.destroy();
    for (const dir of dirs) dir.dispose();
  });

  /** A fresh state directory, with nothing of ours live in the lab. */
  const fresh = async (name: string): Promise<{ path: string; state: StateDir }> => {
    const dir = createTempDir(`egtest-confirm-${name}`);
    dirs.push(dir);
    const removed = await cli(['remove', ...target(lab, dir.path)]);
    expect(removed.exitCode).toBe(0);
    return { path: dir.path, state: new StateDir({ root: dir.path, netns: lab.ns(HOST) }) };
  };

  const pendingOf = (state: StateDir): { generation: number } | undefined => {
    const text = state.read(FILES.confirm);
    return text === undefined ? undefined : (JSON.parse(text) as { generation: number });
  };

  it('reverts an unconfirmed apply to the previous generation and records both', async () => {
    const { path, state } = await fresh('previous');
    const a = await apply(lab, path, POLICY_A);
    const b = await apply(lab, path, writePolicyB(path), ['--confirm-within', '60s']);
    expect(b).toMatchObject({ changed: true, generation: 2 });
    expect(pendingOf(state)).toMatchObject({ generation: 2 });

    const reverted = await cli(['restore', '--unconfirmed', '2', ...target(lab, path)]);
    expect(reverted).toMatchObject({ exitCode: 0, stderr: '' });
    expect(await liveStamp(lab)).toBe(a.hash);
    expect(pendingOf(state)).toBeUndefined();
    // The generation put back is the applied one; the one reverted is kept as previous, whole.
    expect(readGeneration(state, FILES.applied)).toMatchObject({ number: 1, hash: a.hash });
    const previous = readGeneration(state, FILES.previous);
    expect(previous).toMatchObject({ number: 2, hash: b.hash });
    for (const artifact of previous?.artifacts ?? []) expect(artifact.content).not.toBe('');
    expect(await status(lab, path)).toMatchObject({
      condition: 'InSync',
      appliedHash: a.hash,
      liveHash: a.hash,
    });
    // Nothing is left to confirm: a late `confirm` must not claim the reverted generation.
    const late = await cli(['confirm', ...target(lab, path)]);
    expect(late.exitCode).toBe(2);
    expect(late.stderr).toContain('Nothing to confirm');
    // Numbers only go up: the timer of generation 2 can never take a later one for its own.
    const again = await apply(lab, path, writePolicyB(path));
    expect(again).toMatchObject({ changed: true, generation: 3, hash: b.hash });
  });

  it('status shows the deadline while it is pending, then "reverted at T: not confirmed"', async () => {
    const { path } = await fresh('status');
    await apply(lab, path, POLICY_A);
    await apply(lab, path, writePolicyB(path), ['--confirm-within', '60s']);
    const pending = await status(lab, path);
    expect(pending.pendingConfirm).toMatchObject({ generation: 2, previous: 1 });
    const deadline = pending.pendingConfirm?.deadline ?? '';
    expect(Date.parse(deadline)).toBeGreaterThan(Date.now());
    const words = await cli(['status', ...target(lab, path)]);
    expect(words.stdout).toMatch(
      new RegExp(
        `^  awaiting confirmation: generation 2 goes back to generation 1 at ${deadline} \\(in \\d+ s\\) unless \`egressguard confirm\` runs first$`,
        'm',
      ),
    );

    expect((await cli(['restore', '--unconfirmed', '2', ...target(lab, path)])).exitCode).toBe(0);
    const reverted = await status(lab, path);
    expect(reverted).toMatchObject({
      condition: 'InSync',
      generation: 1,
      pendingConfirm: null,
      revert: { generation: 2, deadline, outcome: 'reverted', restored: 1 },
    });
    const at = reverted.revert?.at ?? '';
    expect(reverted.reasons).toContain(
      `reverted at ${at}: not confirmed: generation 2 had to be confirmed by ${deadline}; generation 1, live before it, is applied again`,
    );
    // The next apply that goes in is what the host runs now: the record has said its piece.
    await apply(lab, path, writePolicyB(path));
    expect((await status(lab, path)).revert).toBeNull();
  });

  it('status says a reverted first apply was not confirmed, not only NotApplied', async () => {
    const { path } = await fresh('status-first');
    await apply(lab, path, POLICY_A, ['--confirm-within', '60s']);
    expect((await cli(['restore', '--unconfirmed', '1', ...target(lab, path)])).exitCode).toBe(0);
    const words = await cli(['status', ...target(lab, path)]);
    expect(words.exitCode).toBe(3);
    const lines = words.stdout.split('\n');
    expect(lines[0]).toBe('NotApplied');
    expect(lines[1]).toMatch(
      /^ {2}reverted at \S+: not confirmed: generation 1 had to be confirmed by \S+; it was the first, so what it applied was removed$/,
    );
  });

  it('has the revert timer running before the commit: a kill right after it still reverts', async () => {
    const { path, state } = await fresh('killed');
    const a = await apply(lab, path, POLICY_A);
    const b = writePolicyB(path);
    const killed = await cli(
      ['apply', b, '--facts', FACTS, '--confirm-within', '60s', ...target(lab, path)],
      { faults: 'before-state-write=kill' },
    );
    expect(killed.signal).toBe('SIGKILL');
    expect(await liveStamp(lab)).not.toBe(a.hash); // B's table is live, unrecorded, unconfirmed
    expect(pendingOf(state)).toMatchObject({ generation: 2, previous: 1 });
    expect(timerPids([path])).toHaveLength(1);
    // Nobody can confirm what was never recorded as applied: the timer must run.
    const confirmed = await cli(['confirm', ...target(lab, path)]);
    expect(confirmed.exitCode).toBe(2);
    expect(confirmed.stderr).toContain(
      'Cannot confirm generation 2: it is not the applied generation (that is 1)',
    );
    expect(pendingOf(state)).toMatchObject({ generation: 2 });
    expect(timerPids([path])).toHaveLength(1);

    const reverted = await cli(['restore', '--unconfirmed', '2', '--json', ...target(lab, path)]);
    expect(JSON.parse(reverted.stdout)).toMatchObject({
      kind: 'reverted',
      generation: 2,
      restored: 1,
    });
    expect(await liveStamp(lab)).toBe(a.hash);
    expect(await status(lab, path)).toMatchObject({
      condition: 'InSync',
      appliedHash: a.hash,
      attempt: null,
    });
  });

  it('waits for the host lock while another egressguard holds it, then reverts', async () => {
    const { path } = await fresh('lock-held');
    const a = await apply(lab, path, POLICY_A);
    const b = await apply(lab, path, writePolicyB(path), ['--confirm-within', '60s']);
    const holder = holdHostLock(lab, path);
    const reverting = startCli(['restore', '--unconfirmed', '2', '--json', ...target(lab, path)]);
    // The handshake: the revert says whom it waits for (in the timer's log on a real host).
    await reverting.stderrMatching(/waiting up to 60s$/m);
    expect(await liveStamp(lab)).toBe(b.hash); // nothing reverted while the lock is held
    holder.release();
    const reverted = await reverting.result;
    expect(reverted.exitCode).toBe(0);
    expect(reverted.stderr).toMatch(
      /^warning: Cannot revert unconfirmed generation 2: the host lock ".*" is held by pid \d+ \(repair the applied state\) since .*; waiting up to 60s$/,
    );
    expect(JSON.parse(reverted.stdout)).toMatchObject({ kind: 'reverted', restored: 1 });
    expect(await liveStamp(lab)).toBe(a.hash);
  });

  it('lets a later apply supersede a pending confirmation: its timer never reverts', async () => {
    const { path, state } = await fresh('superseded');
    await apply(lab, path, POLICY_A);
    await apply(lab, path, writePolicyB(path), ['--confirm-within', '60s']);
    const [timer] = timerPids([path]);
    expect(timer).toBeDefined();
    // Back to A for good, without a window: generation 2's revert must not touch it.
    const again = await apply(lab, path, POLICY_A);
    expect(again).toMatchObject({ changed: true, generation: 3 });
    expect(pendingOf(state)).toBeUndefined();
    expect(timerPids([path])).toEqual([]);
    const late = await cli(['restore', '--unconfirmed', '2', '--json', ...target(lab, path)]);
    expect(JSON.parse(late.stdout)).toMatchObject({ kind: 'nothing' });
    expect(await status(lab, path)).toMatchObject({
      condition: 'InSync',
      liveHash: again.hash,
      generation: 3,
    });
  });

  it('replaces a pending confirmation with the newer one, and keeps it when the apply fails', async () => {
    const { path, state } = await fresh('replaced');
    await apply(lab, path, POLICY_A);
    const b = await apply(lab, path, writePolicyB(path), ['--confirm-within', '60s']);
    const [first] = timerPids([path]);
    // A failed apply changes nothing: generation 2 stays pending, its timer keeps running.
    const rejected = await cli(
      ['apply', POLICY_A, '--facts', FACTS, '--confirm-within', '60s', ...target(lab, path)],
      { faults: 'compile.broken-ruleset=on' },
    );
    expect(rejected.exitCode).toBe(2);
    expect(pendingOf(state)).toMatchObject({ generation: 2 });
    expect(timerPids([path])).toEqual([first]);
    // One that goes in replaces it: only its own timer runs, reverting to generation 2.
    const c = await apply(lab, path, POLICY_A, ['--confirm-within', '60s']);
    expect(c).toMatchObject({ changed: true, generation: 3 });
    expect(pendingOf(state)).toMatchObject({ generation: 3, previous: 2 });
    const timers = timerPids([path]);
    expect(timers).toHaveLength(1);
    expect(timers).not.toContain(first);
    const reverted = await cli(['restore', '--unconfirmed', '3', '--json', ...target(lab, path)]);
    expect(JSON.parse(reverted.stdout)).toMatchObject({ kind: 'reverted', restored: 2 });
    expect(await liveStamp(lab)).toBe(b.hash);
  });

  it('confirms under the host lock, after whoever holds it', async () => {
    const { path, state } = await fresh('confirm-lock');
    await apply(lab, path, POLICY_A);
    const b = await apply(lab, path, writePolicyB(path), ['--confirm-within', '60s']);
    const holder = holdHostLock(lab, path, `revert unconfirmed generation ${b.generation}`);
    const confirming = startCli(['confirm', ...target(lab, path)]);
    await confirming.stderrMatching(/waiting up to 30s$/m);
    expect(pendingOf(state)).toMatchObject({ generation: 2 }); // not confirmed while it waits
    holder.release();
    const confirmed = await confirming.result;
    expect(confirmed).toMatchObject({ exitCode: 0, stdout: 'confirmed generation 2' });
    expect(confirmed.stderr).toMatch(
      /^warning: Cannot confirm the applied generation: the host lock ".*" is held by pid \d+ \(revert unconfirmed generation 2\) since .*; waiting up to 30s$/,
    );
    expect(pendingOf(state)).toBeUndefined();
    expect(timerPids([path])).toEqual([]);
  });

  it('prints a confirm command that names the same state directory and table', async () => {
    const { path } = await fresh('hint');
    const applied = await cli([
      'apply',
      POLICY_A,
      '--facts',
      FACTS,
      '--confirm-within',
      '60s',
      '--table',
      'egressguard',
      ...target(lab, path),
    ]);
    expect(applied.exitCode).toBe(0);
    const hint = /run `(egressguard confirm[^`]*)`/.exec(applied.stdout)?.[1];
    expect(hint).toBe(
      `egressguard confirm --netns ${lab.ns(HOST)} --state-dir ${path} --table egressguard`,
    );
    // Pasted as printed, it confirms.
    const confirmed = await cli((hint ?? '').split(' ').slice(1));
    expect(confirmed).toMatchObject({ exitCode: 0, stdout: 'confirmed generation 1' });
  });

  it('reports a corrupt pending confirmation as corrupt state, not a crash', async () => {
    const { path, state } = await fresh('corrupt');
    await apply(lab, path, POLICY_A, ['--confirm-within', '60s']);
    writeFileSync(state.file(FILES.confirm), '{"generation": 1, "timer": nul');
    for (const args of [['confirm'], ['restore', '--unconfirmed', '1']]) {
      const result = await cli([...args, ...target(lab, path)]);
      expect(result.exitCode, args[0]).toBe(2);
      expect(result.stderr).toContain(
        `error: Cannot read state "${state.file(FILES.confirm)}": not a pending confirmation`,
      );
      expect(result.stderr).toContain('hint: delete');
      expect(result.stderr).not.toContain('Internal error');
    }
  });

  it('stops the revert timer when the apply fails before its commit', async () => {
    const { path, state } = await fresh('rejected');
    const a = await apply(lab, path, POLICY_A);
    const rejected = await cli(
      [
        'apply',
        writePolicyB(path),
        '--facts',
        FACTS,
        '--confirm-within',
        '60s',
        ...target(lab, path),
      ],
      { faults: 'compile.broken-ruleset=on' },
    );
    expect(rejected.exitCode).toBe(2);
    expect(pendingOf(state)).toBeUndefined();
    expect(timerPids([path])).toEqual([]);
    expect(await status(lab, path)).toMatchObject({ condition: 'InSync', liveHash: a.hash });
  });

  /** Nothing of ours is live, nothing is recorded as applied, and boot restores nothing. */
  const expectRemoved = async (path: string, state: StateDir): Promise<void> => {
    expect(await ownTableJson(lab)).toBe('[]');
    expect(await routingListing(lab, 7350)).not.toContain('proto 104');
    for (const file of [FILES.applied, FILES.attempt, FILES.confirm, FILES.lockdown]) {
      expect(existsSync(state.file(file)), file).toBe(false);
    }
    expect(existsSync(state.file('removed.json'))).toBe(true);
    expect(await status(lab, path)).toMatchObject({ condition: 'NotApplied', attempt: null });
    const boot = await cli(['restore', '--json', ...target(lab, path)]);
    expect(boot.exitCode).toBe(0);
    expect(JSON.parse(boot.stdout)).toMatchObject({ kind: 'nothing' });
    expect(await ownTableJson(lab)).toBe('[]');
  };

  it('reverts an unconfirmed first apply by removing what egressguard owns', async () => {
    const { path, state } = await fresh('first');
    const a = await apply(lab, path, POLICY_A, ['--confirm-within', '60s']);
    expect(a).toMatchObject({ changed: true, generation: 1 });
    expect(await liveStamp(lab)).toBe(a.hash);

    const reverted = await cli(['restore', '--unconfirmed', '1', '--json', ...target(lab, path)]);
    expect(reverted).toMatchObject({ exitCode: 0, stderr: '' });
    expect(JSON.parse(reverted.stdout)).toMatchObject({ kind: 'removed', generation: 1 });
    await expectRemoved(path, state);
  });

  it('reverts a first apply after a remove to nothing, not to the generation removed', async () => {
    const { path, state } = await fresh('after-remove');
    await apply(lab, path, POLICY_A);
    expect((await cli(['remove', ...target(lab, path)])).exitCode).toBe(0);
    const b = await apply(lab, path, writePolicyB(path), ['--confirm-within', '60s']);
    expect(b.changed).toBe(true);

    const reverted = await cli([
      'restore',
      '--unconfirmed',
      String(b.generation),
      '--json',
      ...target(lab, path),
    ]);
    expect(JSON.parse(reverted.stdout)).toMatchObject({ kind: 'removed' });
    await expectRemoved(path, state);
  });
});

/**
 * The revert timers (detached `restore --unconfirmed … --after S` processes) that applies with
 * these state directories started and that still wait.
 */
function timerPids(stateDirs: readonly string[]): number[] {
  const pids: number[] = [];
  for (const pid of readdirSync('/proc').filter((name) => /^\d+$/.test(name))) {
    let argv: string[];
    try {
      argv = readFileSync(join('/proc', pid, 'cmdline'), 'utf8').split('\0');
    } catch {
      continue; // gone meanwhile
    }
    const dir = argv[argv.indexOf('--state-dir') + 1];
    if (argv.includes('--unconfirmed') && dir !== undefined && stateDirs.includes(dir)) {
      pids.push(Number(pid));
    }
  }
  return pids;
}

/** Kills them by pid, so none outlives the test. */
function killTimers(stateDirs: readonly string[]): void {
  for (const pid of timerPids(stateDirs)) {
    try {
      process.kill(pid, 'SIGKILL');
    } catch {
      // Already gone.
    }
  }
}
