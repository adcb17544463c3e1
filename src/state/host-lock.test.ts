import { spawn, spawnSync } from 'node:child_process';
import { existsSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, describe, expect, it } from 'vitest';
import { StateDir } from './state-dir.js';
import { acquireHostLock, acquireHostLockWaiting } from './host-lock.js';
import { currentBootId, ownIdentity } from './process-identity.js';

describe('host lock', () => {
  const root = mkdtempSync(join(tmpdir(), 'eg-state-'));
  afterAll(() => {
    rmSync(root, { recursive: true, force: true });
  });

  it('serialises holders and names the holder in the error', () => {
    const state = new StateDir({ root, netns: 'lab1' });
    const lock = acquireHostLock(state, 'apply a policy');
    expect(() => acquireHostLock(state, 'remove the table')).toThrow(
      new RegExp(
        `Cannot remove the table: the host lock ".*lab1/lock" is held by pid ${process.pid} \\(apply a policy\\)`,
      ),
    );
    lock.release();
    acquireHostLock(state, 'remove the table').release();
  });

  it('takes over a lock whose owner died', () => {
    const state = new StateDir({ root, netns: 'lab2' });
    state.ensure();
    const dead = spawnSync('true').pid; // a pid that has exited
    writeFileSync(state.file('lock'), JSON.stringify({ pid: dead, purpose: 'apply', since: 'x' }));
    const lock = acquireHostLock(state, 'apply a policy');
    lock.release();
  });

  it('takes over a lock from another boot even when its pid runs again', () => {
    const state = new StateDir({ root, netns: 'reboot' });
    state.ensure();
    // After a crash and a reboot, the recorded pid is often some other live process: this one.
    const me = ownIdentity();
    writeFileSync(
      state.file('lock'),
      JSON.stringify({
        ...me,
        boot: '00000000-0000-4000-8000-000000000000',
        token: 'aaaaaaaaaaaaaaaa',
        purpose: 'apply a policy',
        since: 'before the reboot',
      }),
    );
    const lock = acquireHostLock(state, 'restore the last applied state');
    expect(JSON.parse(readFileSync(state.file('lock'), 'utf8'))).toMatchObject({
      pid: process.pid,
      purpose: 'restore the last applied state',
    });
    lock.release();
    expect(existsSync(state.file('lock'))).toBe(false);
  });

  it('takes over a lock whose pid now belongs to a process that started later', () => {
    const state = new StateDir({ root, netns: 'reused' });
    state.ensure();
    writeFileSync(
      state.file('lock'),
      JSON.stringify({
        pid: process.pid,
        start: '1', // this pid's first owner started one tick after boot; this process did not
        boot: currentBootId(),
        token: 'bbbbbbbbbbbbbbbb',
        purpose: 'apply a policy',
        since: 'x',
      }),
    );
    acquireHostLock(state, 'apply a policy').release();
  });

  it('keeps a lock whose owner runs (same pid, start time and boot)', () => {
    const state = new StateDir({ root, netns: 'alive' });
    state.ensure();
    writeFileSync(
      state.file('lock'),
      JSON.stringify({ ...ownIdentity(), token: 'cccccccccccccccc', purpose: 'run', since: 'x' }),
    );
    expect(() => acquireHostLock(state, 'apply a policy')).toThrow(/is held by pid/);
  });

  it('releases only a lock that is still its own', () => {
    const state = new StateDir({ root, netns: 'release' });
    const lock = acquireHostLock(state, 'apply a policy');
    // Someone else's lock now stands where ours was (taken over as stale, or removed by hand).
    const foreign = JSON.stringify({
      ...ownIdentity(),
      token: 'dddddddddddddddd',
      purpose: 'run',
      since: 'x',
    });
    writeFileSync(state.file('lock'), foreign);
    lock.release();
    expect(readFileSync(state.file('lock'), 'utf8')).toBe(foreign);
  });

  it('waits for a held lock up to its deadline', async () => {
    const state = new StateDir({ root, netns: 'wait' });
    const held = acquireHostLock(state, 'apply a policy');
    const told: string[] = [];
    // Released once the waiter says it found the lock held: it waited, whatever the clock says.
    const lock = await acquireHostLockWaiting(state, 'revert', {
      timeoutMs: 60_000,
      intervalMs: 20,
      onWait: (message) => {
        told.push(message);
        held.release();
      },
    });
    expect(told).toHaveLength(1);
    expect(told[0]).toMatch(
      /^Cannot revert: the host lock ".*" is held by pid \d+ \(apply a policy\)/,
    );
    lock.release();
    const again = acquireHostLock(state, 'apply a policy');
    await expect(
      acquireHostLockWaiting(state, 'revert', { timeoutMs: 200, intervalMs: 20 }),
    ).rejects.toThrow(/is held by pid .* \(waited 0 s\)/);
    again.release();
  });

  it('hands a stale lock to exactly one of many processes racing for it', async () => {
    // Each child takes the lock, holds it 40 ms and dies without releasing it (SIGKILL-like):
    // every hand-over is a takeover of a dead owner's lock, raced by all the children left.
    const hostLock = fileURLToPath(new URL('../../dist/state/host-lock.js', import.meta.url));
    const stateDir = fileURLToPath(new URL('../../dist/state/state-dir.js', import.meta.url));
    expect(existsSync(hostLock), 'run `npm run build` first: the children use dist/').toBe(true);
    const dir = join(root, 'race');
    const log = join(root, 'race.log');
    const startAt = Date.now() + 500;
    const child = `
      import { appendFileSync } from 'node:fs';
      import { acquireHostLock } from ${JSON.stringify(hostLock)};
      import { StateDir } from ${JSON.stringify(stateDir)};
      const state = new StateDir({ root: ${JSON.stringify(dir)}, netns: 'race' });
      const nap = (ms) => Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, ms);
      while (Date.now() < ${startAt}) nap(1);
      for (const end = Date.now() + 20000; Date.now() < end; ) {
        try {
          acquireHostLock(state, 'race');
        } catch (error) {
          if (error.code !== 'lock-held') throw error;
          continue;
        }
        appendFileSync(${JSON.stringify(log)}, 'in ' + process.pid + ' ' + (performance.timeOrigin + performance.now()) + '\\n');
        nap(40);
        appendFileSync(${JSON.stringify(log)}, 'out ' + process.pid + ' ' + (performance.timeOrigin + performance.now()) + '\\n');
        process.exit(0);
      }
      process.exit(1);
    `;
    const children = Array.from({ length: 8 }, () =>
      spawn(process.execPath, ['--input-type=module', '-e', child], { stdio: 'inherit' }),
    );
    const codes = await Promise.all(
      children.map((c) => new Promise<number | null>((resolve) => c.once('exit', resolve))),
    );
    expect(codes).toEqual(Array.from({ length: 8 }, () => 0));
    // Holders never overlap: each "in" follows the previous holder's "out".
    const events = readFileSync(log, 'utf8')
      .trim()
      .split('\n')
      .map((line) => {
        const [what, pid, at] = line.split(' ');
        return { what, pid, at: Number(at) };
      })
      .sort((a, b) => a.at - b.at);
    expect(events.map((e) => e.what)).toEqual(
      Array.from({ length: 8 }, () => ['in', 'out']).flat(),
    );
    // No takeover marker is left behind.
    expect(readdirSync(join(dir, 'netns', 'race')).filter((n) => n.includes('takeover'))).toEqual(
      [],
    );
  });

  it('keeps a namespace state apart from the host state', () => {
    const host = new StateDir({ root });
    const lab = new StateDir({ root, netns: 'lab3' });
    host.write('applied.json', '{"a":1}');
    expect(lab.read('applied.json')).toBeUndefined();
    expect(host.read('applied.json')).toBe('{"a":1}');
  });
});
