import type { Backend, BackendOptions } from '../backends/index.js';
import { EgressguardError } from '../core/index.js';
import type { Runner } from '../runner/index.js';
import { acquireHostLockWaiting, type StateDir } from '../state/index.js';
import { readPendingConfirm, type PendingConfirm } from './confirm-timer.js';
import {
  clearDeadAttempt,
  FILES,
  pruneGenerations,
  readGeneration,
  removeFile,
  writeGeneration,
  type Generation,
} from './generation.js';
import { findMovedTunnels } from './moved-tunnels.js';
import { recordFingerprint } from './record-fingerprint.js';
import { removeOwned } from './remove-generation.js';
import { recordRevert, type RevertOutcome } from './revert-record.js';

const REVERT_LOCK_WAIT_MS = 60_000;

/**
 * The confirm timer's work: unless generation `generation` was confirmed (or superseded) meanwhile,
 * go back to what was live before it: the generation before, or, when it was the first, nothing
 * at all (remove semantics). Either way the reverted generation is no longer the applied one, so
 * neither `run` nor the next boot brings it back.
 */
export async function revertUnconfirmed(input: {
  backend: Backend;
  runner: Runner;
  state: StateDir;
  options: BackendOptions;
  generation: number;
  /** How long to wait for the host lock (default 60 s). */
  lockWaitMs?: number;
  /** Told once when the lock is found held: what holds it (the timer's log says why it waits). */
  onLockWait?: (message: string, timeoutMs: number) => void;
}): Promise<RevertOutcome> {
  const { state, generation: number } = input;
  // The lock may be held for a while (an apply, `run` repairing): the revert must still happen.
  const timeoutMs = input.lockWaitMs ?? REVERT_LOCK_WAIT_MS;
  const lock = await acquireHostLockWaiting(state, `revert unconfirmed generation ${number}`, {
    timeoutMs,
    onWait: (message) => input.onLockWait?.(message, timeoutMs),
  });
  try {
    const pending = readPendingConfirm(state);
    if (pending === undefined || pending.generation !== number) {
      return {
        kind: 'nothing',
        generation: number,
        reason: `generation ${number} was confirmed or superseded: nothing to revert`,
      };
    }
    return await revertPending({ ...input, pending });
  } finally {
    lock.release();
  }
}

/**
 * The revert itself, under the host lock the caller holds (the timer; boot after a reboot),
 * recorded for `status`.
 */
export async function revertPending(input: RevertInput): Promise<RevertOutcome> {
  const outcome = await revertTo(input);
  recordRevert(input.state, input.pending, outcome);
  return outcome;
}

interface RevertInput {
  backend: Backend;
  runner: Runner;
  state: StateDir;
  options: BackendOptions;
  pending: PendingConfirm;
}

async function revertTo(input: RevertInput): Promise<RevertOutcome> {
  const { state, pending } = input;
  const number = pending.generation;
  const applied = readQuietly(state, FILES.applied);
  const previous = readQuietly(state, FILES.previous);
  // Files of an older egressguard do not say what was live before: previous.json did.
  const to = pending.previous === undefined ? (previous?.number ?? null) : pending.previous;
  if (to === null) {
    const removed = await removeOwned(input);
    return { kind: 'removed', generation: number, removed };
  }
  const target = [applied, previous].find((g) => g?.number === to);
  if (target === undefined) {
    return await lockDown(
      { ...input, generation: number },
      applied,
      `generation ${to}, live before generation ${number}, is no longer recorded`,
    );
  }
  // The revert must happen, but not into another VPN wearing the utun name the older generation
  // was bound to: fail closed, and the next apply (or the re-converge) binds the tunnel anew.
  const moved = await findMovedTunnels(input, target);
  if (moved !== null) {
    return await lockDown(
      { ...input, generation: number },
      applied,
      `generation ${to}, live before generation ${number}, cannot be loaded: ${moved}`,
    );
  }
  const { deferred } = await input.backend
    .createApplier({ runner: input.runner, options: target.options })
    .apply(target.artifacts, { previous: undefined });
  // Applied first: a crash between the two writes must not leave the reverted one applied.
  if (applied?.number !== target.number) {
    writeGeneration(state, FILES.applied, target);
    if (applied !== undefined) writeGeneration(state, FILES.previous, applied);
  }
  await recordFingerprint({ ...input, generation: target });
  clearDeadAttempt(state);
  removeFile(state.file(FILES.confirm));
  pruneGenerations(state);
  return { kind: 'reverted', generation: number, restored: target.number, deferred };
}

/** The generation to go back to is recorded nowhere any more, or cannot be loaded: fail closed. */
async function lockDown(
  input: {
    backend: Backend;
    runner: Runner;
    state: StateDir;
    options: BackendOptions;
    generation: number;
  },
  applied: Generation | undefined,
  why: string,
): Promise<RevertOutcome> {
  const { state } = input;
  const lockdown = state.read(FILES.lockdown);
  if (lockdown === undefined) {
    throw new EgressguardError(
      'state-corrupt',
      `Cannot revert generation ${input.generation}: ${why}, and no class lockdown was saved at ${state.file(FILES.lockdown)}`,
      { hint: 'apply a policy, or run `egressguard remove`' },
    );
  }
  await input.backend
    .createApplier({ runner: input.runner, options: input.options })
    .lockdown(lockdown);
  if (applied?.number === input.generation) {
    // Not applied any more: boot loads the lockdown (state missing), never this generation.
    writeGeneration(state, FILES.previous, applied);
    removeFile(state.file(FILES.applied));
  }
  clearDeadAttempt(state);
  removeFile(state.file(FILES.confirm));
  pruneGenerations(state);
  return {
    kind: 'lockdown',
    generation: input.generation,
    reason: `${why}: the class lockdown is loaded`,
  };
}

function readQuietly(state: StateDir, name: string): Generation | undefined {
  try {
    return readGeneration(state, name);
  } catch {
    return undefined;
  }
}
