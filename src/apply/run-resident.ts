import {
  describeLiveProblem,
  type Backend,
  type BackendOptions,
  type WatchEvent,
} from '../backends/index.js';
import { EgressguardError, isEgressguardError, type StepTimings } from '../core/index.js';
import type { Runner } from '../runner/index.js';
import { acquireHostLock, hostLockHolder, type StateDir } from '../state/index.js';
import { FILES, readGeneration } from './generation.js';
import { recordFingerprint } from './record-fingerprint.js';

const LOCK_RETRY_MS = 250;
/** How long a reconcile waits for the listener's urgent work (the gateway label) at most. */
const URGENT_HOLD_MS = 1_000;

/** What applying the resident's own policy again did. */
export interface RefreshApplied {
  readonly changed: boolean;
  readonly generation: number;
  readonly hash: string;
}

export interface ResidentLogEntry {
  readonly time: string;
  readonly action:
    | 'watching'
    /** The first pass after the start is done: what follows comes of events and ticks. */
    | 'checked'
    | 'reapplied'
    | 'adopted'
    | 'repaired-table'
    | 'readded-routes'
    | 'waiting'
    | 'skipped'
    /** The cluster side (run --k8s): this node's gateway mark set, removed, policies re-applied. */
    | 'marked'
    | 'unmarked'
    | 'reapplied-cluster'
    | 'error';
  readonly message: string;
  /**
   * Milliseconds per step, where an entry reports timed work: for the gateway's fast path, from
   * the link event to the cluster's answer (`wait` for an earlier call, `patch` the request).
   */
  readonly steps?: StepTimings;
}

/** What one reconcile of the resident did, for a caller that reports it (the fleet agent). */
export interface ResidentPass {
  /** What started it: a watcher event (the kind of the most telling one if several), or a tick. */
  readonly trigger: WatchEvent['kind'];
  /** The repair it made to the applied generation, if any. */
  readonly repair?: ResidentRepair;
}

export interface ResidentRepair {
  /** The table (deleted, edited, another hash) or only the routes (a tunnel returned). */
  readonly what: 'table' | 'routes';
  /** The hash live state carried before the repair (null: nothing of ours was live). */
  readonly detectedHash: string | null;
  readonly generation: number;
  readonly message: string;
}

/**
 * The resident mode: watches links and the live ruleset and re-converges to the applied
 * generation within seconds: re-adds owned routes when a tunnel returns or is recreated, and
 * repairs a deleted or edited table. A periodic tick catches anything the monitors miss.
 */
export async function runResident(input: {
  backend: Backend;
  runner: Runner;
  state: StateDir;
  options: BackendOptions;
  log: (entry: ResidentLogEntry) => void;
  signal: AbortSignal;
  tickMs?: number;
  /**
   * Re-reads the policy and the host's facts (at every reconcile but those a ruleset event
   * starts): the host config hash they give now, and how to apply it.
   */
  refresh?: () => Promise<{ readonly hash: string; apply(): Promise<RefreshApplied> }>;
  /** The hash the resident applied from its policy when it started. */
  ownHash?: string;
  /**
   * Told of every event and of the end of every reconcile (the gateway loop listens), with the
   * link and its state for a link event.
   */
  onChange?: (
    reason: string,
    link?: { readonly name: string; readonly state: 'up' | 'down' | 'absent' },
  ) => void | Promise<void>;
  /** Told at the end of every reconcile: what started it and what it repaired. */
  onReconciled?: (pass: ResidentPass) => void;
}): Promise<void> {
  const context = { runner: input.runner, options: input.options };
  const watcher = input.backend.createWatcher?.(context);
  if (watcher === undefined) {
    throw new EgressguardError(
      'unsupported',
      `Backend "${input.backend.name}" cannot watch live state`,
    );
  }
  // Read and repaired with the options the applied generation was applied with (a fleet push
  // may change the steering priority or route table), over the resident's own.
  const collaborators = (generation: { readonly options: BackendOptions }) => {
    const applied = { runner: input.runner, options: { ...input.options, ...generation.options } };
    return {
      inspector: input.backend.createInspector(applied),
      applier: input.backend.createApplier(applied),
    };
  };
  const log = (action: ResidentLogEntry['action'], message: string): void => {
    input.log({ time: new Date().toISOString(), action, message });
  };

  let retry: ReturnType<typeof setTimeout> | undefined;
  // The hash of the resident's own policy as last applied, and the last generation of someone
  // else's it adopted: an operator's `apply` of another policy is kept, not fought, until the
  // policy file or the host's facts change.
  let own = input.ownHash;
  let adopted: string | undefined;
  let waitingFor: string | undefined;
  // Set when the resident stops (its signal aborted, or its watcher failed): nothing new starts.
  let stopping = false;
  // What ends the resident with an error: its namespace is gone, so nothing it does can land.
  let fatal: EgressguardError | undefined;
  const isStopping = (): boolean => stopping || input.signal.aborted;
  const retrySoon = (): void => {
    if (isStopping()) return;
    retry ??= setTimeout(() => {
      retry = undefined;
      if (!isStopping()) onEvent({ kind: 'tick' });
    }, LOCK_RETRY_MS);
  };
  // One reconcile at a time; events during one ask for exactly one more.
  // The pass that runs again says why: the reason of the latest event that asked for it.
  // A tick does not hide a watcher event that asked first: its trigger is the one reported.
  interface Ask {
    readonly reason: string;
    readonly trigger: WatchEvent['kind'];
  }
  const pass: { running: boolean; again: Ask | undefined } = {
    running: false,
    again: undefined,
  };
  let checked = false;
  const reconcile = async (ask: Ask): Promise<void> => {
    if (isStopping()) return;
    if (pass.running) {
      if (ask.trigger !== 'tick' || pass.again === undefined) pass.again = ask;
      return;
    }
    pass.running = true;
    try {
      let next: Ask | undefined = ask;
      while (next !== undefined && !isStopping()) {
        pass.again = undefined;
        let repair: ResidentRepair | undefined;
        try {
          repair = await reconcileOnce(next.reason);
        } finally {
          // A nudge with no link: nothing urgent to wait for.
          void input.onChange?.(`reconciled after ${next.reason}`);
          input.onReconciled?.({
            trigger: next.trigger,
            ...(repair === undefined ? {} : { repair }),
          });
        }
        if (!checked) {
          checked = true;
          log(
            'checked',
            repair === undefined
              ? 'first pass done: no repair made'
              : `first pass done: repaired ${repair.what}`,
          );
        }
        next = pass.again;
      }
    } finally {
      pass.running = false;
    }
  };

  /** What is wrong with live state against the applied generation, or undefined. */
  const diagnose = async () => {
    const generation = readGeneration(input.state, FILES.applied);
    if (generation === undefined) return undefined;
    const live = await collaborators(generation).inspector.read(generation.artifacts);
    const tableWrong =
      !live.present || live.hash !== generation.hash || live.fingerprint !== generation.fingerprint;
    const tunnelsUp = new Set(live.tunnels.filter((t) => t.state === 'up').map((t) => t.name));
    // Routes via a tunnel that is down cannot go in; those via one that is up must.
    const routesMissing = live.missing.some(
      (m) => (m.waitingFor === null && m.until === undefined) || tunnelsUp.has(m.waitingFor ?? ''),
    );
    if (!tableWrong && !routesMissing && live.unexpected.length === 0) return undefined;
    return { generation, live, tableWrong };
  };

  const reconcileOnce = async (reason: string): Promise<ResidentRepair | undefined> => {
    // Another egressguard at work (an apply, a restore) changes live state on purpose, and its
    // ruleset events are ours to see: look again once it is done, reading nothing meanwhile.
    const holder = hostLockHolder(input.state);
    if (holder !== undefined) {
      const who = `${holder.pid} ${holder.since}`;
      if (waitingFor !== who) {
        waitingFor = who;
        log(
          'waiting',
          `another egressguard (pid ${holder.pid}: ${holder.purpose}) holds the host lock; looking again when it is done`,
        );
      }
      retrySoon();
      return undefined;
    }
    waitingFor = undefined;
    if (input.refresh !== undefined && !reason.startsWith('ruleset')) {
      // A policy edited into an invalid one, or facts that cannot be read, must not stop the
      // repairs of what is applied: say so and carry on.
      try {
        await refreshOwn(input.refresh, reason);
      } catch (error) {
        if (isEgressguardError(error) && error.code === 'lock-held') {
          retrySoon();
          return undefined;
        }
        if (isNamespaceGone(error)) throw error;
        log(
          'error',
          `Cannot refresh from the policy and host facts, keeping what is applied: ${(error as Error).message}`,
        );
      }
    }
    if ((await diagnose()) === undefined) return undefined;
    let lock;
    try {
      lock = acquireHostLock(input.state, 'repair the applied state');
    } catch (error) {
      if (isEgressguardError(error) && error.code === 'lock-held') {
        // Soon, not at the next tick: the holder may be an apply that was killed mid-way, and
        // nothing else will send an event.
        log('skipped', `another egressguard holds the host lock; retrying: ${error.message}`);
        retrySoon();
        return undefined;
      }
      throw error;
    }
    try {
      // Read again under the lock: an apply that held it may have recorded a new generation
      // since, and repairing to the one read before would revert it.
      const wrong = await diagnose();
      if (wrong === undefined) return undefined;
      const { generation, live, tableWrong } = wrong;
      const detectedHash = live.present ? live.hash : null;
      // Forced: an edit the fingerprint saw may be in a set's elements, which a plain apply
      // leaves alone when the set's name is live.
      const result = await collaborators(generation).applier.apply(generation.artifacts, {
        previous: undefined,
        routingOnly: !tableWrong,
        force: true,
      });
      if (tableWrong) {
        // The repaired table is the new baseline, or a listing that differs only in order
        // (see recordFingerprint) would be repaired again at every tick.
        await recordFingerprint({ ...input, generation });
        const what = !live.present
          ? 'table was deleted'
          : live.hash !== generation.hash
            ? `table carried hash ${live.hash ?? 'none'}`
            : 'table was edited';
        const message = `${what} (${reason}): re-applied generation ${generation.number}`;
        log('repaired-table', message);
        return { what: 'table', detectedHash, generation: generation.number, message };
      }
      const message = `routes re-converged (${reason})${result.deferred.length > 0 ? `; still waiting: ${result.deferred.map(describeLiveProblem).join(', ')}` : ''}`;
      log('readded-routes', message);
      return { what: 'routes', detectedHash, generation: generation.number, message };
    } finally {
      lock.release();
    }
  };

  /** Applies the resident's own policy when it or the host's facts changed; else adopts. */
  const refreshOwn = async (
    refresh: NonNullable<typeof input.refresh>,
    reason: string,
  ): Promise<void> => {
    const fresh = await refresh();
    if (fresh.hash !== own) {
      const result = await fresh.apply();
      own = fresh.hash;
      if (result.changed) {
        log(
          'reapplied',
          `applied generation ${result.generation}, hash ${result.hash.slice(0, 12)} (${reason})`,
        );
      }
      return;
    }
    const applied = readGeneration(input.state, FILES.applied);
    if (applied === undefined || applied.hash === own || applied.hash === adopted) return;
    adopted = applied.hash;
    log(
      'adopted',
      `generation ${applied.number} (policy "${applied.policy}", hash ${applied.hash.slice(0, 12)}) was applied by another egressguard: keeping it; the policy file is applied again when it or the host's facts change`,
    );
  };

  /** Every event's work not yet done (its urgent hold, its reconcile): awaited on the way out. */
  const working = new Set<Promise<void>>();
  const onEvent = (event: WatchEvent): void => {
    const reason =
      event.kind === 'link'
        ? `link ${event.name}: ${event.detail}`
        : event.kind === 'ruleset'
          ? `ruleset: ${event.detail}`
          : event.kind === 'route'
            ? `route: ${event.detail}`
            : 'periodic check';
    const urgent =
      event.kind === 'link' && event.state !== undefined
        ? input.onChange?.(reason, { name: event.name, state: event.state })
        : event.kind !== 'tick'
          ? input.onChange?.(reason)
          : undefined;
    // What the listener does at once (the gateway taking its label off a tunnel that went down)
    // goes first: the reconcile re-reads facts and compiles, processes and CPU that would delay
    // that one request on a loaded machine. Never for long: an API server that does not answer
    // must not hold back the host's own repairs.
    let held: ReturnType<typeof setTimeout> | undefined;
    const work = Promise.race([
      Promise.resolve(urgent).catch(() => undefined),
      new Promise<void>((resolve) => {
        held = setTimeout(resolve, URGENT_HOLD_MS);
      }),
    ])
      .finally(() => {
        clearTimeout(held);
      })
      .then(() => reconcile({ reason, trigger: event.kind }))
      .catch((error: unknown) => {
        log('error', `Cannot re-converge: ${(error as Error).message}`);
        // Its watchers would keep watching an orphaned namespace nobody can reach: stop.
        if (isNamespaceGone(error)) {
          fatal ??= error;
          void stop();
        }
      })
      .finally(() => {
        working.delete(work);
      });
    working.add(work);
  };

  const tick = setInterval(() => {
    onEvent({ kind: 'tick' });
  }, input.tickMs ?? 10_000);
  let watcherStopped: Promise<void> | undefined;
  const stop = (): Promise<void> => {
    stopping = true;
    clearInterval(tick);
    if (retry !== undefined) clearTimeout(retry);
    watcherStopped ??= watcher.stop();
    return watcherStopped;
  };
  const onAbort = (): void => {
    void stop();
  };
  input.signal.addEventListener('abort', onAbort, { once: true });
  if (input.signal.aborted) onAbort();
  log('watching', 'watching links, the ruleset and the main routing table');
  onEvent({ kind: 'tick' });
  try {
    for await (const event of watcher.events()) {
      if (input.signal.aborted) break;
      onEvent(event);
    }
  } finally {
    input.signal.removeEventListener('abort', onAbort);
    await stop();
    // A repair in flight finishes before the resident says it stopped: a caller that exits (a
    // SIGTERM, a decommissioned agent) must not leave a half-done repair behind. Nothing new
    // starts meanwhile (isStopping).
    while (working.size > 0) await Promise.allSettled([...working]);
  }
  if (fatal !== undefined) throw fatal;
}

function isNamespaceGone(error: unknown): error is EgressguardError {
  return isEgressguardError(error) && error.code === 'netns-missing';
}
