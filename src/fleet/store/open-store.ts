import { EventEmitter } from 'node:events';
import { chmodSync, closeSync, openSync } from 'node:fs';
import { createRequire } from 'node:module';
import {
  Kysely,
  Migrator,
  PostgresDialect,
  SqliteDialect,
  SqliteDriver,
  type DatabaseConnection,
  type Driver,
  type SelectQueryBuilder,
} from 'kysely';
import type BetterSqlite3 from 'better-sqlite3';
import type * as Pg from 'pg';
import { EgressguardError } from '../../core/index.js';
import { backoffDelay, type BackoffPolicy } from '../failure-budget.js';
import type { Database } from './database.js';
import { createMigrationProvider, type StoreDialect } from './migrations.js';
import {
  StoreMonitor,
  type ListenHealth,
  type StoreFault,
  type StoreHealth,
} from './store-health.js';

/** The database and how replicas sharing it wake each other. */
export interface Store {
  readonly db: Kysely<Database>;
  readonly dialect: StoreDialect;
  /**
   * Adds `for update` (and `skip locked` when asked) to a read on PostgreSQL; SQLite takes a
   * transaction's write lock for the whole database, so the read goes as it is.
   */
  lockRows<DB, TB extends keyof DB, O>(
    query: SelectQueryBuilder<DB, TB, O>,
    options?: { readonly skipLocked?: boolean },
  ): SelectQueryBuilder<DB, TB, O>;
  /** A redacted form of the URL, for logs and messages. */
  readonly description: string;
  /**
   * Tells every replica (this one too) that these hosts' bundles may have changed; `'*'` means all.
   * Call it after the change committed.
   */
  wakeHosts(hostIds: readonly string[] | '*'): Promise<void>;
  /** Called for each wake-up from any replica; returns the function that stops listening. */
  onWake(listener: (hostIds: readonly string[] | '*') => void): () => void;
  /** The store's state as this replica last saw it. */
  health(): StoreHealth;
  /**
   * Notes a failed query: a store fault (unreachable, disk full) marks the store and starts
   * probing it until it works again; returns the fault, or undefined for any other error.
   */
  noteFailure(error: unknown): StoreFault | undefined;
  /**
   * The database's clock (ms since the epoch), which every replica shares; null when the database
   * is this process's own file (SQLite), whose clock is this host's.
   */
  readClock(): Promise<number | null>;
  /** How often the LISTEN connection was established again after it broke (PostgreSQL). */
  readonly listenReconnects: number;
  close(): Promise<void>;
}

export interface StoreOptions {
  /** Where store faults and recoveries are logged. */
  readonly log?: (line: string) => void;
}

const CHANNEL = 'egressguard_hosts';
// PostgreSQL refuses NOTIFY payloads of 8000 bytes or more (NOTIFY docs): wake everyone instead.
const MAX_PAYLOAD = 7900;
/** The LISTEN connection is re-established for ever, at most this far apart. */
const LISTEN_BACKOFF: BackoffPolicy = { baseMs: 250, capMs: 10_000 };

// The drivers are loaded at run time, not bundled: better-sqlite3 is a native addon found next to
// its package, and pg requires the optional pg-native only when asked to.
const requireDriver = createRequire(import.meta.url);

/**
 * Opens `sqlite:PATH` (a file, created 0600 on first use; `sqlite::memory:` for a private one) or
 * `postgres://…`, and brings its schema up to date.
 */
export async function openStore(url: string, options: StoreOptions = {}): Promise<Store> {
  const log = options.log ?? (() => undefined);
  const store = url.startsWith('sqlite:')
    ? openSqlite(url.slice('sqlite:'.length), log)
    : /^postgres(ql)?:\/\//.test(url)
      ? openPostgres(url, log)
      : undefined;
  if (store === undefined) {
    throw new EgressguardError('usage', `Cannot open store "${url}": unknown kind of URL`, {
      hint: 'use sqlite:./egressguard.db or postgres://user@host/db',
    });
  }
  try {
    await migrate(store);
    await store.start();
  } catch (error) {
    await store.close().catch(() => undefined);
    throw new EgressguardError(
      'io',
      `Cannot open store "${store.description}": ${(error as Error).message}`,
      { cause: error },
    );
  }
  return store;
}

async function migrate(store: Store): Promise<void> {
  const migrator = new Migrator({ db: store.db, provider: createMigrationProvider(store.dialect) });
  const { error, results } = await migrator.migrateToLatest();
  if (error !== undefined) {
    const failed = results?.find((r) => r.status === 'Error')?.migrationName ?? 'unknown';
    throw new Error(`migration "${failed}" failed: ${(error as Error).message}`, { cause: error });
  }
}

type StartableStore = Store & { start(): Promise<void> };

/** Wake-ups within this process (a SQLite controller, and every replica's own listener). */
function createWakeups(): Pick<Store, 'onWake'> & { emit(ids: readonly string[] | '*'): void } {
  const events = new EventEmitter();
  events.setMaxListeners(0);
  return {
    emit: (ids) => events.emit('wake', ids),
    onWake: (listener) => {
      events.on('wake', listener);
      return () => events.off('wake', listener);
    },
  };
}

function openSqlite(path: string, log: (line: string) => void): StartableStore {
  const SqliteDatabase = requireDriver('better-sqlite3') as typeof BetterSqlite3;
  const memory = path === ':memory:';
  // The file holds the fleet's state and hashed secrets: 0600, and SQLite gives its -wal and -shm
  // files the database file's mode (os_unix.c, findCreateFileMode).
  if (!memory) restrictFileMode(path);
  let database: BetterSqlite3.Database;
  try {
    database = new SqliteDatabase(memory ? ':memory:' : path);
  } catch (error) {
    // `setup.sh --demo` installs without building native addons (the main job opens no store).
    if (!/Could not locate the bindings file/.test((error as Error).message)) throw error;
    throw new EgressguardError(
      'io',
      `Cannot open store "sqlite:${path}": better-sqlite3's native addon is not built`,
      { cause: error, hint: 'run `bash scripts/setup.sh` (or `npm rebuild better-sqlite3`)' },
    );
  }
  // WAL lets readers (metrics, status) run beside the one writer; foreign keys are off by default.
  database.pragma('journal_mode = WAL');
  database.pragma('synchronous = NORMAL');
  database.pragma('foreign_keys = ON');
  database.pragma('busy_timeout = 5000');
  const db = new Kysely<Database>({ dialect: new StoreSqliteDialect(database) });
  // One SQLite file serves one controller process: wake-ups stay in this process.
  const wakeups = createWakeups();
  const description = `sqlite:${path}`;
  const monitor = new StoreMonitor({
    description,
    log,
    // A committed write: on a full disk it fails as every write does.
    probe: async () => {
      await db.updateTable('store_probe').set({ at: Date.now() }).where('id', '=', 1).execute();
    },
    onRecovered: () => {
      wakeups.emit('*');
    },
  });
  return {
    db,
    dialect: 'sqlite',
    lockRows: (query) => query,
    description,
    start: () => Promise.resolve(),
    wakeHosts: (hostIds) => {
      wakeups.emit(hostIds);
      return Promise.resolve();
    },
    onWake: wakeups.onWake,
    health: () => monitor.health,
    noteFailure: (error) => monitor.note(error),
    readClock: () => Promise.resolve(null),
    listenReconnects: 0,
    close: async () => {
      monitor.close();
      await db.destroy();
    },
  };
}

/** Creates the database file 0600, or takes an existing one (and its -wal, -shm) down to it. */
function restrictFileMode(path: string): void {
  closeSync(openSync(path, 'a', 0o600));
  for (const file of [path, `${path}-wal`, `${path}-shm`]) {
    try {
      chmodSync(file, 0o600);
    } catch (error) {
      if ((error as NodeJS.ErrnoException).code !== 'ENOENT') throw error;
    }
  }
}

/**
 * SQLite rolls a transaction back by itself on some errors (SQLITE_FULL, an I/O error): Kysely's
 * ROLLBACK then fails with "cannot rollback - no transaction is active", and that error would
 * replace the one that says what happened.
 */
class StoreSqliteDialect extends SqliteDialect {
  readonly #database: BetterSqlite3.Database;

  constructor(database: BetterSqlite3.Database) {
    super({ database });
    this.#database = database;
  }

  override createDriver(): Driver {
    const database = this.#database;
    return new (class extends SqliteDriver {
      override async rollbackTransaction(connection: DatabaseConnection): Promise<void> {
        if (database.inTransaction) await super.rollbackTransaction(connection);
      }
    })({ database });
  }
}

function openPostgres(url: string, log: (line: string) => void): StartableStore {
  const pg = requireDriver('pg') as typeof Pg;
  // int8 (bigint, bigserial) arrives as a string by default; our values are ms times and counters.
  const types = new pg.TypeOverrides();
  types.setTypeParser(pg.types.builtins.INT8, (value: string) => Number(value));
  const pool = new pg.Pool({
    connectionString: url,
    types,
    max: 10,
    // A database host that drops packets must fail a request, not hold it for ever.
    connectionTimeoutMillis: 10_000,
    keepAlive: true,
  });
  const wakeups = createWakeups();
  const description = redact(url);
  const monitor = new StoreMonitor({
    description,
    log,
    probe: async () => {
      await pool.query('select 1');
    },
    // Wake-ups sent while the store was away were lost: every long poll looks again.
    onRecovered: () => {
      wakeups.emit('*');
    },
  });
  // A pooled connection that breaks (the server stopped) emits 'error': on the pool while it is
  // idle, on the client itself while a query holds it (pg-pool removes its own listener then).
  // Either without a listener is an uncaught exception that ends the process.
  pool.on('error', (error) => {
    monitor.note(error);
  });
  const watched = new WeakSet<Pg.PoolClient>();
  const db = new Kysely<Database>({
    dialect: new PostgresDialect({
      pool: {
        connect: async () => {
          const client = await pool.connect();
          if (!watched.has(client)) {
            watched.add(client);
            client.on('error', (error) => {
              monitor.note(error);
            });
          }
          return client;
        },
        end: () => pool.end(),
      },
    }),
  });
  const listener = createListener({
    connect: () => {
      const client = new pg.Client({
        connectionString: url,
        types,
        connectionTimeoutMillis: 10_000,
        keepAlive: true,
      });
      client.on('notification', (message) => {
        const payload = message.payload ?? '*';
        wakeups.emit(payload === '*' ? '*' : payload.split(','));
      });
      return client;
    },
    noteFailure: (error) => monitor.note(error),
    // Wake-ups sent while it was away were lost: every long poll looks again (a missed one
    // would cost at most one long-poll wait: agents poll again when theirs ends).
    onListening: () => {
      wakeups.emit('*');
    },
    log,
    description,
  });

  return {
    db,
    dialect: 'postgres',
    lockRows: (query, options) =>
      options?.skipLocked === true ? query.forUpdate().skipLocked() : query.forUpdate(),
    description,
    start: () => listener.start(),
    wakeHosts: async (hostIds) => {
      const payload = hostIds === '*' ? '*' : hostIds.join(',');
      if (payload === '') return;
      await pool.query('select pg_notify($1, $2)', [
        CHANNEL,
        payload.length > MAX_PAYLOAD ? '*' : payload,
      ]);
    },
    onWake: wakeups.onWake,
    health: () => ({ ...monitor.health, listen: listener.health }),
    noteFailure: (error) => monitor.note(error),
    readClock: async () => {
      const { rows } = await pool.query<{ ms: number }>(
        'select extract(epoch from clock_timestamp()) * 1000 as ms',
      );
      return Number(rows[0]?.ms);
    },
    get listenReconnects() {
      return listener.health.reconnects;
    },
    close: async () => {
      monitor.close();
      await listener.close();
      await db.destroy();
    },
  };
}

/**
 * The dedicated connection that LISTENs; every replica's NOTIFY (its own too) arrives there. When
 * it breaks it is established again, for ever, with capped, jittered backoff: a replica that
 * stopped listening would hear of a push to another only at its agents' next poll.
 */
function createListener(options: {
  readonly connect: () => Pg.Client;
  readonly noteFailure: (error: unknown) => void;
  /** Listening again after the connection broke. */
  readonly onListening: () => void;
  readonly log: (line: string) => void;
  readonly description: string;
}): { start(): Promise<void>; close(): Promise<void>; readonly health: ListenHealth } {
  let client: Pg.Client | undefined;
  let closed = false;
  let reconnects = 0;
  let failedAttempts = 0;
  let timer: NodeJS.Timeout | undefined;

  const listen = async (): Promise<void> => {
    const next = options.connect();
    let listening = false;
    // Errors while connecting reject below; these are the breaks of a listening connection.
    const onBroken = (error: Error): void => {
      if (!listening) return;
      listening = false;
      client = undefined;
      void next.end().catch(() => undefined);
      if (closed) return;
      options.log(
        `warning: store "${options.description}": the LISTEN connection broke (${error.message}); listening again with backoff`,
      );
      options.noteFailure(error);
      relisten(1);
    };
    next.on('error', onBroken);
    next.on('end', () => {
      onBroken(new Error('Connection terminated'));
    });
    try {
      await next.connect();
      await next.query(`LISTEN ${CHANNEL}`);
    } catch (error) {
      await next.end().catch(() => undefined);
      throw error;
    }
    if (closed) {
      await next.end().catch(() => undefined);
      return;
    }
    listening = true;
    client = next;
  };

  const relisten = (failures: number): void => {
    clearTimeout(timer);
    timer = setTimeout(
      () => {
        listen().then(
          () => {
            reconnects += 1;
            options.log(`store "${options.description}": listening again`);
            options.onListening();
          },
          (error: unknown) => {
            if (closed) return;
            failedAttempts += 1;
            options.noteFailure(error);
            relisten(failures + 1);
          },
        );
      },
      backoffDelay(failures, LISTEN_BACKOFF, Math.random),
    );
  };

  return {
    start: listen,
    close: async () => {
      closed = true;
      clearTimeout(timer);
      await client?.end().catch(() => undefined);
    },
    get health() {
      return { listening: client !== undefined, reconnects, failedAttempts };
    },
  };
}

function redact(url: string): string {
  try {
    const parsed = new URL(url);
    if (parsed.password !== '') parsed.password = '***';
    return parsed.toString();
  } catch {
    return 'postgres://…';
  }
}
