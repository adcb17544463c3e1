import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { spawnSync } from 'node:child_process';
import { afterEach, describe, expect, it } from 'vitest';
import { StateDir } from './state-dir.js';
import { acquireHostLock } from './host-lock.js';

describe('host lock', () => {
  const root = mkdtempSync(join(tmpdir(), 'eg-state-'));
  afterEach(() => {
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

  it('keeps a namespace state apart from the host state', () => {
    const host = new StateDir({ root });
    const lab = new StateDir({ root, netns: 'lab3' });
    host.write('applied.json', '{"a":1}');
    expect(lab.read('applied.json')).toBeUndefined();
    expect(host.read('applied.json')).toBe('{"a":1}');
  });
});
