import { sql, type Insertable, type Selectable, type Transaction } from 'kysely';
import { isEgressguardError } from '../core/index.js';
import { parseHostFacts } from '../facts/index.js';
import type { PolicyIssue } from '../policy/index.js';
import { digestFacts, type BundleBinder, type BindResult } from './bundle-binder.js';
import { findPushOptionProblem } from './compile-bundle.js';
import { DatabaseClock, systemClock, type Clock } from './clock.js';
import {
  deriveConditions,
  mergeConditions,
  overlaySilence,
  short,
  type Condition,
} from './conditions.js';
import {
  AGENT_RECONNECT_CAP_MS,
  MAX_HOST_LABELS,
  hostLabelsSchema,
  type BundleResponse,
  type EnrollRequest,
  type EnrollResponse,
  type HostBundle,
  type ParsedStatusReport,
} from './protocol.js';
import { RefusedError } from './request-error.js';
import {
  judgeHost,
  judgeWave,
  planWaves,
  resolveRolloutParams,
  type RolloutParams,
  type RolloutParamsInput,
} from './rollout-plan.js';
import {
  createId,
  createSecret,
  formatBootstrapToken,
  formatCredential,
  hashSecret,
  matchesSecret,
  parseBootstrapToken,
  parseCredential,
} from './secrets.js';
import type { Database, EventTable, HostTable, RolloutState, WaveState } from './store/database.js';
import type { Store } from './store/open-store.js';

type Db = Transaction<Database> | Store['db'];
type HostRow = Selectable<HostTable>;

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

export interface HostIdentity {
  readonly hostId: string;
  readonly credentialId: string;
}

/** One host as `fleet status` shows it. */
export interface HostView {
  readonly id: string;
  readonly name: string;
  readonly labels: Readonly<Record<string, string>>;
  readonly agentVersion: string | null;
  readonly enrolledAt: number;
  readonly lastCheckinAt: number | null;
  /** The host has not checked in within its grace. */
  readonly silent: boolean;
  readonly suspended: boolean;
  readonly decommissioned: boolean;
  readonly desiredPushId: string | null;
  readonly desiredHash: string | null;
  readonly lastAttemptedHash: string | null;
  readonly appliedHash: string | null;
  readonly liveHash: string | null;
  readonly failures: {
    readonly hash: string;
    readonly count: number;
    readonly nextAttemptAt: number | null;
    readonly lastError: string | null;
  } | null;
  readonly conditions: readonly Condition[];
}

export interface WaveView {
  readonly index: number;
  readonly state: WaveState;
  readonly hosts: readonly string[];
  readonly startedAt: number | null;
  readonly judgedAt: number | null;
}

export interface RolloutView {
  readonly id: string;
  readonly pushId: string;
  readonly state: RolloutState;
  readonly params: RolloutParams;
  readonly currentWave: number;
  readonly pausedReason: string | null;
  readonly createdAt: number;
  readonly waves: readonly WaveView[];
}

export interface EventView {
  readonly at: number;
  readonly host: string | null;
  readonly rolloutId: string | null;
  readonly kind: string;
  readonly message: string;
  readonly hash: string | null;
}

export interface AuditEntry {
  readonly at: number;
  readonly actor: string;
  readonly action: string;
  readonly target: string;
  readonly details: unknown;
}

export type PushResult =
  | {
      readonly ok: true;
      readonly pushId: string;
      readonly rolloutId: string;
      readonly waves: readonly number[];
      readonly warnings: readonly PolicyIssue[];
      /** The push was made earlier under the same idempotency key: nothing new was pushed. */
      readonly replayed?: boolean;
    }
  | { readonly ok: false; readonly issues: readonly PolicyIssue[] };

const DEFAULT_POLL_MS = 30_000;
/** The shortest silence grace, whatever the poll interval (see the constructor). */
const MIN_GRACE_MS = 60_000;
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
 * The fleet's control logic over one store. Every replica runs one; they share nothing but the
 * database: rollout steps run under a row lock and record their transitions under a unique key, so
 * two replicas never start a wave twice.
 */
export class Controller {
  readonly pollIntervalMs: number;
  readonly graceMs: number;
  readonly restartGraceMs: number;
  readonly #startedAtLocal: number;
  readonly #store: Store;
  readonly #binder: BundleBinder;
  readonly #clock: DatabaseClock;
  readonly #caPin: string | null;
  readonly #eventsPerHost: number;
  readonly #prepared = new Map<string, unknown>();
  /**
   * Bound bundles by everything binding reads (push, labels, facts): a host gets a bundle bound
   * to its own labels and facts, never another host's that happens to share its desired hash.
   */
  readonly #bundles = new Map<string, { readonly hash: string; readonly bundle: HostBundle }>();
  readonly #pendingEvents = new WeakMap<object, Insertable<EventTable>[]>();
  /** Check-ins not yet written, by host: when each was last seen. */
  readonly #checkins = new Map<string, number>();
  #flushing: Promise<void> = Promise.resolve();
  /** Status reports waiting to be written, and how many writers are draining them. */
  readonly #reportQueue: QueuedReport[] = [];
  #reportWriters = 0;

  constructor(options: ControllerOptions) {
    this.#store = options.store;
    this.#binder = options.binder;
    const local = options.clock ?? systemClock;
    this.#clock = new DatabaseClock(local, () => options.store.readClock());
    this.#caPin = options.caPin;
    this.pollIntervalMs = options.pollIntervalMs ?? DEFAULT_POLL_MS;
    // A host that takes a bundle checks in again only once it applied it (an apply took 10 s on
    // a loaded two-core machine): two short poll intervals would call it silent and pause its wave.
    this.graceMs = options.graceMs ?? Math.max(2 * this.pollIntervalMs, MIN_GRACE_MS);
    this.restartGraceMs =
      options.restartGraceMs ??
      Math.max(this.graceMs, AGENT_RECONNECT_CAP_MS + this.pollIntervalMs);
    this.#eventsPerHost = options.eventsPerHost ?? 100;
    this.#startedAtLocal = local.now();
  }

  get store(): Store {
    return this.#store;
  }

  /** When this replica started, on the database's clock. */
  get startedAt(): number {
    return Math.round(this.#startedAtLocal + this.#clock.offsetMs);
  }

  /** Samples the database's clock again (every tick does; the server once before it listens). */
  syncClock(): Promise<void> {
    return this.#clock.sync();
  }

  // ── enrollment and credentials ────────────────────────────────────────────────────────────

  /** Mints a bootstrap token that enrolls up to `uses` hosts before it expires. */
  async createBootstrapToken(
    options: {
      ttlMs: number;
      uses: number;
      labels?: Readonly<Record<string, string>>;
      description?: string;
    },
    actor: string,
  ): Promise<{ token: string; id: string; expiresAt: number }> {
    const now = this.#clock.now();
    checkLabels({ ...options.labels }, 'the labels of a bootstrap token');
    const id = createId('t');
    const secret = createSecret();
    const expiresAt = now + options.ttlMs;
    await this.#transaction(async (trx) => {
      await trx
        .insertInto('bootstrap_tokens')
        .values({
          id,
          secret_hash: hashSecret(secret),
          created_at: now,
          expires_at: expiresAt,
          uses_left: options.uses,
          labels: JSON.stringify(options.labels ?? {}),
          description: options.description ?? '',
          revoked_at: null,
        })
        .execute();
      await this.#audit(trx, actor, 'token.create', id, {
        uses: options.uses,
        expiresAt,
        labels: options.labels ?? {},
      });
    });
    return { token: formatBootstrapToken({ id, secret, caPin: this.#caPin }), id, expiresAt };
  }

  /** Exchanges a bootstrap token for the host's own credential (shown once, stored hashed). */
  async enroll(request: EnrollRequest): Promise<EnrollResponse> {
    const now = this.#clock.now();
    const token = parseBootstrapToken(request.token);
    if (token === undefined) {
      throw new RefusedError('unauthenticated', 'Cannot enroll: the bootstrap token is malformed');
    }
    let facts;
    try {
      facts = parseHostFacts(request.facts, `enrollment of "${request.hostname}"`);
    } catch (error) {
      throw new RefusedError(
        'invalid-request',
        isEgressguardError(error) ? error.message : String(error),
      );
    }
    const hostId = createId('h');
    const credentialId = createId('c');
    const secret = createSecret();
    let enrolledAgain: string | undefined;
    await this.#transaction(async (trx) => {
      const row = await trx
        .selectFrom('bootstrap_tokens')
        .selectAll()
        .where('id', '=', token.id)
        .executeTakeFirst();
      if (row === undefined || !matchesSecret(token.secret, row.secret_hash)) {
        throw new RefusedError(
          'unauthenticated',
          `Cannot enroll host "${request.hostname}": the bootstrap token is not known`,
        );
      }
      if (row.revoked_at !== null || row.expires_at <= now) {
        throw new RefusedError(
          'unauthenticated',
          `Cannot enroll host "${request.hostname}": bootstrap token "${token.id}" has expired or was revoked`,
        );
      }
      const existing = await trx
        .selectFrom('hosts')
        .select(['id', 'enrolled_token_id'])
        .where('name', '=', request.hostname)
        .where('decommissioned_at', 'is', null)
        .executeTakeFirst();
      if (existing !== undefined) {
        if (await this.#isUnansweredEnrollment(trx, existing, token.id)) {
          // The agent enrolled, but the answer never reached it (a timeout, a broken
          // connection): it asks again with the same token. Its unused credential is replaced.
          enrolledAgain = existing.id;
          await trx
            .updateTable('credentials')
            .set({ revoked_at: now })
            .where('host_id', '=', existing.id)
            .where('revoked_at', 'is', null)
            .execute();
          await this.#insertCredential(trx, { id: credentialId, hostId: existing.id, secret, now });
          await this.#event(trx, {
            hostId: existing.id,
            kind: 'enrolled',
            message: `enrolled again with bootstrap token "${token.id}": the first answer was not received`,
          });
          return;
        }
        throw new RefusedError(
          'conflict',
          `Cannot enroll host "${request.hostname}": a host of that name is enrolled; decommission it first (egressguard fleet decommission ${request.hostname})`,
        );
      }
      // The decrement is conditional, so two agents racing for the last use cannot both win.
      const used = await trx
        .updateTable('bootstrap_tokens')
        .set((eb) => ({ uses_left: eb('uses_left', '-', 1) }))
        .where('id', '=', token.id)
        .where('uses_left', '>', 0)
        .executeTakeFirst();
      if (used.numUpdatedRows === 0n) {
        throw new RefusedError(
          'unauthenticated',
          `Cannot enroll host "${request.hostname}": bootstrap token "${token.id}" has no uses left`,
        );
      }
      const labels = checkLabels(
        { ...facts.labels, ...(JSON.parse(row.labels) as Record<string, string>) },
        `the labels of host "${request.hostname}" (its own and bootstrap token "${token.id}"'s)`,
      );
      const base: HostRow = {
        id: hostId,
        name: request.hostname,
        labels: JSON.stringify(labels),
        facts: JSON.stringify(facts),
        facts_digest: digestFacts(facts),
        agent_version: request.agentVersion,
        enrolled_at: now,
        enrolled_token_id: token.id,
        last_checkin_at: now,
        desired_push_id: null,
        desired_hash: null,
        desired_error: null,
        last_attempted_hash: null,
        applied_hash: null,
        live_hash: null,
        failure_hash: null,
        failure_count: 0,
        next_attempt_at: null,
        last_error: null,
        failure_reason: null,
        invalid_hash: null,
        invalid_message: null,
        converged_since: null,
        retry_token: 0,
        force_token: 0,
        suspended: 0,
        decommissioned_at: null,
        conditions: '[]',
        counters: null,
        updated_at: now,
      };
      // A new host starts on the fleet's baseline: the last push that rolled out, else the newest.
      const baseline = await this.#baselinePush(trx);
      const host =
        baseline === undefined
          ? base
          : { ...base, ...(await this.#desiredFields(trx, base, baseline)) };
      await trx
        .insertInto('hosts')
        .values({ ...host, conditions: JSON.stringify(this.#conditionsFor(host, [], now)) })
        .execute();
      await this.#insertCredential(trx, { id: credentialId, hostId, secret, now });
      await this.#event(trx, {
        hostId,
        kind: 'enrolled',
        message: `enrolled with bootstrap token "${token.id}"`,
      });
      await this.#audit(trx, `token:${token.id}`, 'host.enroll', request.hostname, { hostId });
    });
    return {
      hostId: enrolledAgain ?? hostId,
      hostName: request.hostname,
      credential: formatCredential({ id: credentialId, secret }),
    };
  }

  /**
   * Whether an enrolled host of this name is one whose enrollment answer was lost: enrolled with
   * this very token, and none of its credentials ever used. Anyone else gets a conflict.
   */
  async #isUnansweredEnrollment(
    trx: Transaction<Database>,
    host: Pick<HostRow, 'id' | 'enrolled_token_id'>,
    tokenId: string,
  ): Promise<boolean> {
    if (host.enrolled_token_id !== tokenId) return false;
    const used = await trx
      .selectFrom('credentials')
      .select('id')
      .where('host_id', '=', host.id)
      .where('first_used_at', 'is not', null)
      .executeTakeFirst();
    return used === undefined;
  }

  async #insertCredential(
    trx: Transaction<Database>,
    credential: { id: string; hostId: string; secret: string; now: number },
  ): Promise<void> {
    await trx
      .insertInto('credentials')
      .values({
        id: credential.id,
        host_id: credential.hostId,
        secret_hash: hashSecret(credential.secret),
        created_at: credential.now,
        first_used_at: null,
        revoked_at: null,
        replaced_by: null,
      })
      .execute();
  }

  /** The host a credential belongs to, or a refusal (unknown, revoked, decommissioned). */
  async authenticateHost(presented: string): Promise<HostIdentity> {
    const credential = parseCredential(presented);
    if (credential === undefined) {
      throw new RefusedError('unauthenticated', 'The host credential is malformed');
    }
    const row = await this.#store.db
      .selectFrom('credentials')
      .innerJoin('hosts', 'hosts.id', 'credentials.host_id')
      .select([
        'credentials.id as id',
        'credentials.host_id as host_id',
        'credentials.secret_hash as secret_hash',
        'credentials.revoked_at as revoked_at',
        'credentials.first_used_at as first_used_at',
        'hosts.decommissioned_at as decommissioned_at',
      ])
      .where('credentials.id', '=', credential.id)
      .executeTakeFirst();
    if (row === undefined || !matchesSecret(credential.secret, row.secret_hash)) {
      throw new RefusedError('unauthenticated', 'The host credential is not known');
    }
    if (row.decommissioned_at !== null) {
      throw new RefusedError('gone', 'This host was decommissioned');
    }
    if (row.revoked_at !== null) {
      throw new RefusedError('unauthenticated', `Host credential "${row.id}" was revoked`);
    }
    if (row.first_used_at === null) {
      // First use of a rotated credential: the agent stored it, so the one it replaced retires.
      const now = this.#clock.now();
      await this.#transaction(async (trx) => {
        await trx
          .updateTable('credentials')
          .set({ first_used_at: now })
          .where('id', '=', row.id)
          .execute();
        await trx
          .updateTable('credentials')
          .set({ revoked_at: now })
          .where('replaced_by', '=', row.id)
          .where('revoked_at', 'is', null)
          .execute();
      });
    }
    return { hostId: row.host_id, credentialId: row.id };
  }

  /**
   * Issues a new credential; the one presented stays valid until the new one is first used. At
   * most those two are ever valid: every other credential of the host (an earlier pending one
   * never used, an older one) is revoked now.
   */
  async rotateCredential(identity: HostIdentity): Promise<string> {
    const now = this.#clock.now();
    const id = createId('c');
    const secret = createSecret();
    await this.#transaction(async (trx) => {
      await trx
        .updateTable('credentials')
        .set({ revoked_at: now })
        .where('host_id', '=', identity.hostId)
        .where('id', '!=', identity.credentialId)
        .where('revoked_at', 'is', null)
        .execute();
      await this.#insertCredential(trx, { id, hostId: identity.hostId, secret, now });
      await trx
        .updateTable('credentials')
        .set({ replaced_by: id })
        .where('id', '=', identity.credentialId)
        .execute();
      await this.#event(trx, {
        hostId: identity.hostId,
        kind: 'credential-rotated',
        message: `credential "${identity.credentialId}" rotated to "${id}"`,
      });
      await this.#audit(trx, `host:${identity.hostId}`, 'credential.rotate', identity.hostId, {
        from: identity.credentialId,
        to: id,
      });
    });
    return formatCredential({ id, secret });
  }

  /** Revokes every credential of a host: its agent is refused until it enrolls again. */
  async revokeCredentials(hostName: string, actor: string): Promise<{ revoked: number }> {
    const now = this.#clock.now();
    const host = await this.#hostByName(this.#store.db, hostName);
    const result = await this.#transaction(async (trx) => {
      const updated = await trx
        .updateTable('credentials')
        .set({ revoked_at: now })
        .where('host_id', '=', host.id)
        .where('revoked_at', 'is', null)
        .executeTakeFirst();
      await this.#event(trx, {
        hostId: host.id,
        kind: 'credential-revoked',
        message: `credentials revoked by ${actor}`,
      });
      await this.#audit(trx, actor, 'credential.revoke', hostName, {
        revoked: Number(updated.numUpdatedRows),
      });
      return { revoked: Number(updated.numUpdatedRows) };
    });
    await this.#store.wakeHosts([host.id]);
    return result;
  }

  // ── the agent's side: bundle and status ──────────────────────────────────────────────────

  /** What the host should run now; the long poll compares it with what the agent knows. */
  async bundleFor(hostId: string): Promise<BundleResponse & { decommissioned: boolean }> {
    const host = await this.#store.db
      .selectFrom('hosts')
      .selectAll()
      .where('id', '=', hostId)
      .executeTakeFirstOrThrow();
    let bundle: HostBundle | null = null;
    if (host.desired_hash !== null && host.desired_push_id !== null) {
      const key = bindingKey(host, host.desired_push_id);
      const known = this.#bundles.get(key);
      if (known?.hash === host.desired_hash) {
        bundle = known.bundle;
      } else {
        const bound = await this.#bind(this.#store.db, host, host.desired_push_id);
        if (bound.ok && bound.hash === host.desired_hash) {
          bundle = bound.bundle;
          this.#remember(key, bound.hash, bound.bundle);
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
      pollIntervalMs: this.pollIntervalMs,
      decommissioned: host.decommissioned_at !== null,
    };
  }

  /**
   * Records that the host's agent is alive. A long poll checks in every poll interval: 10,000
   * hosts at 30 s are 333 writes a second, so check-ins are kept in memory and written together
   * by `flushCheckins` (every tick, before every view, at close), one statement per batch.
   */
  async checkIn(hostId: string): Promise<void> {
    this.#checkins.set(hostId, this.#clock.now());
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
        await this.#store.db
          .updateTable('hosts')
          .set({ last_checkin_at: seen })
          .where('id', 'in', (eb) => {
            // Locked in id order, as every statement that locks several hosts does: no deadlock
            // with a batch of status reports.
            const ids = eb
              .selectFrom('hosts')
              .select('id')
              .where(
                'id',
                'in',
                chunk.map(([id]) => id),
              )
              .orderBy('id');
            return this.#store.dialect === 'postgres' ? ids.forUpdate() : ids;
          })
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
    const now = this.#clock.now();
    let outcomes: (ReportOutcome | RefusedError)[];
    try {
      outcomes = await this.#transaction(async (trx) => {
        const rows = await this.#lockHosts(trx, [...new Set(batch.map((item) => item.hostId))]);
        const results: (ReportOutcome | RefusedError)[] = [];
        const events = this.#pendingEvents.get(trx) ?? [];
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
      if (rebound.length > 0) await this.#store.wakeHosts([...new Set(rebound)]);
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
          const desired = await this.#desiredFields(trx, host, host.desired_push_id);
          rebound = desired.desired_hash !== host.desired_hash;
          Object.assign(changes, desired);
          await this.#event(trx, {
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
        await this.#event(trx, {
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
        await this.#event(trx, {
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
        await this.#event(trx, {
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
      await this.#event(trx, {
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
    const conditions = this.#conditionsFor({ ...next, ...changes }, previous, now);
    changes.conditions = JSON.stringify(conditions);
    await this.#recordTransitions(trx, hostId, previous, conditions);
    return { changes, rebound, repairs };
  }

  // ── operators ─────────────────────────────────────────────────────────────────────────────

  /** Validates a policy and starts rolling it out in waves; supersedes any unfinished rollout. */
  async push(
    input: {
      text: string;
      source: string;
      rollout?: RolloutParamsInput;
      /** Backend options for every host's compile (`--rule-priority`…). */
      options?: Readonly<Record<string, string>>;
      /**
       * The client's key for this push: a push sent again with it (a retry after an error or a
       * lost answer) is answered with the push it made, never made twice.
       */
      idempotencyKey?: string;
    },
    actor: string,
    kind: 'push' | 'rollback' = 'push',
  ): Promise<PushResult> {
    const pushId = createId('p');
    const options = input.options ?? {};
    const optionProblem = findPushOptionProblem(options);
    if (optionProblem !== undefined) throw new RefusedError('invalid-request', optionProblem);
    const prepared = this.#binder.preparePolicy({
      text: input.text,
      source: input.source,
      pushId,
      options,
    });
    if (!prepared.ok) return { ok: false, issues: prepared.issues };
    const key = input.idempotencyKey;
    const replay = async (): Promise<PushResult | undefined> =>
      key === undefined
        ? undefined
        : this.#replayPush(key, prepared.digest, input.source, prepared.warnings);
    const earlier = await replay();
    if (earlier !== undefined) return earlier;
    this.#prepared.set(pushId, prepared.prepared);
    const now = this.#clock.now();
    const rolloutId = createId('r');
    let waves: number[];
    try {
      waves = await this.#recordPush(
        { pushId, rolloutId, kind, now, digest: prepared.digest, ...input, options },
        actor,
      );
    } catch (error) {
      // The same key pushed at once by another request (or replica) that won the unique index.
      const raced = await replay().catch(() => undefined);
      if (raced !== undefined) return raced;
      throw error;
    }
    // The push is committed: a store that fails now (its disk full) delays the first wave, which
    // the ticker starts as soon as it can, but does not make the push a failure to be retried.
    await this.advanceRollout(rolloutId).catch((error: unknown) => {
      if (this.#store.noteFailure(error) === undefined) throw error;
    });
    return { ok: true, pushId, rolloutId, waves, warnings: prepared.warnings };
  }

  /** The push an idempotency key already made, or undefined; a key reused for another policy is refused. */
  async #replayPush(
    key: string,
    digest: string,
    source: string,
    warnings: readonly PolicyIssue[],
  ): Promise<PushResult | undefined> {
    const push = await this.#store.db
      .selectFrom('pushes')
      .innerJoin('rollouts', 'rollouts.push_id', 'pushes.id')
      .select(['pushes.id as pushId', 'pushes.policy_digest as digest', 'rollouts.id as rolloutId'])
      .where('pushes.idempotency_key', '=', key)
      .executeTakeFirst();
    if (push === undefined) return undefined;
    if (push.digest !== digest) {
      throw new RefusedError(
        'conflict',
        `Cannot push "${source}" with idempotency key "${key}": push ${push.pushId} used it for another policy or options; use a new key`,
      );
    }
    const waves = await this.#store.db
      .selectFrom('waves')
      .select('host_ids')
      .where('rollout_id', '=', push.rolloutId)
      .orderBy('wave_index')
      .execute();
    return {
      ok: true,
      pushId: push.pushId,
      rolloutId: push.rolloutId,
      waves: waves.map((w) => (JSON.parse(w.host_ids) as string[]).length),
      warnings,
      replayed: true,
    };
  }

  /** Writes a push, its rollout and its waves in one transaction; returns the waves' sizes. */
  async #recordPush(
    push: {
      pushId: string;
      rolloutId: string;
      kind: 'push' | 'rollback';
      now: number;
      digest: string;
      text: string;
      source: string;
      rollout?: RolloutParamsInput;
      options: Readonly<Record<string, string>>;
      idempotencyKey?: string;
    },
    actor: string,
  ): Promise<number[]> {
    const { pushId, rolloutId, kind, now } = push;
    return this.#transaction(async (trx) => {
      await trx
        .insertInto('pushes')
        .values({
          id: pushId,
          policy_text: push.text,
          policy_digest: push.digest,
          source: push.source,
          kind,
          created_at: now,
          backend_options: JSON.stringify(push.options),
          idempotency_key: push.idempotencyKey ?? null,
        })
        .execute();
      await this.#supersedeRollouts(trx, rolloutId);
      const hosts = await trx
        .selectFrom('hosts')
        .select('id')
        .where('decommissioned_at', 'is', null)
        .orderBy('name')
        .execute();
      const params = resolveRolloutParams(push.rollout ?? {}, hosts.length);
      const planned = planWaves(
        hosts.map((h) => h.id),
        params,
      );
      await trx
        .insertInto('rollouts')
        .values({
          id: rolloutId,
          push_id: pushId,
          state: 'progressing',
          params: JSON.stringify(params),
          current_wave: 0,
          paused_reason: null,
          created_at: now,
          updated_at: now,
        })
        .execute();
      for (const [index, hostIds] of planned.entries()) {
        await trx
          .insertInto('waves')
          .values({
            rollout_id: rolloutId,
            wave_index: index,
            host_ids: JSON.stringify(hostIds),
            state: 'pending',
            started_at: null,
            judged_at: null,
          })
          .execute();
      }
      await this.#event(trx, {
        rolloutId,
        kind: 'rollout-created',
        message: `${kind} ${pushId} from "${push.source}": ${planned.length} waves (${planned.map((w) => w.length).join(', ')} hosts)`,
      });
      await this.#audit(trx, actor, kind === 'push' ? 'policy.push' : 'policy.rollback', pushId, {
        source: push.source,
        digest: push.digest,
        rolloutId,
        params,
        ...(push.idempotencyKey === undefined ? {} : { idempotencyKey: push.idempotencyKey }),
      });
      return planned.map((w) => w.length);
    });
  }

  /** Rolls the fleet back to the policy pushed before the current one, in one wave. */
  async rollback(
    actor: string,
    rollout: RolloutParamsInput = {},
  ): Promise<PushResult & { restoredPushId?: string }> {
    const pushes = await this.#store.db
      .selectFrom('pushes')
      .select(['id', 'policy_text', 'source', 'policy_digest', 'backend_options'])
      .orderBy('seq', 'desc')
      .limit(50)
      .execute();
    const current = pushes[0];
    const previous = pushes.find(
      (p) => current !== undefined && p.policy_digest !== current.policy_digest,
    );
    if (current === undefined || previous === undefined) {
      throw new RefusedError('conflict', 'Cannot roll back: no earlier policy was pushed');
    }
    const result = await this.push(
      {
        text: previous.policy_text,
        source: previous.source,
        options: JSON.parse(previous.backend_options) as Record<string, string>,
        rollout: { canary: 0, maxUnavailable: 1_000_000, bakeMs: 0, ...rollout },
      },
      actor,
      'rollback',
    );
    return result.ok ? { ...result, restoredPushId: previous.id } : result;
  }

  /** Re-arms the host's failure budget: its agent tries again now. */
  async retry(hostName: string, actor: string): Promise<HostView> {
    return this.#operatorVerb(hostName, actor, 'host.retry', async (trx, host) => {
      const changes: Partial<HostRow> = { retry_token: host.retry_token + 1 };
      if (host.desired_push_id !== null && host.desired_error !== null) {
        Object.assign(changes, await this.#desiredFields(trx, host, host.desired_push_id));
      }
      return changes;
    });
  }

  /** Makes the host's agent apply its bundle again, even when the live hash matches. */
  async force(hostName: string, actor: string): Promise<HostView> {
    return this.#operatorVerb(hostName, actor, 'host.force', (_trx, host) =>
      Promise.resolve({ force_token: host.force_token + 1, retry_token: host.retry_token + 1 }),
    );
  }

  /** The agent keeps enforcing what it has and takes no new bundle until resumed. */
  async suspend(hostName: string, actor: string): Promise<HostView> {
    return this.#operatorVerb(hostName, actor, 'host.suspend', () =>
      Promise.resolve({ suspended: 1 }),
    );
  }

  async resume(hostName: string, actor: string): Promise<HostView> {
    return this.#operatorVerb(hostName, actor, 'host.resume', () =>
      Promise.resolve({ suspended: 0 }),
    );
  }

  /** Retires a host: its credentials are revoked and its agent told to stop; history is kept. */
  async decommission(hostName: string, actor: string): Promise<HostView> {
    const now = this.#clock.now();
    const view = await this.#operatorVerb(
      hostName,
      actor,
      'host.decommission',
      async (trx, host) => {
        await trx
          .updateTable('credentials')
          .set({ revoked_at: now })
          .where('host_id', '=', host.id)
          .where('revoked_at', 'is', null)
          .execute();
        return { decommissioned_at: now };
      },
    );
    return view;
  }

  /** Continues a paused rollout: the paused wave is accepted as judged and the next one starts. */
  async resumeRollout(rolloutId: string | undefined, actor: string): Promise<RolloutView> {
    const now = this.#clock.now();
    const id = await this.#transaction(async (trx) => {
      let query = trx.selectFrom('rollouts').selectAll();
      query =
        rolloutId === undefined
          ? query.where('state', '=', 'paused').orderBy('created_at', 'desc').limit(1)
          : query.where('id', '=', rolloutId);
      if (this.#store.dialect === 'postgres') query = query.forUpdate();
      const rollout = await query.executeTakeFirst();
      if (rollout === undefined) {
        throw new RefusedError(
          'not-found',
          rolloutId === undefined
            ? 'Cannot resume: no rollout is paused'
            : `Cannot resume rollout "${rolloutId}": no such rollout`,
        );
      }
      if (rollout.state !== 'paused') {
        throw new RefusedError(
          'conflict',
          `Cannot resume rollout "${rollout.id}": it is ${rollout.state}, not paused`,
        );
      }
      await trx
        .updateTable('waves')
        .set({ state: 'accepted', judged_at: now })
        .where('rollout_id', '=', rollout.id)
        .where('wave_index', '=', rollout.current_wave)
        .execute();
      await this.#event(trx, {
        rolloutId: rollout.id,
        kind: 'wave-accepted',
        message: `wave ${rollout.current_wave} accepted by ${actor}`,
        onceKey: `${rollout.id}/wave/${rollout.current_wave}/accepted`,
      });
      await this.#finishWave(trx, rollout.id, rollout.current_wave, now);
      await this.#audit(trx, actor, 'rollout.resume', rollout.id, { wave: rollout.current_wave });
      return rollout.id;
    });
    await this.advanceRollout(id);
    return this.rolloutView(id);
  }

  // ── rollouts ──────────────────────────────────────────────────────────────────────────────

  /** Advances every progressing rollout one judgement: the ticker of each replica calls this. */
  async tick(): Promise<void> {
    await this.syncClock();
    await this.flushCheckins();
    const rollouts = await this.#store.db
      .selectFrom('rollouts')
      .select('id')
      .where('state', '=', 'progressing')
      .execute();
    for (const rollout of rollouts) await this.advanceRollout(rollout.id);
  }

  /**
   * Starts the current wave, or judges it: pause, or succeed and start the next. Runs under the
   * rollout's row lock (PostgreSQL skips a rollout another replica is judging); every transition
   * is an event under a unique key, so it is recorded once whoever gets there.
   */
  async advanceRollout(rolloutId: string): Promise<void> {
    const woken: string[] = [];
    await this.#transaction(async (trx) => {
      let query = trx.selectFrom('rollouts').selectAll().where('id', '=', rolloutId);
      if (this.#store.dialect === 'postgres') query = query.forUpdate().skipLocked();
      const rollout = await query.executeTakeFirst();
      if (rollout === undefined) return;
      const params = JSON.parse(rollout.params) as RolloutParams;
      let current = rollout.current_wave;
      let state = rollout.state;
      while (state === 'progressing') {
        const now = this.#clock.now();
        const wave = await trx
          .selectFrom('waves')
          .selectAll()
          .where('rollout_id', '=', rolloutId)
          .where('wave_index', '=', current)
          .executeTakeFirst();
        if (wave === undefined) {
          // No wave left to judge (a push to a fleet with no hosts has none at all): the rollout
          // is done, and hosts that enrol later follow it.
          const next = await this.#finishWave(trx, rolloutId, current - 1, now);
          woken.push(...next.woken);
          state = next.state;
          break;
        }
        const hostIds = JSON.parse(wave.host_ids) as string[];
        if (wave.state === 'pending') {
          await trx
            .updateTable('waves')
            .set({ state: 'progressing', started_at: now })
            .where('rollout_id', '=', rolloutId)
            .where('wave_index', '=', current)
            .execute();
          await this.#event(trx, {
            rolloutId,
            kind: 'wave-started',
            message: `wave ${current} started: ${hostIds.length} hosts`,
            onceKey: `${rolloutId}/wave/${current}/started`,
          });
          // One locking read for the whole wave (a thousand hosts are a thousand round trips).
          const rows = await this.#lockHosts(trx, hostIds);
          for (const hostId of hostIds) {
            const host = rows.get(hostId);
            if (host === undefined || host.decommissioned_at !== null) continue;
            await this.#setDesired(trx, host, rollout.push_id, now);
            woken.push(hostId);
          }
        }
        const hosts =
          hostIds.length === 0
            ? []
            : await trx.selectFrom('hosts').selectAll().where('id', 'in', hostIds).execute();
        const verdicts = hosts.map((h) => judgeHost(this.#waveHost(h, now), now, params.bakeMs));
        const judged = judgeWave(verdicts, params.maxFailures);
        if (judged.verdict === 'waiting') break;
        if (judged.verdict === 'paused') {
          const reason = `wave ${current}: ${judged.failed} of ${judged.counted} hosts failing (at most ${params.maxFailures} tolerated)`;
          await trx
            .updateTable('waves')
            .set({ state: 'paused', judged_at: now })
            .where('rollout_id', '=', rolloutId)
            .where('wave_index', '=', current)
            .execute();
          await trx
            .updateTable('rollouts')
            .set({ state: 'paused', paused_reason: reason, updated_at: now })
            .where('id', '=', rolloutId)
            .execute();
          await this.#event(trx, {
            rolloutId,
            kind: 'wave-paused',
            message: reason,
            onceKey: `${rolloutId}/wave/${current}/paused`,
          });
          state = 'paused';
          break;
        }
        await trx
          .updateTable('waves')
          .set({ state: 'succeeded', judged_at: now })
          .where('rollout_id', '=', rolloutId)
          .where('wave_index', '=', current)
          .execute();
        await this.#event(trx, {
          rolloutId,
          kind: 'wave-succeeded',
          message: `wave ${current} succeeded: ${judged.baked} hosts baked${judged.failed > 0 ? `, ${judged.failed} failing tolerated` : ''}`,
          onceKey: `${rolloutId}/wave/${current}/succeeded`,
        });
        const next = await this.#finishWave(trx, rolloutId, current, now);
        woken.push(...next.woken);
        current += 1;
        state = next.state;
      }
    });
    if (woken.length > 0) await this.#store.wakeHosts(woken.length > 200 ? '*' : woken);
  }

  // ── views ─────────────────────────────────────────────────────────────────────────────────

  async listHosts(options: { includeDecommissioned?: boolean } = {}): Promise<HostView[]> {
    await this.#flushBeforeRead();
    let query = this.#store.db.selectFrom('hosts').selectAll().orderBy('name');
    if (options.includeDecommissioned !== true)
      query = query.where('decommissioned_at', 'is', null);
    const now = this.#clock.now();
    return (await query.execute()).map((row) => this.#view(row, now));
  }

  async host(hostName: string): Promise<HostView> {
    await this.#flushBeforeRead();
    return this.#view(await this.#hostByName(this.#store.db, hostName), this.#clock.now());
  }

  /**
   * Writes the check-ins held in memory so a view shows them; a store that cannot write (its disk
   * full) still serves the view, a little behind (they stay held for the next flush).
   */
  async #flushBeforeRead(): Promise<void> {
    try {
      await this.flushCheckins();
    } catch (error) {
      if (this.#store.noteFailure(error)?.state !== 'disk-full') throw error;
    }
  }

  async listRollouts(limit = 20): Promise<RolloutView[]> {
    const rows = await this.#store.db
      .selectFrom('rollouts')
      .select('id')
      .orderBy('created_at', 'desc')
      .limit(limit)
      .execute();
    return Promise.all(rows.map((r) => this.rolloutView(r.id)));
  }

  async rolloutView(rolloutId: string): Promise<RolloutView> {
    const rollout = await this.#store.db
      .selectFrom('rollouts')
      .selectAll()
      .where('id', '=', rolloutId)
      .executeTakeFirst();
    if (rollout === undefined)
      throw new RefusedError('not-found', `Rollout "${rolloutId}" does not exist`);
    const waves = await this.#store.db
      .selectFrom('waves')
      .selectAll()
      .where('rollout_id', '=', rolloutId)
      .orderBy('wave_index')
      .execute();
    const names = new Map(
      (await this.#store.db.selectFrom('hosts').select(['id', 'name']).execute()).map((h) => [
        h.id,
        h.name,
      ]),
    );
    return {
      id: rollout.id,
      pushId: rollout.push_id,
      state: rollout.state,
      params: JSON.parse(rollout.params) as RolloutParams,
      currentWave: rollout.current_wave,
      pausedReason: rollout.paused_reason,
      createdAt: rollout.created_at,
      waves: waves.map((w) => ({
        index: w.wave_index,
        state: w.state,
        hosts: (JSON.parse(w.host_ids) as string[]).map((id) => names.get(id) ?? id),
        startedAt: w.started_at,
        judgedAt: w.judged_at,
      })),
    };
  }

  async events(filter: {
    hostName?: string;
    rolloutId?: string;
    limit?: number;
  }): Promise<EventView[]> {
    let query = this.#store.db
      .selectFrom('events')
      .leftJoin('hosts', 'hosts.id', 'events.host_id')
      .select([
        'events.at',
        'hosts.name',
        'events.rollout_id',
        'events.kind',
        'events.message',
        'events.hash',
        'events.id',
      ])
      .orderBy('events.id', 'desc')
      .limit(filter.limit ?? 100);
    if (filter.hostName !== undefined)
      query = query.where(
        'events.host_id',
        '=',
        (await this.#hostByName(this.#store.db, filter.hostName)).id,
      );
    if (filter.rolloutId !== undefined)
      query = query.where('events.rollout_id', '=', filter.rolloutId);
    const rows = await query.execute();
    return rows.reverse().map((r) => ({
      at: r.at,
      host: r.name,
      rolloutId: r.rollout_id,
      kind: r.kind,
      message: r.message,
      hash: r.hash,
    }));
  }

  async auditLog(limit = 100): Promise<AuditEntry[]> {
    const rows = await this.#store.db
      .selectFrom('audit_log')
      .selectAll()
      .orderBy('id', 'desc')
      .limit(limit)
      .execute();
    return rows.reverse().map((r) => ({
      at: r.at,
      actor: r.actor,
      action: r.action,
      target: r.target,
      details: JSON.parse(r.details) as unknown,
    }));
  }

  /** Keeps the newest `eventsPerHost` events of each host. */
  async pruneEvents(): Promise<void> {
    await this.#store.db
      .deleteFrom('events')
      .where('id', 'in', (eb) =>
        eb
          .selectFrom((sub) =>
            sub
              .selectFrom('events')
              .select((s) => [
                'id',
                s.fn
                  .agg<number>('row_number')
                  .over((o) => o.partitionBy('host_id').orderBy('id', 'desc'))
                  .as('rank'),
              ])
              .where('host_id', 'is not', null)
              .as('ranked'),
          )
          .select('ranked.id')
          .where('ranked.rank', '>', this.#eventsPerHost),
      )
      .execute();
  }

  // ── internals ─────────────────────────────────────────────────────────────────────────────

  async #operatorVerb(
    hostName: string,
    actor: string,
    action: string,
    change: (trx: Transaction<Database>, host: HostRow) => Promise<Partial<HostRow>>,
  ): Promise<HostView> {
    const now = this.#clock.now();
    const id = await this.#transaction(async (trx) => {
      const found = await this.#hostByName(trx, hostName);
      const host = await this.#lockHost(trx, found.id);
      const changes = { ...(await change(trx, host)), updated_at: now };
      const next = { ...host, ...changes };
      const previous = JSON.parse(host.conditions) as Condition[];
      const conditions = this.#conditionsFor(next, previous, now);
      changes.conditions = JSON.stringify(conditions);
      await trx.updateTable('hosts').set(changes).where('id', '=', host.id).execute();
      await this.#event(trx, {
        hostId: host.id,
        kind: action,
        message: `${action.slice('host.'.length)} by ${actor}`,
      });
      await this.#recordTransitions(trx, host.id, previous, conditions);
      await this.#audit(trx, actor, action, hostName, {});
      return host.id;
    });
    await this.#store.wakeHosts([id]);
    return this.#view(
      await this.#store.db
        .selectFrom('hosts')
        .selectAll()
        .where('id', '=', id)
        .executeTakeFirstOrThrow(),
      this.#clock.now(),
    );
  }

  /** Marks a judged wave done and moves on: the next wave, or the rollout's end. */
  async #finishWave(
    trx: Transaction<Database>,
    rolloutId: string,
    index: number,
    now: number,
  ): Promise<{ state: RolloutState; woken: string[] }> {
    const more = await trx
      .selectFrom('waves')
      .select('wave_index')
      .where('rollout_id', '=', rolloutId)
      .where('wave_index', '>', index)
      .executeTakeFirst();
    if (more !== undefined) {
      await trx
        .updateTable('rollouts')
        .set({
          state: 'progressing',
          paused_reason: null,
          current_wave: index + 1,
          updated_at: now,
        })
        .where('id', '=', rolloutId)
        .execute();
      return { state: 'progressing', woken: [] };
    }
    await trx
      .updateTable('rollouts')
      .set({ state: 'succeeded', paused_reason: null, updated_at: now })
      .where('id', '=', rolloutId)
      .execute();
    await this.#event(trx, {
      rolloutId,
      kind: 'rollout-succeeded',
      message: 'every wave judged',
      onceKey: `${rolloutId}/succeeded`,
    });
    // Hosts that enrolled during the rollout are in no wave: they follow once it is done.
    const rollout = await trx
      .selectFrom('rollouts')
      .select('push_id')
      .where('id', '=', rolloutId)
      .executeTakeFirstOrThrow();
    // Locked, in id order as every statement that locks several hosts: #setDesired rewrites
    // conditions from these rows, which a status report must not change meanwhile.
    let locking = trx
      .selectFrom('hosts')
      .selectAll()
      .where('decommissioned_at', 'is', null)
      .where((eb) =>
        eb.or([eb('desired_push_id', 'is', null), eb('desired_push_id', '!=', rollout.push_id)]),
      )
      .orderBy('id');
    if (this.#store.dialect === 'postgres') locking = locking.forUpdate();
    const stragglers = await locking.execute();
    for (const host of stragglers) await this.#setDesired(trx, host, rollout.push_id, now);
    return { state: 'succeeded', woken: stragglers.map((h) => h.id) };
  }

  async #supersedeRollouts(trx: Transaction<Database>, by: string): Promise<void> {
    let query = trx
      .selectFrom('rollouts')
      .select(['id'])
      .where('state', 'in', ['progressing', 'paused']);
    if (this.#store.dialect === 'postgres') query = query.forUpdate();
    const active = await query.execute();
    const now = this.#clock.now();
    for (const rollout of active) {
      await trx
        .updateTable('rollouts')
        .set({ state: 'superseded', updated_at: now })
        .where('id', '=', rollout.id)
        .execute();
      await trx
        .updateTable('waves')
        .set({ state: 'superseded' })
        .where('rollout_id', '=', rollout.id)
        .where('state', 'in', ['pending', 'progressing', 'paused'])
        .execute();
      await this.#event(trx, {
        rolloutId: rollout.id,
        kind: 'rollout-superseded',
        message: `superseded by rollout ${by}`,
        onceKey: `${rollout.id}/superseded`,
      });
    }
  }

  async #setDesired(
    trx: Transaction<Database>,
    host: HostRow,
    pushId: string,
    now: number,
  ): Promise<void> {
    const desired = await this.#desiredFields(trx, host, pushId);
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
      await this.#event(trx, {
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
    const conditions = this.#conditionsFor({ ...host, ...changes }, previous, now);
    changes.conditions = JSON.stringify(conditions);
    await this.#recordTransitions(trx, host.id, previous, conditions);
    await trx.updateTable('hosts').set(changes).where('id', '=', host.id).execute();
  }

  async #desiredFields(
    db: Db,
    host: HostRow,
    pushId: string,
  ): Promise<Pick<HostRow, 'desired_push_id' | 'desired_hash' | 'desired_error'>> {
    const bound = await this.#bind(db, host, pushId);
    if (!bound.ok) {
      return {
        desired_push_id: pushId,
        desired_hash: null,
        desired_error: JSON.stringify({ reason: bound.reason, message: bound.message }),
      };
    }
    this.#remember(bindingKey(host, pushId), bound.hash, bound.bundle);
    return { desired_push_id: pushId, desired_hash: bound.hash, desired_error: null };
  }

  async #bind(db: Db, host: HostRow, pushId: string): Promise<BindResult> {
    let prepared = this.#prepared.get(pushId);
    if (prepared === undefined) {
      const push = await db
        .selectFrom('pushes')
        .select(['policy_text', 'source', 'backend_options'])
        .where('id', '=', pushId)
        .executeTakeFirstOrThrow();
      const again = this.#binder.preparePolicy({
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
      this.#prepared.set(pushId, prepared);
    }
    return this.#binder.bindHost(prepared, {
      hostName: host.name,
      facts:
        host.facts === null ? null : parseHostFacts(JSON.parse(host.facts), `host "${host.name}"`),
      factsDigest: host.facts_digest,
      labels: JSON.parse(host.labels) as Record<string, string>,
    });
  }

  #remember(key: string, hash: string, bundle: HostBundle): void {
    if (this.#bundles.size >= 20_000) this.#bundles.clear();
    this.#bundles.set(key, { hash, bundle });
  }

  async #baselinePush(db: Db): Promise<string | undefined> {
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

  async #lockHost(trx: Transaction<Database>, hostId: string): Promise<HostRow> {
    let query = trx.selectFrom('hosts').selectAll().where('id', '=', hostId);
    if (this.#store.dialect === 'postgres') query = query.forUpdate();
    const host = await query.executeTakeFirst();
    if (host === undefined) throw new RefusedError('not-found', `Host "${hostId}" does not exist`);
    return host;
  }

  /**
   * Several hosts locked with one statement, in id order as every statement that locks several
   * hosts does (a report batch, a wave's start, the stragglers, the check-in flush): no deadlock.
   */
  async #lockHosts(
    trx: Transaction<Database>,
    hostIds: readonly string[],
  ): Promise<Map<string, HostRow>> {
    if (hostIds.length === 0) return new Map();
    let locking = trx.selectFrom('hosts').selectAll().where('id', 'in', hostIds).orderBy('id');
    if (this.#store.dialect === 'postgres') locking = locking.forUpdate();
    return new Map((await locking.execute()).map((h) => [h.id, h]));
  }

  async #hostByName(db: Db, hostName: string): Promise<HostRow> {
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

  #conditionsFor(host: HostRow, previous: readonly Condition[], now: number): Condition[] {
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
  async #recordTransitions(
    trx: Transaction<Database>,
    hostId: string,
    previous: readonly Condition[],
    next: readonly Condition[],
  ): Promise<void> {
    for (const condition of next) {
      const before = previous.find((c) => c.type === condition.type);
      if (before?.status === condition.status) continue;
      if (before === undefined && condition.status === 'False') continue;
      await this.#event(trx, {
        hostId,
        kind: 'condition',
        message: `${condition.type}=${condition.status} (${condition.reason}): ${condition.message}`,
        hash: condition.observedHash,
      });
    }
  }

  #silentSince(host: HostRow, now: number): number | null {
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

  #waveHost(host: HostRow, now: number): Parameters<typeof judgeHost>[0] {
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
      silent: this.#silentSince(host, now) !== null,
    };
  }

  #view(row: HostRow, now: number): HostView {
    const silentSince = this.#silentSince(row, now);
    return {
      id: row.id,
      name: row.name,
      labels: JSON.parse(row.labels) as Record<string, string>,
      agentVersion: row.agent_version,
      enrolledAt: row.enrolled_at,
      lastCheckinAt: row.last_checkin_at,
      silent: silentSince !== null && row.decommissioned_at === null,
      suspended: row.suspended === 1,
      decommissioned: row.decommissioned_at !== null,
      desiredPushId: row.desired_push_id,
      desiredHash: row.desired_hash,
      lastAttemptedHash: row.last_attempted_hash,
      appliedHash: row.applied_hash,
      liveHash: row.live_hash,
      failures:
        row.failure_hash === null
          ? null
          : {
              hash: row.failure_hash,
              count: row.failure_count,
              nextAttemptAt: row.next_attempt_at,
              lastError: row.last_error,
            },
      conditions: overlaySilence(JSON.parse(row.conditions) as Condition[], silentSince),
    };
  }

  /**
   * A transaction whose events are written in one statement when it ends (a wave of a thousand
   * hosts records thousands of events), in the order they were recorded.
   */
  async #transaction<T>(work: (trx: Transaction<Database>) => Promise<T>): Promise<T> {
    return this.#store.db.transaction().execute(async (trx) => {
      const buffer: Insertable<EventTable>[] = [];
      this.#pendingEvents.set(trx, buffer);
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

  async #event(
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
      at: this.#clock.now(),
      host_id: event.hostId ?? null,
      rollout_id: event.rolloutId ?? null,
      kind: event.kind,
      message: event.message,
      hash: event.hash ?? null,
      once_key: event.onceKey ?? null,
    };
    const buffer = this.#pendingEvents.get(db);
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

  async #audit(
    db: Db,
    actor: string,
    action: string,
    target: string,
    details: unknown,
  ): Promise<void> {
    await db
      .insertInto('audit_log')
      .values({ at: this.#clock.now(), actor, action, target, details: JSON.stringify(details) })
      .execute();
  }
}

/**
 * Refuses labels a bundle could not carry (more than MAX_HOST_LABELS, or too long), so that a
 * host's labels never make its own bundle, or a rollout, fail later.
 */
function checkLabels(labels: Record<string, string>, what: string): Record<string, string> {
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
function bindingKey(host: Pick<HostRow, 'labels' | 'facts_digest'>, pushId: string): string {
  return `${pushId}\n${host.facts_digest ?? ''}\n${host.labels}`;
}

function convergedSince(host: HostRow, now: number): number | null {
  const converged =
    host.desired_hash !== null &&
    host.applied_hash === host.desired_hash &&
    host.live_hash === host.desired_hash;
  if (!converged) return null;
  return host.converged_since ?? now;
}
