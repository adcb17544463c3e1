import type { Insertable, Selectable, Transaction } from 'kysely';
import { parseHostFacts } from '../../facts/index.js';
import type { BundleBinder, BindResult } from '../bundle-binder.js';
import { DatabaseClock, systemClock, type Clock } from '../clock.js';
import { deriveConditions, mergeConditions, short, type Condition } from '../conditions.js';
import {
  AGENT_RECONNECT_CAP_MS,
  MAX_HOST_LABELS,
  hostLabelsSchema,
  type HostBundle,
} from '../protocol.js';
import { RefusedError } from '../request-error.js';
import type { judgeHost } from '../rollout-plan.js';
import type { Database, EventTable, HostTable } from '../store/database.js';
import type { Store } from '../store/open-store.js';

export type Db = Transaction<Database> | Store['db'];
export type HostRow = Selectable<HostTable>;

export interface ControllerOptions {
  readonly store: Store;
  readonly binder: BundleBinder;
  /** The controller CA's sha256 pin, written into every bootstrap token (null: plain HTTP). */
  readonly caPin: string | null;
  /**
   * This host's clock; the controller reads the database's through it (`syncClock`), so every
   * stored time and every silence judgement is on the clock all replicas share.
   */
  readonly clock?: Clock;
  /** How long an agent's long poll waits, and so how often a healthy agent checks in. */
  readonly pollIntervalMs?: number;
  /** A host is silent when it has not checked in for this long. Default: two poll intervals. */
  readonly graceMs?: number;
  /**
   * How long after this replica started a host that checked in before the start has to find it
   * again before it is silent. Default: the agents' longest reconnect backoff plus a poll interval.
   */
  readonly restartGraceMs?: number;
  /** Events kept per host. */
  readonly eventsPerHost?: number;
}

const DEFAULT_POLL_MS = 30_000;
/** The shortest silence grace, whatever the poll interval (see the constructor). */
const MIN_GRACE_MS = 60_000;

/**
 * What every role of the controller shares: the store and its clock, the binder and what it
 * prepared and bound, and the writes every role makes (events, audit, a host's desired state).
 */
export class ControllerCore {
  readonly store: Store;
  readonly binder: BundleBinder;
  readonly clock: DatabaseClock;
  readonly caPin: string | null;
  readonly pollIntervalMs: number;
  readonly graceMs: number;
  readonly restartGraceMs: number;
  readonly eventsPerHost: number;
  readonly #startedAtLocal: number;
  /** Prepared policies by push id. */
  readonly prepared = new Map<string, unknown>();
  /**
   * Bound bundles by everything binding reads (push, labels, facts): a host gets a bundle bound
   * to its own labels and facts, never another host's that happens to share its desired hash.
   */
  readonly bundles = new Map<string, { readonly hash: string; readonly bundle: HostBundle }>();
  /** The events a transaction recorded, written when it ends. */
  readonly pendingEvents = new WeakMap<object, Insertable<EventTable>[]>();

  constructor(options: ControllerOptions) {
    this.store = options.store;
    this.binder = options.binder;
    const local = options.clock ?? systemClock;
    this.clock = new DatabaseClock(local, () => options.store.readClock());
    this.caPin = options.caPin;
    this.pollIntervalMs = options.pollIntervalMs ?? DEFAULT_POLL_MS;
    // A host that takes a bundle checks in again only once it applied it (an apply took 10 s on
    // a loaded two-core machine): two short poll intervals would call it silent and pause its wave.
    this.graceMs = options.graceMs ?? Math.max(2 * this.pollIntervalMs, MIN_GRACE_MS);
    this.restartGraceMs =
      options.restartGraceMs ??
      Math.max(this.graceMs, AGENT_RECONNECT_CAP_MS + this.pollIntervalMs);
    this.eventsPerHost = options.eventsPerHost ?? 100;
    this.#startedAtLocal = local.now();
  }

  /** When this replica started, on the database's clock. */
  get startedAt(): number {
    return Math.round(this.#startedAtLocal + this.clock.offsetMs);
  }

  async setDesired(
    trx: Transaction<Database>,
    host: HostRow,
    pushId: string,
    now: number,
  ): Promise<void> {
    const desired = await this.desiredFields(trx, host, pushId);
    const next = { ...host, ...desired };
    const changes: Partial<HostRow> = {
      ...desired,
      converged_since: convergedSince(next, now),
      updated_at: now,
    };
    if (desired.desired_hash !== host.desired_hash) {
      // A new desired hash re-arms everything: the old budget belongs to the old hash.
      Object.assign(changes, {
        failure_hash: null,
        failure_count: 0,
        next_attempt_at: null,
        last_error: null,
        failure_reason: null,
      });
      await this.event(trx, {
        hostId: host.id,
        kind: 'desired',
        message:
          desired.desired_error === null
            ? `desired ${short(desired.desired_hash ?? null)} (push ${pushId})`
            : `push ${pushId} cannot be bound: ${desired.desired_error}`,
        hash: desired.desired_hash ?? null,
      });
    }
    const previous = JSON.parse(host.conditions) as Condition[];
    const conditions = this.conditionsFor({ ...host, ...changes }, previous, now);
    changes.conditions = JSON.stringify(conditions);
    await this.recordTransitions(trx, host.id, previous, conditions);
    await trx.updateTable('hosts').set(changes).where('id', '=', host.id).execute();
  }

  async desiredFields(
    db: Db,
    host: HostRow,
    pushId: string,
  ): Promise<Pick<HostRow, 'desired_push_id' | 'desired_hash' | 'desired_error'>> {
    const bound = await this.bind(db, host, pushId);
    if (!bound.ok) {
      return {
        desired_push_id: pushId,
        desired_hash: null,
        desired_error: JSON.stringify({ reason: bound.reason, message: bound.message }),
      };
    }
    this.remember(bindingKey(host, pushId), bound.hash, bound.bundle);
    return { desired_push_id: pushId, desired_hash: bound.hash, desired_error: null };
  }

  async bind(db: Db, host: HostRow, pushId: string): Promise<BindResult> {
    let prepared = this.prepared.get(pushId);
    if (prepared === undefined) {
      const push = await db
        .selectFrom('pushes')
        .select(['policy_text', 'source', 'backend_options'])
        .where('id', '=', pushId)
        .executeTakeFirstOrThrow();
      const again = this.binder.preparePolicy({
        text: push.policy_text,
        source: push.source,
        pushId,
        options: JSON.parse(push.backend_options) as Record<string, string>,
      });
      if (!again.ok) {
        return {
          ok: false,
          reason: 'PolicyInvalid',
          message: `push ${pushId} no longer validates: ${again.issues[0]?.message ?? 'unknown problem'}`,
        };
      }
      prepared = again.prepared;
      this.prepared.set(pushId, prepared);
    }
    return this.binder.bindHost(prepared, {
      hostName: host.name,
      facts:
        host.facts === null ? null : parseHostFacts(JSON.parse(host.facts), `host "${host.name}"`),
      factsDigest: host.facts_digest,
      labels: JSON.parse(host.labels) as Record<string, string>,
    });
  }

  remember(key: string, hash: string, bundle: HostBundle): void {
    if (this.bundles.size >= 20_000) this.bundles.clear();
    this.bundles.set(key, { hash, bundle });
  }

  async baselinePush(db: Db): Promise<string | undefined> {
    const succeeded = await db
      .selectFrom('rollouts')
      .innerJoin('pushes', 'pushes.id', 'rollouts.push_id')
      .select('pushes.id')
      .where('rollouts.state', '=', 'succeeded')
      .orderBy('pushes.seq', 'desc')
      .limit(1)
      .executeTakeFirst();
    if (succeeded !== undefined) return succeeded.id;
    const newest = await db
      .selectFrom('pushes')
      .select('id')
      .orderBy('seq', 'desc')
      .limit(1)
      .executeTakeFirst();
    return newest?.id;
  }

  async lockHost(trx: Transaction<Database>, hostId: string): Promise<HostRow> {
    const host = await this.store
      .lockRows(trx.selectFrom('hosts').selectAll().where('id', '=', hostId))
      .executeTakeFirst();
    if (host === undefined) throw new RefusedError('not-found', `Host "${hostId}" does not exist`);
    return host;
  }

  /**
   * Several hosts locked with one statement, in id order as every statement that locks several
   * hosts does (a report batch, a wave's start, the stragglers, the check-in flush): no deadlock.
   */
  async lockHosts(
    trx: Transaction<Database>,
    hostIds: readonly string[],
  ): Promise<Map<string, HostRow>> {
    if (hostIds.length === 0) return new Map();
    const locked = await this.store
      .lockRows(trx.selectFrom('hosts').selectAll().where('id', 'in', hostIds).orderBy('id'))
      .execute();
    return new Map(locked.map((h) => [h.id, h]));
  }

  async hostByName(db: Db, hostName: string): Promise<HostRow> {
    const host = await db
      .selectFrom('hosts')
      .selectAll()
      .where('name', '=', hostName)
      .where('decommissioned_at', 'is', null)
      .executeTakeFirst();
    if (host === undefined) {
      throw new RefusedError(
        'not-found',
        `Host "${hostName}" is not enrolled: see egressguard fleet status`,
      );
    }
    return host;
  }

  conditionsFor(host: HostRow, previous: readonly Condition[], now: number): Condition[] {
    const desiredError =
      host.desired_error === null
        ? null
        : (JSON.parse(host.desired_error) as { reason: string; message: string });
    return mergeConditions(
      previous,
      deriveConditions({
        desiredHash: host.desired_hash,
        desiredError,
        appliedHash: host.applied_hash,
        liveHash: host.live_hash,
        failureHash: host.failure_hash,
        failureCount: host.failure_count,
        failureReason: host.failure_reason,
        nextAttemptAt: host.next_attempt_at,
        lastError: host.last_error,
        invalidHash: host.invalid_hash,
        invalidMessage: host.invalid_message,
        suspended: host.suspended === 1,
      }),
      now,
    );
  }

  /** A condition whose status changed is an event: the host's short history. */
  async recordTransitions(
    trx: Transaction<Database>,
    hostId: string,
    previous: readonly Condition[],
    next: readonly Condition[],
  ): Promise<void> {
    for (const condition of next) {
      const before = previous.find((c) => c.type === condition.type);
      if (before?.status === condition.status) continue;
      if (before === undefined && condition.status === 'False') continue;
      await this.event(trx, {
        hostId,
        kind: 'condition',
        message: `${condition.type}=${condition.status} (${condition.reason}): ${condition.message}`,
        hash: condition.observedHash,
      });
    }
  }

  silentSince(host: HostRow, now: number): number | null {
    const last = host.last_checkin_at ?? host.enrolled_at;
    // A host last seen before this replica started may be in its agent's reconnect backoff (up to
    // AGENT_RECONNECT_CAP_MS): it is silent only once the restart grace is over too.
    const startedAt = this.startedAt;
    const deadline =
      last < startedAt
        ? Math.max(last + this.graceMs, startedAt + this.restartGraceMs)
        : last + this.graceMs;
    return now > deadline ? last : null;
  }

  waveHost(host: HostRow, now: number): Parameters<typeof judgeHost>[0] {
    return {
      desiredHash: host.desired_hash,
      desiredError: host.desired_error !== null,
      appliedHash: host.applied_hash,
      liveHash: host.live_hash,
      failureHash: host.failure_hash,
      invalidHash: host.invalid_hash,
      convergedSince: host.converged_since,
      suspended: host.suspended === 1,
      decommissioned: host.decommissioned_at !== null,
      silent: this.silentSince(host, now) !== null,
    };
  }

  /**
   * A transaction whose events are written in one statement when it ends (a wave of a thousand
   * hosts records thousands of events), in the order they were recorded.
   */
  async transaction<T>(work: (trx: Transaction<Database>) => Promise<T>): Promise<T> {
    return this.store.db.transaction().execute(async (trx) => {
      const buffer: Insertable<EventTable>[] = [];
      this.pendingEvents.set(trx, buffer);
      const result = await work(trx);
      // SQLite allows 32766 bound values per statement: 8 a row.
      for (let i = 0; i < buffer.length; i += 1000) {
        await trx
          .insertInto('events')
          .values(buffer.slice(i, i + 1000))
          .onConflict((oc) => oc.column('once_key').doNothing())
          .execute();
      }
      return result;
    });
  }

  async event(
    db: Db,
    event: {
      hostId?: string;
      rolloutId?: string;
      kind: string;
      message: string;
      hash?: string | null;
      onceKey?: string;
    },
  ): Promise<void> {
    const row: Insertable<EventTable> = {
      at: this.clock.now(),
      host_id: event.hostId ?? null,
      rollout_id: event.rolloutId ?? null,
      kind: event.kind,
      message: event.message,
      hash: event.hash ?? null,
      once_key: event.onceKey ?? null,
    };
    const buffer = this.pendingEvents.get(db);
    if (buffer !== undefined) {
      buffer.push(row);
      return;
    }
    await db
      .insertInto('events')
      .values(row)
      .onConflict((oc) => oc.column('once_key').doNothing())
      .execute();
  }

  async audit(
    db: Db,
    actor: string,
    action: string,
    target: string,
    details: unknown,
  ): Promise<void> {
    await db
      .insertInto('audit_log')
      .values({ at: this.clock.now(), actor, action, target, details: JSON.stringify(details) })
      .execute();
  }
}

/**
 * Refuses labels a bundle could not carry (more than MAX_HOST_LABELS, or too long), so that a
 * host's labels never make its own bundle, or a rollout, fail later.
 */
export function checkLabels(labels: Record<string, string>, what: string): Record<string, string> {
  const parsed = hostLabelsSchema.safeParse(labels);
  if (parsed.success) return labels;
  const count = Object.keys(labels).length;
  const key = parsed.error.issues[0]?.path[0];
  throw new RefusedError(
    'invalid-request',
    count > MAX_HOST_LABELS
      ? `Cannot take ${what}: ${count} labels, at most ${MAX_HOST_LABELS}: remove some from the host's labels file or the token's --label`
      : `Cannot take ${what}: label ${JSON.stringify(String(key))} is too long or empty: keys are 1 to 128 characters, values at most 256`,
  );
}

/** Everything binding a push to a host reads: the push, the host's labels and its facts. */
export function bindingKey(host: Pick<HostRow, 'labels' | 'facts_digest'>, pushId: string): string {
  return `${pushId}\n${host.facts_digest ?? ''}\n${host.labels}`;
}

export function convergedSince(host: HostRow, now: number): number | null {
  const converged =
    host.desired_hash !== null &&
    host.applied_hash === host.desired_hash &&
    host.live_hash === host.desired_hash;
  if (!converged) return null;
  return host.converged_since ?? now;
}
