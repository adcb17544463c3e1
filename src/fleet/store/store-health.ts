import { backoffDelay, type BackoffPolicy } from '../failure-budget.js';

/**
 * What a replica knows of its store: `ok`; `unavailable` (PostgreSQL cannot be reached, a
 * connection broke): nothing that needs the database can be served; `disk-full`: reads work,
 * writes fail until space is freed.
 */
export type StoreState = 'ok' | 'unavailable' | 'disk-full';

export interface StoreFault {
  readonly state: Exclude<StoreState, 'ok'>;
  /** What failed, for the log, `/healthz` and the 503 answer: names ENOSPC for a full disk. */
  readonly message: string;
}

export interface StoreHealth {
  readonly state: StoreState;
  /** Since when (this host's clock, ms since the epoch); null while ok. */
  readonly since: number | null;
  readonly message: string | null;
  /** PostgreSQL: the connection that hears other replicas' wake-ups. */
  readonly listen?: ListenHealth;
}

export interface ListenHealth {
  readonly listening: boolean;
  /** Times it was established again after it broke. */
  readonly reconnects: number;
  /** Attempts to establish it again that failed. */
  readonly failedAttempts: number;
}

// Connection faults: the socket (errno), PostgreSQL's class 08 (connection exception), 57P01-03
// (shut down by an administrator, crash, cannot connect now) and 53300 (too many connections).
const NETWORK_ERRNO = new Set([
  'ECONNREFUSED',
  'ECONNRESET',
  'ENOENT',
  'EPIPE',
  'ETIMEDOUT',
  'EHOSTUNREACH',
  'ENETUNREACH',
  'EAI_AGAIN',
  'ENOTFOUND',
]);
const CONNECTION_SQLSTATE = /^(08...|57P0[123]|53300)$/;
const CONNECTION_MESSAGE =
  /Connection terminated|Client has encountered a connection error|not queryable/i;

/**
 * Whether a failed query is the store's fault rather than the request's: the database cannot be
 * reached, or its disk is full (SQLite's SQLITE_FULL, PostgreSQL's 53100 disk_full: both ENOSPC).
 */
export function classifyStoreError(error: unknown): StoreFault | undefined {
  if (!(error instanceof Error)) return undefined;
  const code = (error as { code?: unknown }).code;
  const detail = `${typeof code === 'string' ? `${code}: ` : ''}${error.message}`;
  if (code === 'SQLITE_FULL' || code === '53100') {
    return { state: 'disk-full', message: `the disk is full (ENOSPC): ${detail}` };
  }
  if (typeof code === 'string' && /^SQLITE_(IOERR|CANTOPEN|READONLY)/.test(code)) {
    return { state: 'unavailable', message: `the database file cannot be written: ${detail}` };
  }
  if (/timeout exceeded when trying to connect/i.test(error.message)) {
    // pg-pool's: no connection within connectionTimeoutMillis, new or from the pool.
    return {
      state: 'unavailable',
      message: `no database connection within the timeout (the database is unreachable, or too slow for this replica's pool): ${detail}`,
    };
  }
  if (
    (typeof code === 'string' && (NETWORK_ERRNO.has(code) || CONNECTION_SQLSTATE.test(code))) ||
    CONNECTION_MESSAGE.test(error.message)
  ) {
    return { state: 'unavailable', message: `the database cannot be reached: ${detail}` };
  }
  return undefined;
}

const PROBE_BACKOFF: BackoffPolicy = { baseMs: 500, capMs: 5_000 };

/**
 * Follows the store's health: a fault noted from any query marks it, and a probe (a committed
 * write on SQLite, a connection and a query on PostgreSQL) then runs with capped, jittered backoff
 * until the store works again. Every change of state is logged once, not once per request.
 */
export class StoreMonitor {
  #health: StoreHealth = { state: 'ok', since: null, message: null };
  #probing = false;
  #closed = false;
  #timer: NodeJS.Timeout | undefined;
  #wakeProbe: (() => void) | undefined;

  constructor(
    private readonly options: {
      readonly description: string;
      readonly probe: () => Promise<void>;
      readonly log: (line: string) => void;
      readonly onRecovered: () => void;
      readonly backoff?: BackoffPolicy;
      readonly random?: () => number;
    },
  ) {}

  get health(): StoreHealth {
    return this.#health;
  }

  /** Marks the store when `error` is a store fault (and returns the fault); else undefined. */
  note(error: unknown): StoreFault | undefined {
    const fault = classifyStoreError(error);
    if (fault === undefined || this.#closed) return fault;
    if (this.#health.state !== fault.state) {
      this.options.log(
        fault.state === 'disk-full'
          ? `error: store "${this.options.description}": ${fault.message}: writes fail until space is freed (reads go on); checking again with backoff`
          : `error: store "${this.options.description}": ${fault.message}: requests that need it answer 503; checking it again with backoff`,
      );
      this.#health = { state: fault.state, since: Date.now(), message: fault.message };
    }
    if (!this.#probing) void this.#probeUntilHealthy();
    return fault;
  }

  /** Read through a getter: TypeScript would narrow the field to false across the await. */
  get #stopped(): boolean {
    return this.#closed;
  }

  close(): void {
    this.#closed = true;
    clearTimeout(this.#timer);
    this.#wakeProbe?.();
  }

  async #probeUntilHealthy(): Promise<void> {
    this.#probing = true;
    const random = this.options.random ?? Math.random;
    try {
      for (let failures = 1; !this.#closed && this.#health.state !== 'ok'; failures += 1) {
        await new Promise<void>((resolve) => {
          this.#wakeProbe = resolve;
          this.#timer = setTimeout(
            resolve,
            backoffDelay(failures, this.options.backoff ?? PROBE_BACKOFF, random),
          );
        });
        if (this.#stopped) return;
        try {
          await this.options.probe();
        } catch (error) {
          if (classifyStoreError(error) !== undefined) this.note(error);
          continue;
        }
        const since = this.#health.since ?? Date.now();
        this.options.log(
          `store "${this.options.description}" works again after ${((Date.now() - since) / 1000).toFixed(1)} s`,
        );
        this.#health = { state: 'ok', since: null, message: null };
        this.options.onRecovered();
      }
    } finally {
      this.#probing = false;
    }
  }
}
