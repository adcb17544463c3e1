import type { Backend, BackendOptions, LiveProblem } from '../backends/index.js';
import { EgressguardError, isEgressguardError } from '../core/index.js';
import type { Runner } from '../runner/index.js';
import {
  acquireHostLockWaiting,
  currentBootId,
  type HostLock,
  type StateDir,
} from '../state/index.js';
import {
  clearDeadAttempt,
  FILES,
  pruneGenerations,
  readGeneration,
  writeGeneration,
  type Generation,
} from './generation.js';
import { clearFailure, recordFailure } from './failure-record.js';
import { findMovedTunnels } from './moved-tunnels.js';
import { recordFingerprint } from './record-fingerprint.js';
import { revertPending } from './revert-generation.js';
import { readPendingFile, type PendingConfirm } from './confirm-timer.js';

export type RestoreOutcome =
  | {
      readonly kind: 'restored';
      readonly generation: number;
      readonly deferred: readonly LiveProblem[];
    }
  | {
      readonly kind: 'reverted';
      readonly generation: number;
      readonly restored: number;
      readonly deferred: readonly LiveProblem[];
      readonly reason: string;
    }
  | {
      readonly kind: 'removed';
      readonly generation: number;
      readonly removed: readonly string[];
      readonly reason: string;
    }
  | { readonly kind: 'lockdown'; readonly reason: string }
  | { readonly kind: 'nothing'; readonly reason: string };

/** How long boot waits for the host lock before it loads the lockdown without it. */
const BOOT_LOCK_WAIT_MS = 30_000;

/**
 * Boot: load the last applied generation (it must work with the tunnel absent: the rule and the
 * blackhole go in, the tunnel route waits). When that generation cannot be loaded, for whatever
 * reason (state missing or corrupt, the firewall refuses it, routing in the way, the host lock held),
 * load the class lockdown instead: fail closed. With `from`, a manual rollback instead: it
 * records the generation it restores as applied, and its failures are errors.
 */
export async function restoreGeneration(input: {
  backend: Backend;
  runner: Runner;
  state: StateDir;
  options: BackendOptions;
  /** Restore this file instead of the applied generation (`restore --previous`). */
  from?: string;
  /** How long to wait for the host lock (default 30 s). */
  lockWaitMs?: number;
  /** Told once when the lock is found held: what holds it, so a person knows why it waits. */
  onLockWait?: (message: string, timeoutMs: number) => void;
}): Promise<RestoreOutcome> {
  const { state } = input;
  let lock: HostLock | undefined;
  try {
    const timeoutMs = input.lockWaitMs ?? BOOT_LOCK_WAIT_MS;
    lock = await acquireHostLockWaiting(state, 'restore the last applied state', {
      timeoutMs,
      onWait: (message) => input.onLockWait?.(message, timeoutMs),
    });
  } catch (error) {
    if (input.from !== undefined || !isEgressguardError(error) || error.code !== 'lock-held') {
      throw error;
    }
    // Another live egressguard holds the lock, and boot cannot wait for ever: fail closed. Were
    // it an apply, its table replaces the lockdown; were it `run`, it repairs it.
    return loadLockdown(input, `Cannot load the applied generation: ${error.message}`);
  }
  try {
    if (input.from !== undefined) return await rollBack({ ...input, from: input.from });
    if (state.read(FILES.removed) !== undefined && state.read(FILES.applied) === undefined) {
      return { kind: 'nothing', reason: 'egressguard was removed explicitly' };
    }
    const pending = readPendingFile(state)?.pending;
    if (pending?.boot != null && pending.boot !== currentBootId()) {
      return await revertAtBoot(input, pending);
    }
    let generation: Generation | undefined;
    try {
      generation = readGeneration(state, FILES.applied);
    } catch (error) {
      return await loadLockdown(input, (error as Error).message);
    }
    if (generation === undefined) {
      return await loadLockdown(input, `no state at ${state.file(FILES.applied)}`);
    }
    // A tunnel found by `match` that is elsewhere now (a utun renumbered while the Mac was down
    // or asleep): the generation would route its class into whatever wears the old name, or, on
    // pf, fail to load ("routeto: unknown interface"). Fail closed; the re-converge binds anew.
    const moved = await findMovedTunnels(input, generation);
    if (moved !== null) {
      return await loadLockdown(input, `Cannot load generation ${generation.number}: ${moved}`);
    }
    try {
      const { deferred } = await input.backend
        .createApplier({ runner: input.runner, options: generation.options })
        .apply(generation.artifacts, { previous: undefined });
      await recordFingerprint({ ...input, generation });
      clearDeadAttempt(state);
      clearFailure(state, 'restore');
      return { kind: 'restored', generation: generation.number, deferred };
    } catch (error) {
      return await loadLockdown(
        input,
        `Cannot load generation ${generation.number}: ${(error as Error).message}`,
      );
    }
  } finally {
    lock.release();
  }
}

/**
 * A confirmation pending from before a reboot: its timer died with that boot (a systemd-run timer
 * is transient, a timer process is gone), so the revert happens now, or boot would bring back the
 * unconfirmed generation for good. Whoever rebooted a host they could not reach counts on it.
 */
async function revertAtBoot(
  input: { backend: Backend; runner: Runner; state: StateDir; options: BackendOptions },
  pending: PendingConfirm,
): Promise<RestoreOutcome> {
  const reason = `generation ${pending.generation} was still unconfirmed when the host went down`;
  let outcome;
  try {
    outcome = await revertPending({ ...input, pending });
  } catch (error) {
    return loadLockdown(input, `${reason}, and its revert failed: ${(error as Error).message}`);
  }
  switch (outcome.kind) {
    case 'reverted':
    case 'removed':
      return { ...outcome, reason };
    case 'lockdown':
    case 'nothing':
      return { kind: outcome.kind, reason: `${reason}: ${outcome.reason}` };
  }
}

/** `restore --previous`: the generation before becomes the applied one again. */
async function rollBack(input: {
  backend: Backend;
  runner: Runner;
  state: StateDir;
  from: string;
}): Promise<RestoreOutcome> {
  const { state } = input;
  const generation = readGeneration(state, input.from);
  if (generation === undefined) {
    throw new EgressguardError(
      'usage',
      `Nothing to restore: no generation is recorded at ${state.file(input.from)}`,
    );
  }
  // Bound to a utun that is another now (the VPN reconnected under a new number), it would route
  // its class into whatever wears the old name: refuse, changing nothing.
  const moved = await findMovedTunnels(input, generation);
  if (moved !== null) {
    throw new EgressguardError(
      'usage',
      `Cannot restore generation ${generation.number}: ${moved}`,
      {
        hint: 'apply the policy on live facts (or with --facts FILE --live-tunnels), which binds its tunnels where they are now',
      },
    );
  }
  const { deferred } = await input.backend
    .createApplier({ runner: input.runner, options: generation.options })
    .apply(generation.artifacts, { previous: undefined });
  // The generation restored is the applied one now, or `status` would call the host Drifted and
  // `run` or the next boot would bring back the generation just rolled back.
  const replaced = readCurrent(state);
  writeGeneration(state, FILES.applied, generation);
  if (replaced !== undefined) writeGeneration(state, FILES.previous, replaced);
  await recordFingerprint({ ...input, generation });
  clearDeadAttempt(state);
  pruneGenerations(state);
  return { kind: 'restored', generation: generation.number, deferred };
}

async function loadLockdown(
  input: { backend: Backend; runner: Runner; state: StateDir; options: BackendOptions },
  problem: string,
): Promise<RestoreOutcome> {
  const lockdown = input.state.read(FILES.lockdown);
  if (lockdown === undefined) {
    throw new EgressguardError(
      'state-corrupt',
      `Cannot restore: ${problem}, and no class lockdown was saved at ${input.state.file(FILES.lockdown)}`,
      { hint: 'apply a policy; until then no class traffic is filtered by egressguard' },
    );
  }
  try {
    await input.backend
      .createApplier({ runner: input.runner, options: input.options })
      .lockdown(lockdown);
    // Failing closed is safe, not healthy: `status` says so until an apply goes in.
    recordFailure(input.state, {
      operation: 'restore',
      message: `the class lockdown was loaded instead: ${problem}`,
    });
  } catch (error) {
    throw new EgressguardError(
      'apply-failed',
      `Cannot restore: ${problem}, and the class lockdown failed to load too: ${(error as Error).message}`,
      { cause: error },
    );
  }
  return { kind: 'lockdown', reason: problem };
}

function readCurrent(state: StateDir): Generation | undefined {
  try {
    return readGeneration(state, FILES.applied);
  } catch {
    return undefined;
  }
}
