import { createHash, randomBytes } from 'node:crypto';
import { linkSync, readdirSync, readFileSync, statSync, unlinkSync, writeFileSync } from 'node:fs';
import { basename, dirname, join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { EgressguardError, isEgressguardError } from '../core/index.js';
import {
  bootTimeMs,
  isProcessAlive,
  ownIdentity,
  type ProcessIdentity,
} from './process-identity.js';
import type { StateDir } from './state-dir.js';

/** A held host lock; release it in a `finally`. */
export interface HostLock {
  release(): void;
}

/** What the lock file holds: its owner, told apart from a later process with the same pid. */
interface LockOwner extends ProcessIdentity {
  readonly token: string;
  readonly purpose: string;
  readonly since: string;
}

/**
 * One lock per host (or lab namespace) serialises applies. The lock file names its owner by pid,
 * start time and boot id: a lock whose owner is gone (a crash, SIGKILL, a reboot that reused the
 * pid) is taken over, so a crash never wedges the host.
 */
export function acquireHostLock(state: StateDir, purpose: string): HostLock {
  state.ensure();
  const path = state.file('lock');
  const owner: LockOwner = {
    ...ownIdentity(),
    token: randomBytes(8).toString('hex'),
    purpose,
    since: new Date().toISOString(),
  };
  // The lock appears with its owner already written (link(2) of a complete file fails with
  // EEXIST if the lock exists): created empty and written after, a competitor could read it
  // empty in between, take it for stale and delete it, and two applies would run at once.
  const draft = `${path}.${process.pid}.${owner.token}`;
  writeFileSync(draft, JSON.stringify(owner), { mode: 0o600 });
  try {
    return takeLock(path, draft, owner);
  } finally {
    unlinkSync(draft);
  }
}

/**
 * Who holds the host lock, when a live process other than this one does: a cheap check before
 * work that would need the lock (the resident's reconcile reads live state first).
 */
export function hostLockHolder(
  state: StateDir,
): { readonly pid: number; readonly purpose: string; readonly since: string } | undefined {
  const current = readLock(state.file('lock'));
  if (current === undefined || !isHeld(state.file('lock'), current.owner)) return undefined;
  if (current.owner.pid === process.pid) return undefined;
  return { pid: current.owner.pid, purpose: current.owner.purpose, since: current.owner.since };
}

/** Like acquireHostLock, but waits while another live process holds the lock, up to `timeoutMs`. */
export async function acquireHostLockWaiting(
  state: StateDir,
  purpose: string,
  options: {
    readonly timeoutMs: number;
    readonly intervalMs?: number;
    /** Called once, when the lock is found held: what holds it, so a person knows why we wait. */
    readonly onWait?: (message: string) => void;
  },
): Promise<HostLock> {
  const deadline = Date.now() + options.timeoutMs;
  let told = false;
  for (;;) {
    try {
      return acquireHostLock(state, purpose);
    } catch (error) {
      if (!isEgressguardError(error) || error.code !== 'lock-held') throw error;
      if (!told) {
        told = true;
        options.onWait?.(error.message);
      }
      if (Date.now() >= deadline) {
        throw new EgressguardError(
          'lock-held',
          `${error.message} (waited ${Math.round(options.timeoutMs / 1000)} s)`,
          { cause: error, ...(error.hint === undefined ? {} : { hint: error.hint }) },
        );
      }
      await sleep(options.intervalMs ?? 100);
    }
  }
}

function takeLock(path: string, draft: string, owner: LockOwner): HostLock {
  for (let attempt = 0; attempt < 5; attempt++) {
    try {
      linkSync(draft, path);
      return heldLock(path, owner.token);
    } catch (error) {
      if ((error as NodeJS.ErrnoException).code !== 'EEXIST') throw error;
    }
    const current = readLock(path);
    if (current === undefined) continue; // released meanwhile: try again
    if (isHeld(path, current.owner)) {
      throw heldError(path, owner.purpose, current.owner);
    }
    if (takeOver(path, draft, current.key)) return heldLock(path, owner.token);
  }
  throw new EgressguardError(
    'lock-held',
    `Cannot ${owner.purpose}: the host lock "${path}" keeps changing hands`,
    { hint: 'another egressguard is starting; try again' },
  );
}

/**
 * Replaces the stale lock whose content has `key`, unless someone else does first. Two processes
 * that both find the lock stale must not both take it: only the one that creates the takeover
 * marker of that stale lock (O_EXCL) may delete it. A marker left by a taker that died is
 * skipped by going one level up, never deleted while contended.
 */
function takeOver(path: string, draft: string, key: string): boolean {
  const prefix = `${path}.takeover.${key}.`;
  let marker: string | undefined;
  for (let level = 1; marker === undefined; level++) {
    const candidate = `${prefix}${level}`;
    try {
      writeFileSync(candidate, JSON.stringify(ownIdentity()), { flag: 'wx', mode: 0o600 });
      marker = candidate;
    } catch (error) {
      if ((error as NodeJS.ErrnoException).code !== 'EEXIST') throw error;
      if (isMarkerLive(candidate)) return false; // another live process is taking it over
    }
  }
  try {
    // Under the marker nobody else can delete this stale lock, its dead owner cannot release it,
    // and no one can link a new one while it exists: if it still has `key`, it is ours to delete.
    const current = readLock(path);
    if (current !== undefined) {
      if (current.key !== key) return false;
      unlinkQuietly(path);
    }
    try {
      linkSync(draft, path);
      return true;
    } catch (error) {
      if ((error as NodeJS.ErrnoException).code === 'EEXIST') return false;
      throw error;
    }
  } finally {
    // The lock no longer has `key`: a late taker of it fails the check above, marker or not.
    for (const name of readdirSync(dirname(path))) {
      if (name.startsWith(basename(prefix))) unlinkQuietly(join(dirname(path), name));
    }
  }
}

function heldLock(path: string, token: string): HostLock {
  return {
    release() {
      // Only while it is still ours: nobody takes over a lock whose owner is alive, so the
      // content cannot change between this read and the unlink.
      if (readLock(path)?.owner?.token === token) unlinkQuietly(path);
    },
  };
}

function heldError(path: string, purpose: string, owner: LockOwner): EgressguardError {
  return new EgressguardError(
    'lock-held',
    `Cannot ${purpose}: the host lock "${path}" is held by pid ${owner.pid} (${owner.purpose}) since ${owner.since}`,
    { hint: 'wait for it to finish; if that process is not egressguard, remove the file' },
  );
}

/** Whether the owner of the lock at `path` still runs. */
function isHeld(path: string, owner: LockOwner | undefined): owner is LockOwner {
  if (owner === undefined) return false; // unreadable: not written by a live egressguard
  if (owner.boot === null || owner.start === null) {
    // An older egressguard's lock (a bare pid): from before this boot, the pid is someone else's.
    const booted = bootTimeMs();
    if (booted !== null && mtimeMs(path) < booted) return false;
  }
  return isProcessAlive(owner);
}

function isMarkerLive(path: string): boolean {
  try {
    const text = readFileSync(path, 'utf8');
    // Created and written in two steps: empty only for a moment, unless its writer died then.
    if (text === '') return Date.now() - mtimeMs(path) < 5000;
    return isProcessAlive(JSON.parse(text) as ProcessIdentity);
  } catch {
    return false;
  }
}

/** The lock's content: its owner if readable, and a key naming this very lock instance. */
function readLock(path: string): { key: string; owner: LockOwner | undefined } | undefined {
  let text: string;
  try {
    text = readFileSync(path, 'utf8');
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code === 'ENOENT') return undefined;
    throw error;
  }
  const owner = parseOwner(text);
  const key =
    owner !== undefined && /^[0-9a-f]{16}$/.test(owner.token)
      ? owner.token
      : createHash('sha256').update(text).digest('hex').slice(0, 16);
  return { key, owner };
}

function parseOwner(text: string): LockOwner | undefined {
  try {
    const parsed = JSON.parse(text) as Partial<LockOwner>;
    if (typeof parsed.pid !== 'number') return undefined;
    return {
      pid: parsed.pid,
      start: typeof parsed.start === 'string' ? parsed.start : null,
      boot: typeof parsed.boot === 'string' ? parsed.boot : null,
      token: typeof parsed.token === 'string' ? parsed.token : '',
      purpose: String(parsed.purpose),
      since: String(parsed.since),
    };
  } catch {
    return undefined;
  }
}

function mtimeMs(path: string): number {
  try {
    return statSync(path).mtimeMs;
  } catch {
    return Date.now();
  }
}

function unlinkQuietly(path: string): void {
  try {
    unlinkSync(path);
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code !== 'ENOENT') throw error;
  }
}
