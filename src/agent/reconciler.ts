import type { HostFacts } from '../facts/index.js';
import {
  BUNDLE_FORMAT,
  DEFAULT_BACKOFF,
  bindingFactsOf,
  FailureBudget,
  digestBindingFacts,
  digestFacts,
  type BackoffPolicy,
  type BundleResponse,
  type Clock,
  type StatusReport,
} from '../fleet/index.js';
import type { ResidentRepair } from '../apply/index.js';
import type { HostEngine, PreparedGeneration } from './host-engine.js';

/** What the reconciler remembers across restarts (the agent persists it). */
export interface ReconcilerMemory {
  readonly appliedHash: string | null;
  readonly desired: BundleResponse | null;
}

/** What one apply attempt did, for metrics. */
export interface AttemptRecord {
  readonly hash: string;
  readonly ok: boolean;
  readonly durationMs: number;
  readonly at: number;
}

/**
 * The agent's reconcile loop, one round at a time: compare what the controller wants with what is
 * applied and live, apply when they differ (a new hash, drift, an operator's force), and retry
 * failures on the failure budget of (host, desired hash). There is no terminal state: a failing
 * hash is retried at most `capMs` apart forever, an invalid one waits for a new hash or a retry.
 */
export class Reconciler<P extends PreparedGeneration = PreparedGeneration> {
  readonly #engine: HostEngine<P>;
  readonly #clock: Clock;
  readonly #budget: FailureBudget;
  readonly #agentVersion: string;
  #desired: BundleResponse | null;
  #appliedHash: string | null;
  #invalidHash: string | null = null;
  /**
   * The last bundle the agent could not take (it failed the wire's checks): reported once, and
   * asked for again on its own failure budget, not at every poll.
   */
  #refused: RefusedBundle | undefined;
  readonly #refusals: FailureBudget;
  #forcePending = false;
  #reportedFactsDigest: string | null = null;
  #lastReport = '';
  /**
   * Repairs since the last delivered report (the watchers' between rounds, and the rounds' own),
   * numbered in order: a report superseded before it reached the controller loses none of them.
   */
  #repairs: { readonly seq: number; readonly repair: Repair }[] = [];
  #roundRepaired = false;
  #repairSeq = 0;
  /** The newest repair each built report carries, so delivery clears only those. */
  readonly #repairsIn = new WeakMap<StatusReport, number>();

  constructor(options: {
    engine: HostEngine<P>;
    clock: Clock;
    random: () => number;
    agentVersion: string;
    backoff?: BackoffPolicy;
    memory?: ReconcilerMemory;
  }) {
    this.#engine = options.engine;
    this.#clock = options.clock;
    this.#budget = new FailureBudget(options.backoff ?? DEFAULT_BACKOFF, options.random);
    this.#refusals = new FailureBudget(options.backoff ?? DEFAULT_BACKOFF, options.random);
    this.#agentVersion = options.agentVersion;
    this.#desired = options.memory?.desired ?? null;
    this.#appliedHash = options.memory?.appliedHash ?? null;
  }

  get memory(): ReconcilerMemory {
    return { appliedHash: this.#appliedHash, desired: this.#desired };
  }

  /**
   * What the long poll sends back so the controller answers only when something changed. A
   * refused bundle counts as known until its budget is due: then the poll asks for it again.
   */
  get known(): { hash: string; retry: number; force: number; suspended: boolean } {
    const refused = this.#refused;
    const seen =
      refused !== undefined && this.#clock.now() < this.#refusals.nextAttemptAt
        ? refused.response
        : this.#desired;
    return {
      hash: seen?.hash ?? '',
      retry: seen?.retryToken ?? 0,
      force: seen?.forceToken ?? 0,
      suspended: seen?.suspended ?? false,
    };
  }

  /**
   * When a failed hash may be tried again, or a refused bundle asked for again (undefined:
   * nothing is waiting on a budget).
   */
  get nextAttemptAt(): number | undefined {
    const hash = this.#desired?.hash ?? null;
    const applying =
      hash === null || this.#budget.hash !== hash || this.#budget.failures === 0
        ? undefined
        : this.#budget.nextAttemptAt;
    const asking = this.#refused === undefined ? undefined : this.#refusals.nextAttemptAt;
    if (applying === undefined) return asking;
    return asking === undefined ? applying : Math.min(applying, asking);
  }

  get failures(): number {
    return this.#budget.failures;
  }

  /** Takes the controller's answer; an operator's retry re-arms the budget, a force re-applies. */
  accept(response: BundleResponse): void {
    if (this.#refused !== undefined) {
      this.#refused = undefined;
      this.#refusals.rearm();
    }
    const before = this.#desired;
    if (before !== null && response.retryToken !== before.retryToken) {
      this.#budget.rearm();
      this.#invalidHash = null;
    }
    if (before !== null && response.forceToken !== before.forceToken) this.#forcePending = true;
    this.#desired = response;
  }

  /**
   * Records a bundle this agent cannot take: what is applied stays, and the next report says why
   * (the controller shows the host Degraded, `BundleRefused`). An operator's retry re-arms it.
   */
  refuse(
    response: Omit<BundleResponse, 'bundle' | 'hash'> & { hash: string },
    message: string,
  ): void {
    if (this.#refused !== undefined && this.#refused.response.retryToken !== response.retryToken) {
      this.#refusals.rearm();
    }
    const now = this.#clock.now();
    const number = this.#refusals.attemptNumber(response.hash);
    const delay = this.#refusals.recordFailure(response.hash, now);
    this.#refused = {
      response: { ...response, bundle: null },
      attempt: {
        hash: response.hash,
        outcome: 'refused',
        number,
        message,
        durationMs: 0,
        nextAttemptInMs: delay,
      },
    };
  }

  /**
   * Records a repair the watchers made between rounds: the next report carries it as drift
   * (repaired), and is sent even if nothing else changed.
   */
  noteRepair(repair: ResidentRepair): void {
    this.#pushRepair({
      what: repair.what,
      detectedHash: repair.detectedHash,
      message: `repaired between polls by the watchers: ${repair.message}`,
    });
  }

  /** Whether the last round applied the generation again to repair drift. */
  get roundRepaired(): boolean {
    return this.#roundRepaired;
  }

  #pushRepair(repair: Repair): void {
    this.#repairSeq += 1;
    this.#repairs.push({ seq: this.#repairSeq, repair });
  }

  /**
   * One round: read facts and live state, apply if needed and due, and return the report to send
   * (undefined when nothing changed since the last one).
   */
  async step(onAttempt?: (record: AttemptRecord) => void): Promise<StatusReport | undefined> {
    const facts = await this.#engine.readFacts();
    const factsDigest = digestFacts(facts);
    let live = await this.#engine.readStatus();
    const report: StatusReport = {
      agentVersion: this.#agentVersion,
      desiredHash: this.#desired?.hash ?? null,
      appliedHash: this.#appliedHash,
      liveHash: live.hash,
    };
    if (factsDigest !== this.#reportedFactsDigest) report.facts = facts;

    const desired = this.#desired;
    const target = desired?.hash ?? null;
    const drifted = this.#appliedHash !== null && live.hash !== this.#appliedHash;
    const bundle = desired?.suspended === false ? desired.bundle : null;
    const needed =
      bundle !== null &&
      target !== null &&
      (target !== this.#appliedHash || live.hash !== target || this.#forcePending);
    const now = this.#clock.now();
    const attempt =
      needed && target !== this.#invalidHash && this.#budget.isDue(target, now)
        ? await this.#attempt(target, bundle, facts, onAttempt)
        : undefined;
    this.#roundRepaired = false;
    const refusal = this.#refused?.attempt;
    if (attempt === undefined && refusal !== undefined && this.#refused !== undefined) {
      report.attempt = refusal;
      this.#refused = { response: this.#refused.response };
    }
    if (attempt !== undefined) {
      report.attempt = attempt;
      live = await this.#engine.readStatus();
      if (drifted) {
        const repaired = attempt.outcome === 'applied' && live.hash === this.#appliedHash;
        const message = `live ${short(report.liveHash ?? null)} differed from applied ${short(report.appliedHash ?? null)}${attempt.outcome === 'applied' ? '; applied again' : `; repair failed: ${attempt.message}`}`;
        if (repaired) {
          this.#roundRepaired = true;
          this.#pushRepair({ what: 'generation', detectedHash: report.liveHash ?? null, message });
        } else {
          report.drift = { detectedHash: report.liveHash ?? null, repaired, message };
        }
      }
      report.appliedHash = this.#appliedHash;
      report.liveHash = live.hash;
    } else if (drifted) {
      report.drift = {
        detectedHash: live.hash,
        repaired: false,
        message: `live ${short(live.hash)} differs from applied ${short(this.#appliedHash)}${desired?.suspended === true ? ' (suspended: not repaired)' : ''}`,
      };
    }
    report.counters = live.counters;
    report.tunnels = [...live.tunnels];
    const repairs = this.#repairs;
    const newest = repairs.at(-1);
    if (report.drift === undefined && newest !== undefined) {
      report.drift = describeRepairs(repairs.map((r) => r.repair));
      this.#repairsIn.set(report, newest.seq);
    }

    if (
      report.attempt === undefined &&
      report.facts === undefined &&
      !this.#repairsIn.has(report) &&
      fingerprintOf(report) === this.#lastReport
    ) {
      return undefined;
    }
    return report;
  }

  /** Marks a report as delivered (an undelivered one is sent again next round). */
  delivered(report: StatusReport): void {
    if (report.facts !== undefined) this.#reportedFactsDigest = digestFacts(report.facts);
    this.#lastReport = fingerprintOf(report);
    const carried = this.#repairsIn.get(report);
    if (carried !== undefined) this.#repairs = this.#repairs.filter((r) => r.seq > carried);
  }

  async #attempt(
    target: string,
    bundle: NonNullable<BundleResponse['bundle']>,
    facts: HostFacts,
    onAttempt: ((record: AttemptRecord) => void) | undefined,
  ): Promise<NonNullable<StatusReport['attempt']> | undefined> {
    const number = this.#budget.attemptNumber(target);
    const started = this.#clock.now();
    const prepared = await this.#engine.prepare(bundle, facts);
    if (!prepared.ok) {
      this.#invalidHash = target;
      return {
        hash: target,
        outcome: 'invalid',
        number,
        message: prepared.message,
        durationMs: this.#clock.now() - started,
      };
    }
    if (prepared.prepared.hash !== target && isStale(bundle, facts)) {
      // Bound to facts this host no longer has: this round's report carries the new facts and
      // the controller binds again (another hash). Not an attempt, and not invalid.
      return undefined;
    }
    if (prepared.prepared.hash !== target) {
      // Agent and controller disagree on the hash (their versions differ): applying would loop.
      this.#invalidHash = target;
      return {
        hash: target,
        outcome: 'invalid',
        number,
        message: `this agent computes ${short(prepared.prepared.hash)} for the bundle, the controller ${short(target)}: are their versions the same?`,
        durationMs: this.#clock.now() - started,
      };
    }
    let outcome: Awaited<ReturnType<HostEngine<P>['apply']>>;
    try {
      outcome = await this.#engine.apply(prepared.prepared);
    } catch (error) {
      outcome = { ok: false, message: error instanceof Error ? error.message : String(error) };
    }
    const finished = this.#clock.now();
    onAttempt?.({ hash: target, ok: outcome.ok, durationMs: finished - started, at: finished });
    if (outcome.ok) {
      this.#appliedHash = outcome.hash;
      this.#forcePending = false;
      this.#budget.rearm(target);
      return {
        hash: target,
        outcome: 'applied',
        number,
        message: 'applied and read back',
        durationMs: finished - started,
      };
    }
    const delay = this.#budget.recordFailure(target, finished);
    return {
      hash: target,
      outcome: 'failed',
      number,
      message: outcome.message,
      durationMs: finished - started,
      nextAttemptInMs: delay,
    };
  }
}

/** A host-IR bundle the controller bound to other facts than this host has now. */
function isStale(bundle: NonNullable<BundleResponse['bundle']>, facts: HostFacts): boolean {
  return (
    bundle.format === BUNDLE_FORMAT &&
    bundle.factsDigest !== null &&
    bundle.factsDigest !== digestBindingFacts(bindingFactsOf(bundle, facts))
  );
}

/**
 * What makes a report worth sending again: hashes and drift (counters alone are not). Repairs
 * are sent because they are pending, and leave nothing to report once delivered.
 */
function fingerprintOf(report: StatusReport): string {
  return JSON.stringify([
    report.desiredHash,
    report.appliedHash,
    report.liveHash,
    report.drift?.repaired === true ? null : (report.drift ?? null),
    report.tunnels ?? [],
  ]);
}

/** A bundle the agent refused, and the attempt to report (until a report carries it). */
interface RefusedBundle {
  readonly response: BundleResponse;
  readonly attempt?: NonNullable<StatusReport['attempt']>;
}

/** A repair not yet reported: the watchers' (table, routes) or a round's (the generation). */
interface Repair {
  readonly what: ResidentRepair['what'] | 'generation';
  readonly detectedHash: string | null;
  readonly message: string;
}

/** The repairs since the last delivered report, as one drift entry: the newest, and a count. */
function describeRepairs(repairs: readonly Repair[]): NonNullable<StatusReport['drift']> {
  const newest = repairs[repairs.length - 1];
  const earlier = repairs.slice(0, -1);
  const detected = newest?.detectedHash ?? null;
  return {
    // A table edited to carry something else than a hash is still drift; the wire takes hashes.
    detectedHash: detected !== null && /^[0-9a-f]{64}$/.test(detected) ? detected : null,
    repaired: true,
    message: truncate(
      `${newest?.message ?? ''}${earlier.length > 0 ? ` (and ${earlier.length} earlier: ${countKinds(earlier)})` : ''}`,
      4096,
    ),
    repairs: repairs.length,
  };
}

function countKinds(repairs: readonly Repair[]): string {
  const noun = { table: 'of the table', routes: 'of routes', generation: 'by a round' } as const;
  return (['table', 'routes', 'generation'] as const)
    .map((what) => [repairs.filter((r) => r.what === what).length, noun[what]] as const)
    .filter(([n]) => n > 0)
    .map(([n, text]) => `${n} ${text}`)
    .join(', ');
}

function truncate(text: string, max: number): string {
  return text.length <= max ? text : `${text.slice(0, max - 1)}…`;
}

function short(hash: string | null): string {
  return hash === null ? 'nothing' : hash.slice(0, 12);
}
