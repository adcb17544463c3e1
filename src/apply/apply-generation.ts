import type {
  Artifact,
  Backend,
  BackendOptions,
  BoundTunnel,
  LiveProblem,
  LiveState,
} from '../backends/index.js';
import { createStepTimer, EgressguardError, type StepTimings } from '../core/index.js';
import type { Runner } from '../runner/index.js';
import {
  acquireHostLock,
  acquireHostLockWaiting,
  ownIdentity,
  type StateDir,
} from '../state/index.js';
import {
  cancelRevert,
  readPendingFile,
  scheduleRevert,
  type PendingConfirm,
  type PendingFile,
} from './confirm-timer.js';
import {
  FILES,
  pruneGenerations,
  readGeneration,
  removeFile,
  storeArtifacts,
  writeGeneration,
  writeJson,
  type Generation,
} from './generation.js';
import { clearFailure } from './failure-record.js';
import { clearRevert } from './revert-record.js';

export interface ApplyInput {
  readonly backend: Backend;
  readonly runner: Runner;
  readonly state: StateDir;
  readonly options: BackendOptions;
  readonly policy: string;
  readonly hash: string;
  readonly artifacts: readonly Artifact[];
  /** The tunnels the artifacts were bound to: recorded, so boot can tell when one moved. */
  readonly tunnels?: readonly BoundTunnel[];
  /** Artifacts of the class lockdown, kept for `restore` when state is lost. */
  readonly lockdown?: string;
  /**
   * Apply even when live state looks unchanged, and refill the sets that are live already: the
   * read-back cannot see every edit (set elements are not in the terse listing the fingerprint
   * is taken from, apart from the small class sets).
   */
  readonly force?: boolean;
  /** Revert unless `confirm` runs within `seconds`. The timer is set before the firewall commit. */
  readonly confirm?: {
    readonly seconds: number;
    /** The argv that reverts generation N (`egressguard restore --unconfirmed N …`). */
    readonly revertCommand: (generation: number) => readonly string[];
  };
  /**
   * How long to wait while another egressguard holds the host lock (a resident repair, a boot
   * restore); 0 or absent: fail at once with `lock-held`.
   */
  readonly lockWaitMs?: number;
  /** Told once what holds the lock, when this apply starts to wait for it. */
  readonly onLockWait?: (message: string) => void;
}

export interface ApplyReport {
  readonly generation: Generation;
  readonly previous: Generation | undefined;
  readonly deferred: readonly LiveProblem[];
  /** False when live already carried this hash and nothing was missing. */
  readonly changed: boolean;
  /** The revert that happens unless `confirm` runs first, if one was scheduled. */
  readonly pending: PendingConfirm | undefined;
  /** Where the apply spent its time: lock wait, read-back, the backend's steps, state write. */
  readonly timings: StepTimings;
}

/**
 * The safe apply: host lock, an attempt marker, the backend's atomic apply (firewall first, then
 * routing), read-back of the stamped hash, then the generation is recorded. A crash at any point
 * leaves the firewall in a consistent state and the marker for `status`. With `confirm`, the
 * revert timer is running before the commit: no kill point leaves an unconfirmed table without it.
 * An apply that goes in supersedes a confirmation still pending (its timer is stopped): the newer
 * generation is the one to keep or, with `confirm`, to revert.
 */
export async function applyGeneration(input: ApplyInput): Promise<ApplyReport> {
  const timer = createStepTimer();
  const lockStarted = performance.now();
  const lock =
    input.lockWaitMs === undefined || input.lockWaitMs <= 0
      ? acquireHostLock(input.state, 'apply a policy')
      : await acquireHostLockWaiting(input.state, 'apply a policy', {
          timeoutMs: input.lockWaitMs,
          ...(input.onLockWait === undefined ? {} : { onWait: input.onLockWait }),
        });
  timer.add('lock', performance.now() - lockStarted);
  try {
    const current = readCurrent(input.state);
    const superseded = readPendingFile(input.state);
    const applier = input.backend.createApplier({ runner: input.runner, options: input.options });
    const readContext = input.tunnels === undefined ? {} : { tunnels: input.tunnels };
    const inspector = input.backend.createInspector({
      runner: input.runner,
      options: input.options,
    });
    // Only a re-apply of the recorded hash can be a no-op; anything else goes straight on.
    const before =
      current?.hash === input.hash && input.force !== true
        ? await timer.time('read before', () => inspector.read(input.artifacts, readContext))
        : undefined;
    const unchanged =
      before !== undefined &&
      before.present &&
      before.hash === input.hash &&
      isConverged(before) &&
      current?.hash === input.hash &&
      current.fingerprint === before.fingerprint;
    if (unchanged) {
      // We hold the lock, so a marker left here is a dead apply's, and live state has converged.
      removeFile(input.state.file(FILES.attempt));
      removeFile(input.state.file(FILES.removed));
      clearFailure(input.state);
      clearRevert(input.state);
      // Re-applied for good, it is confirmed; re-applied with a window, the one running stays.
      if (input.confirm === undefined && superseded !== undefined) {
        await retire(input, superseded, { keepFile: false });
      }
      const running = superseded?.pending;
      return {
        generation: current,
        previous: undefined,
        deferred: before.missing,
        changed: false,
        pending:
          input.confirm !== undefined && running?.generation === current.number
            ? running
            : undefined,
        timings: timer.timings(),
      };
    }
    writeJson(input.state, FILES.attempt, {
      hash: input.hash,
      startedAt: new Date().toISOString(),
      ...ownIdentity(),
      outcome: 'in-progress',
    });
    const number = nextGenerationNumber(input.state, current, superseded?.pending);
    // Written while the firewall loads; recorded only once the apply went in.
    const storing = storeArtifacts(input.state, number, input.hash, input.artifacts);
    storing.catch(() => undefined); // awaited on both paths below
    let pending: PendingConfirm | undefined;
    let committed = false;
    let deferred: readonly LiveProblem[];
    let after;
    try {
      if (input.confirm !== undefined) {
        pending = await scheduleRevert({
          runner: input.runner,
          state: input.state,
          backend: input.backend,
          options: input.options,
          generation: number,
          previous: current?.number ?? null,
          seconds: input.confirm.seconds,
          command: input.confirm.revertCommand(number),
        });
      }
      ({ deferred } = await applier.apply(input.artifacts, {
        previous: current?.artifacts,
        ...(input.force === true ? { force: true } : {}),
        timer,
      }));
      committed = true;
      after = await timer.time('read back', () => inspector.read(input.artifacts, readContext));
      checkStamp(after, input.hash);
      if (!isConverged(after)) {
        // Once more, routing only: a tunnel that went down meanwhile took its route with it.
        ({ deferred } = await applier.apply(input.artifacts, {
          previous: undefined,
          routingOnly: true,
        }));
        after = await inspector.read(input.artifacts, readContext);
        checkStamp(after, input.hash);
        if (!isConverged(after)) {
          const missing = after.missing.filter(
            (m) => m.waitingFor === null && m.until === undefined,
          );
          throw new EgressguardError(
            'partially-applied',
            `Cannot finish the apply: routing did not converge after the firewall commit: ${[
              missing.length > 0 ? `missing: ${missing.map((m) => m.what).join('; ')}` : '',
              after.unexpected.length > 0
                ? `unexpected: ${after.unexpected.map((m) => m.what).join('; ')}`
                : '',
            ]
              .filter((part) => part !== '')
              .join('; ')}`,
            {
              hint: 'something removes or re-adds our rules and routes (systemd-networkd? run `egressguard doctor`); fix it and apply again',
            },
          );
        }
      }
    } catch (error) {
      await storing.catch(() => undefined);
      const partially = error instanceof EgressguardError && error.code === 'partially-applied';
      if (pending !== undefined && (superseded !== undefined || (!committed && !partially))) {
        // Before the commit nothing went live, so there is nothing to revert. After it, a revert
        // still pending from before goes back further than this one would: it is put back below.
        await cancelRevert({ ...timerContext(input), pending });
      }
      // This apply did not go in: the confirmation it would have superseded still holds.
      if (superseded !== undefined && pending !== undefined) {
        input.state.write(FILES.confirm, superseded.text);
      }
      if (partially) {
        writeJson(input.state, FILES.attempt, {
          hash: input.hash,
          startedAt: new Date().toISOString(),
          ...ownIdentity(),
          outcome: 'partially-applied',
          error: error.message,
        });
      } else {
        // The marker is for a crash. This apply failed and lived to say so (a rejected
        // transaction, routing in the way): `status` compares live state with the applied
        // generation, and says Drifted if the failure left anything changed.
        removeFile(input.state.file(FILES.attempt));
      }
      throw error;
    }
    if (superseded !== undefined) {
      await retire(input, superseded, { keepFile: pending !== undefined });
    }
    await timer.time('store artifacts', () => storing);
    await input.runner.faults.hit('before-state-write');
    const stateStarted = performance.now();
    const generation: Generation = {
      format: 'egressguard/generation/v1',
      number,
      hash: input.hash,
      policy: input.policy,
      backend: input.backend.name,
      options: input.options,
      appliedAt: new Date().toISOString(),
      fingerprint: after.fingerprint,
      artifacts: input.artifacts,
      ...(input.tunnels === undefined ? {} : { tunnels: input.tunnels }),
    };
    if (current !== undefined) writeGeneration(input.state, FILES.previous, current);
    writeGeneration(input.state, FILES.applied, generation);
    // A removal's record would otherwise outlive this apply: were applied.json lost later, boot
    // would take it for an explicit removal and load nothing instead of the lockdown.
    removeFile(input.state.file(FILES.removed));
    pruneGenerations(input.state);
    if (input.lockdown !== undefined) input.state.write(FILES.lockdown, input.lockdown);
    removeFile(input.state.file(FILES.attempt));
    clearFailure(input.state);
    clearRevert(input.state);
    timer.add('state write', performance.now() - stateStarted);
    return {
      generation,
      previous: current,
      deferred,
      changed: true,
      pending,
      timings: timer.timings(),
    };
  } finally {
    lock.release();
  }
}

/**
 * Every route and rule is live, except routes via a tunnel that is down (the kernel refuses them
 * until the link is up) and what waits for the next boot, and none is extra.
 */
function isConverged(live: LiveState): boolean {
  return (
    live.missing.every((m) => m.waitingFor !== null || m.until !== undefined) &&
    live.unexpected.length === 0
  );
}

function checkStamp(live: LiveState, hash: string): void {
  if (live.present && live.hash === hash) return;
  throw new EgressguardError(
    'apply-failed',
    `Cannot confirm the apply: read-back shows ${live.present ? `hash ${live.hash ?? 'none'}` : 'no table'}, expected ${hash}`,
    { hint: 'run `egressguard status`; something else may be replacing the table' },
  );
}

/**
 * Numbers only go up in a state directory, also after a revert or a remove, so a confirm timer
 * for generation N can never mistake a later generation for its own.
 */
function nextGenerationNumber(
  state: StateDir,
  current: Generation | undefined,
  pending: PendingConfirm | undefined,
): number {
  let previous: Generation | undefined;
  try {
    previous = readGeneration(state, FILES.previous);
  } catch {
    previous = undefined;
  }
  // A pending confirm may name a generation an apply killed before its state write never recorded.
  return Math.max(current?.number ?? 0, previous?.number ?? 0, pending?.generation ?? 0) + 1;
}

/** Stops the timer of a superseded confirmation and, unless a new one replaced it, its file. */
async function retire(
  input: ApplyInput,
  superseded: PendingFile,
  options: { keepFile: boolean },
): Promise<void> {
  if (superseded.pending !== undefined) {
    await cancelRevert({ ...timerContext(input), pending: superseded.pending });
  } else if (!options.keepFile) {
    // Unreadable: its timer cannot be stopped, but without the file it reverts nothing.
    removeFile(input.state.file(FILES.confirm));
  }
}

/** What starting or stopping a confirm timer takes of an apply. */
function timerContext(input: ApplyInput) {
  return {
    runner: input.runner,
    state: input.state,
    backend: input.backend,
    options: input.options,
  };
}

/** The applied generation, or undefined when the state is missing or unreadable. */
function readCurrent(state: StateDir): Generation | undefined {
  try {
    return readGeneration(state, FILES.applied);
  } catch {
    return undefined;
  }
}
