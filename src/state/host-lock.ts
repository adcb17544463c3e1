import { randomBytes } from 'node:crypto';
import { linkSync, readFileSync, unlinkSync, writeFileSync } from 'node:fs';
import { EgressguardError } from '../core/index.js';
import type { StateDir } from './state-dir.js';

/** A held host lock; release it in a `finally`. */
export interface HostLock {
  release(): void;
}

/**
 * One lock per host (or lab namespace) serialises applies. The lock file holds the owner's pid; a
 * lock whose owner is gone (a crash, SIGKILL) is taken over, so a crash never wedges the host.
 */
export function acquireHostLock(state: StateDir, purpose: string): HostLock {
  state.ensure();
  const path = state.file('lock');
  // The lock appears with its owner already written (link(2) of a complete file fails with
  // EEXIST if the lock exists): created empty and written after, a competitor could read it
  // empty in between, take it for stale and delete it, and two applies would run at once.
  const draft = `${path}.${process.pid}.${randomBytes(4).toString('hex')}`;
  writeFileSync(
    draft,
    JSON.stringify({ pid: process.pid, purpose, since: new Date().toISOString() }),
    { mode: 0o600 },
  );
  try {
    return takeLock(path, draft, purpose);
  } finally {
    unlinkSync(draft);
  }
}

function takeLock(path: string, draft: string, purpose: string): HostLock {
  for (let attempt = 0; attempt < 2; attempt++) {
    try {
      linkSync(draft, path);
      return {
        release() {
          try {
            unlinkSync(path);
          } catch {
            // Already gone: nothing to release.
          }
        },
      };
    } catch (error) {
      if ((error as NodeJS.ErrnoException).code !== 'EEXIST') throw error;
      const owner = readOwner(path);
      if (owner !== undefined && isAlive(owner.pid)) {
        throw new EgressguardError(
          'lock-held',
          `Cannot ${purpose}: the host lock "${path}" is held by pid ${owner.pid} (${owner.purpose}) since ${owner.since}`,
          { hint: 'wait for it to finish; if that process is not egressguard, remove the file' },
        );
      }
      unlinkSync(path); // stale: its owner died
    }
  }
  throw new EgressguardError(
    'lock-held',
    `Cannot ${purpose}: the host lock "${path}" keeps reappearing`,
  );
}

interface LockOwner {
  pid: number;
  purpose: string;
  since: string;
}

function readOwner(path: string): LockOwner | undefined {
  try {
    const parsed = JSON.parse(readFileSync(path, 'utf8')) as Partial<LockOwner>;
    if (typeof parsed.pid !== 'number') return undefined;
    return { pid: parsed.pid, purpose: String(parsed.purpose), since: String(parsed.since) };
  } catch {
    return undefined;
  }
}

function isAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (error) {
    return (error as NodeJS.ErrnoException).code === 'EPERM';
  }
}
