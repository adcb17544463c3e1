import { sql, type Transaction } from 'kysely';
import { isEgressguardError } from '../../core/index.js';
import { parseHostFacts } from '../../facts/index.js';
import { digestFacts } from '../bundle-binder.js';
import { short, type Condition } from '../conditions.js';
import type { BundleResponse, HostBundle, ParsedStatusReport } from '../protocol.js';
import { RefusedError } from '../request-error.js';
import type { Database } from '../store/database.js';
import {
  bindingKey,
  checkLabels,
  convergedSince,
  type ControllerCore,
  type HostRow,
} from './controller-core.js';

/** Check-ins held in memory before one statement writes them (also written at every tick). */
const CHECKIN_BATCH_MAX = 1000;
/**
 * Hosts a statement writes: each binds its id three times and its time twice, and SQLite allows
 * 32,766 bound values a statement.
 */
const CHECKIN_CHUNK = 500;
/** Status reports one transaction writes, and how many such transactions run at once. */
const REPORT_BATCH_MAX = 200;
const REPORT_WRITERS = 2;

/** What the controller took from a report. */
export interface ReportTaken {
  /** Drift repairs counted: what the report says, within one a second since the last check-in. */
  readonly repairs: number;
}

interface ReportOutcome extends ReportTaken {
  /** The report's facts changed the host's desired hash. */
  readonly rebound: boolean;
}

interface QueuedReport {
  readonly hostId: string;
  readonly report: ParsedStatusReport;
  readonly resolve: (taken: ReportTaken) => void;
  readonly reject: (error: unknown) => void;
}

/**
 * What the controller takes from agents: their long polls (the bundle to run), their check-ins
 * and their status reports, each written in batches.
 */
export class AgentIngest {
  readonly #core: ControllerCore;
  /** Check-ins not yet written, by host: when each was last seen. */
  readonly #checkins = new Map<string, number>();
  #flushing: Promise<void> = Promise.resolve();
  /** Status reports waiting to be written, and how many writers are draining them. */
  readonly #reportQueue: QueuedReport[] = [];
  #reportWriters = 0;

  constructor(core: ControllerCore) {
    this.#core = core;
  }

  /** What the host should run now; the long poll compares it with what the agent knows. */
  async bundleFor(hostId: string): Promise<BundleResponse & { decommissioned: boolean }> {
    const host = await this.#core.store.db
      .selectFrom('hosts')
      .selectAll()
      .where('id', '=', hostId)
      .executeTakeFirstOrThrow();
    let bundle: HostBundle | null = null;
    if (host.desired_hash !== null && host.desired_push_id !== null) {
      const key = bindingKey(host, host.desired_push_id);
      const known = this.#core.bundles.get(key);
      if (known?.hash === host.desired_hash) {
        bundle = known.bundle;
      } else {
        const bound = await this.#core.bind(this.#core.store.db, host, host.desired_push_id);
        if (bound.ok && bound.hash === host.desired_hash) {
          bundle = bound.bundle;
          this.#core.remember(key, bound.hash, bound.bundle);
        }
      }
    }
    return {
      hostId,
      hash: bundle === null ? null : host.desired_hash,
      bundle,
      retryToken: host.retry_token,
      forceToken: host.force_token,
      suspended: host.suspended === 1,
      pollIntervalMs: this.#core.pollIntervalMs,
      decommissioned: host.decommissioned_at !== null,
    };
  }

  /**
   * Records that the host's agent is alive. A long poll checks in every poll interval: 10,000
   * hosts at 30 s are 333 writes a second, so check-ins are kept in memory and written together
   * by `flushCheckins` (every tick, before every view, at close), one statement per batch.
   */
  async checkIn(hostId: string): Promise<void> {
    this.#checkins.set(hostId, this.#core.clock.now());
    if (this.#checkins.size >= CHECKIN_BATCH_MAX) await this.flushCheckins();
  }

  /**
   * Writes the check-ins held in memory; a newer time already stored (a status report) stays.
   * Flushes run one after another, so a caller returns only once what it saw held is written.
   */
  flushCheckins(): Promise<void> {
    const run = this.#flushing.then(() => this.#writeCheckins());
    this.#flushing = run.catch(() => undefined);
    return run;
  }

  async #writeCheckins(): Promise<void> {
    if (this.#checkins.size === 0) return;
    const batch = [...this.#checkins];
    this.#checkins.clear();
    try {
      for (let i = 0; i < batch.length; i += CHECKIN_CHUNK) {
        const chunk = batch.slice(i, i + CHECKIN_CHUNK);
        const seen = sql<number>`case id ${sql.join(
          chunk.map(([id, at]) => sql`when ${id} then cast(${at} as bigint)`),
          sql` `,
        )} end`;
        await this.#core.store.db
          .updateTable('hosts')
          .set({ last_checkin_at: seen })
          .where('id', 'in', (eb) =>
            // Locked in id order, as every statement that locks several hosts does: no deadlock
            // with a batch of status reports.
            this.#core.store.lockRows(
              eb
                .selectFrom('hosts')
                .select('id')
                .where(
                  'id',
                  'in',
                  chunk.map(([id]) => id),
                )
                .orderBy('id'),
            ),
          )
          .where((eb) =>
            eb.or([eb('last_checkin_at', 'is', null), eb('last_checkin_at', '<', seen)]),
          )
          .execute();
      }
    } catch (error) {
      // Not lost: kept for the next flush unless the host checked in again meanwhile.
      for (const [id, at] of batch) if (!this.#checkins.has(id)) this.#checkins.set(id, at);
      throw error;
    }
  }

  /**
   * Takes an agent's report: hashes, the last attempt, drift, facts; re-derives conditions.
   * Reports that arrive while others are being written are written together, in one
   * transaction that locks their hosts with one statement (a report alone is five round trips
   * on PostgreSQL: begin, lock, update, events, commit, and a converging fleet sends a thousand
   * at once).
   */
  reportStatus(hostId: string, report: ParsedStatusReport): Promise<ReportTaken> {
    return new Promise((resolve, reject) => {
      this.#reportQueue.push({ hostId, report, resolve, reject });
      if (this.#reportWriters < REPORT_WRITERS) void this.#drainReports();
    });
  }

  async #drainReports(): Promise<void> {
    this.#reportWriters += 1;
    try {
      while (this.#reportQueue.length > 0) {
        await this.#writeReports(this.#reportQueue.splice(0, REPORT_BATCH_MAX));
      }
    } finally {
      this.#reportWriters -= 1;
    }
  }

  async #writeReports(batch: readonly QueuedReport[]): Promise<void> {
    const now = this.#core.clock.now();
    let outcomes: (ReportOutcome | RefusedError)[];
    try {
      outcomes = await this.#core.transaction(async (trx) => {
        const rows = await this.#core.lockHosts(trx, [
          ...new Set(batch.map((item) => item.hostId)),
        ]);
        const results: (ReportOutcome | RefusedError)[] = [];
        const events = this.#core.pendingEvents.get(trx) ?? [];
        for (const { hostId, report } of batch) {
          const host = rows.get(hostId);
          if (host === undefined) {
            results.push(new RefusedError('not-found', `Host "${hostId}" does not exist`));
            continue;
          }
          const mark = events.length;
          try {
            const { changes, ...outcome } = await this.#reportChanges(trx, host, report, now);
            await trx.updateTable('hosts').set(changes).where('id', '=', hostId).execute();
            rows.set(hostId, { ...host, ...changes });
            results.push(outcome);
          } catch (error) {
            // A refused report (its facts do not parse) writes nothing, events included; it is
            // refused before its update, so the transaction goes on for the others.
            if (!(error instanceof RefusedError)) throw error;
            events.length = mark;
            results.push(error);
          }
        }
        return results;
      });
    } catch (error) {
      const [only] = batch;
      if (batch.length === 1 && only !== undefined) {
        only.reject(error);
        return;
      }
      // A failed statement aborts the whole transaction: each report again on its own, so one
      // report's failure is its own.
      for (const item of batch) await this.#writeReports([item]);
      return;
    }
    const rebound: string[] = [];
    for (const [i, item] of batch.entries()) {
      const outcome = outcomes[i];
      if (outcome instanceof RefusedError) continue;
      // The report wrote a newer check-in than one held in memory (kept if it had failed).
      if ((this.#checkins.get(item.hostId) ?? Infinity) <= now) this.#checkins.delete(item.hostId);
      if (outcome?.rebound === true) rebound.push(item.hostId);
    }
    let wakeFailure: unknown;
    try {
      if (rebound.length > 0) await this.#core.store.wakeHosts([...new Set(rebound)]);
    } catch (error) {
      wakeFailure = error;
    }
    for (const [i, item] of batch.entries()) {
      const outcome = outcomes[i];
      if (outcome instanceof RefusedError) item.reject(outcome);
      else if (outcome?.rebound === true && wakeFailure !== undefined) item.reject(wakeFailure);
      else item.resolve({ repairs: outcome?.repairs ?? 0 });
    }
  }

  /** What one report changes on its (locked) host row; the events it records are buffered. */
  async #reportChanges(
    trx: Transaction<Database>,
    locked: HostRow,
    report: ParsedStatusReport,
    now: number,
  ): Promise<ReportOutcome & { changes: Partial<HostRow> }> {
    const hostId = locked.id;
    let host = locked;
    let rebound = false;
    const previous = JSON.parse(host.conditions) as Condition[];
    const changes: Partial<HostRow> = {
      last_checkin_at: now,
      agent_version: report.agentVersion,
      applied_hash: report.appliedHash,
      live_hash: report.liveHash,
      counters: JSON.stringify({ counters: report.counters, tunnels: report.tunnels }),
      updated_at: now,
    };
    if (report.facts !== undefined) {
      let facts;
      try {
        facts = parseHostFacts(report.facts, `status of host "${host.name}"`);
      } catch (error) {
        throw new RefusedError(
          'invalid-request',
          isEgressguardError(error) ? error.message : String(error),
        );
      }
      const digest = digestFacts(facts);
      if (digest !== host.facts_digest) {
        changes.facts = JSON.stringify(facts);
        changes.facts_digest = digest;
        changes.labels = JSON.stringify(
          checkLabels(
            { ...(JSON.parse(host.labels) as Record<string, string>), ...facts.labels },
            `the labels of host "${host.name}" (its own and its bootstrap token's)`,
          ),
        );
        host = { ...host, ...changes };
        if (host.desired_push_id !== null) {
          const desired = await this.#core.desiredFields(trx, host, host.desired_push_id);
          rebound = desired.desired_hash !== host.desired_hash;
          Object.assign(changes, desired);
          await this.#core.event(trx, {
            hostId,
            kind: 'facts-changed',
            message: rebound
              ? `facts changed: desired hash now ${short(desired.desired_hash ?? null)}`
              : 'facts changed',
            hash: desired.desired_hash ?? null,
          });
        }
      }
    }
    const attempt = report.attempt;
    if (attempt !== undefined) {
      changes.last_attempted_hash = attempt.hash;
      if (attempt.outcome === 'applied') {
        if (host.failure_hash === attempt.hash) {
          changes.failure_hash = null;
          changes.failure_count = 0;
          changes.next_attempt_at = null;
          changes.last_error = null;
          changes.failure_reason = null;
        }
        if (host.invalid_hash === attempt.hash) {
          changes.invalid_hash = null;
          changes.invalid_message = null;
        }
        await this.#core.event(trx, {
          hostId,
          kind: 'applied',
          message: `applied ${short(attempt.hash)} (attempt ${attempt.number}, ${Math.round(attempt.durationMs)} ms)`,
          hash: attempt.hash,
        });
      } else if (attempt.outcome === 'failed' || attempt.outcome === 'refused') {
        const refused = attempt.outcome === 'refused';
        changes.failure_hash = attempt.hash;
        changes.failure_count = attempt.number;
        changes.next_attempt_at =
          attempt.nextAttemptInMs === undefined ? null : now + attempt.nextAttemptInMs;
        changes.last_error = attempt.message;
        changes.failure_reason = refused ? 'BundleRefused' : null;
        await this.#core.event(trx, {
          hostId,
          kind: refused ? 'bundle-refused' : 'apply-failed',
          message: refused
            ? `the agent refused bundle ${short(attempt.hash)} (attempt ${attempt.number}): ${attempt.message}`
            : `attempt ${attempt.number} at ${short(attempt.hash)} failed: ${attempt.message}`,
          hash: attempt.hash,
        });
      } else {
        changes.invalid_hash = attempt.hash;
        changes.invalid_message = attempt.message;
        await this.#core.event(trx, {
          hostId,
          kind: 'bundle-invalid',
          message: `bundle ${short(attempt.hash)} cannot be valid on this host: ${attempt.message}`,
          hash: attempt.hash,
        });
      }
    }
    let repairs = 0;
    if (report.drift !== undefined) {
      const reported = report.drift.repaired ? (report.drift.repairs ?? 1) : 0;
      // A watcher repairs in seconds, not faster: more than one a second since the host last
      // checked in is not believed (a host's report must not inflate the fleet's counters).
      const last = locked.last_checkin_at ?? locked.enrolled_at;
      repairs = Math.min(reported, 1 + Math.floor(Math.max(0, now - last) / 1000));
      await this.#core.event(trx, {
        hostId,
        kind: report.drift.repaired ? 'drift-repaired' : 'drift',
        message:
          repairs < reported
            ? `${report.drift.message} (it reported ${reported} repairs; counted ${repairs}, one a second since its last check-in)`
            : report.drift.message,
        hash: report.drift.detectedHash,
      });
    }
    const next = { ...host, ...changes };
    changes.converged_since = convergedSince(next, now);
    const conditions = this.#core.conditionsFor({ ...next, ...changes }, previous, now);
    changes.conditions = JSON.stringify(conditions);
    await this.#core.recordTransitions(trx, hostId, previous, conditions);
    return { changes, rebound, repairs };
  }
}
