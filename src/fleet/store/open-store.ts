import { EventEmitter } from 'node:events';
import { createRequire } from 'node:module';
import { Kysely, Migrator, PostgresDialect, SqliteDialect } from 'kysely';
import type BetterSqlite3 from 'better-sqlite3';
import type * as Pg from 'pg';
import { EgressguardError } from '../../core/index.js';
import type { Database } from './database.js';
import { createMigrationProvider, type StoreDialect } from './migrations.js';

/** The database and how replicas sharing it wake each other. */
export interface Store {
  readonly db: Kysely<Database>;
  readonly dialect: StoreDialect;
  /** A redacted form of the URL, for logs and messages. */
  readonly description: string;
  /**
   * Tells every replica (this one too) that these hosts' bundles may have changed; `'*'` means all.
   * Call it after the change committed.
   */
  wakeHosts(hostIds: readonly string[] | '*'): Promise<void>;
  /** Called for each wake-up from any replica; returns the function that stops listening. */
  onWake(listener: (hostIds: readonly string[] | '*') => void): () => void;
  close(): Promise<void>;
}

const CHANNEL = 'egressguard_hosts';
// PostgreSQL refuses NOTIFY payloads of 8000 bytes or more (NOTIFY docs): wake everyone instead.
const MAX_PAYLOAD = 7900;

// The drivers are loaded at run time, not bundled: better-sqlite3 is a native addon found next to
// its package, and pg requires the optional pg-native only when asked to.
const requireDriver = createRequire(import.meta.url);

/**
 * Opens `sqlite:PATH` (a file, created on first use; `sqlite::memory:` for a private one) or
 * `postgres://…`, and brings its schema up to date.
 */
export async function openStore(url: string): Promise<Store> {
  const store = url.startsWith('sqlite:')
    ? openSqlite(url.slice('sqlite:'.length))
    : /^postgres(ql)?:\/\//.test(url)
      ? openPostgres(url)
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

function openSqlite(path: string): StartableStore {
  const SqliteDatabase = requireDriver('better-sqlite3') as typeof BetterSqlite3;
  let database: BetterSqlite3.Database;
  try {
    database = new SqliteDatabase(path === ':memory:' ? ':memory:' : path);
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
  const db = new Kysely<Database>({ dialect: new SqliteDialect({ database }) });
  // One SQLite file serves one controller process: wake-ups stay in this process.
  const events = new EventEmitter();
  events.setMaxListeners(0);
  return {
    db,
    dialect: 'sqlite',
    description: `sqlite:${path}`,
    start: () => Promise.resolve(),
    wakeHosts: (hostIds) => {
      events.emit('wake', hostIds);
      return Promise.resolve();
    },
    onWake: (listener) => {
      events.on('wake', listener);
      return () => events.off('wake', listener);
    },
    close: () => db.destroy(),
  };
}

function openPostgres(url: string): StartableStore {
  const pg = requireDriver('pg') as typeof Pg;
  // int8 (bigint, bigserial) arrives as a string by default; our values are ms times and counters.
  const types = new pg.TypeOverrides();
  types.setTypeParser(pg.types.builtins.INT8, (value: string) => Number(value));
  const pool = new pg.Pool({ connectionString: url, types, max: 10 });
  const db = new Kysely<Database>({ dialect: new PostgresDialect({ pool }) });
  const events = new EventEmitter();
  events.setMaxListeners(0);
  const description = redact(url);
  let listener: Pg.Client | undefined;
  let closed = false;
  let reconnectTimer: NodeJS.Timeout | undefined;

  // One dedicated connection LISTENs; every replica's NOTIFY (its own too) arrives here.
  const listen = async (): Promise<void> => {
    const client = new pg.Client({ connectionString: url, types });
    client.on('notification', (message) => {
      const payload = message.payload ?? '*';
      events.emit('wake', payload === '*' ? '*' : payload.split(','));
    });
    client.on('error', () => {
      if (listener === client) listener = undefined;
      void client.end().catch(() => undefined);
      if (!closed) {
        // Missed wake-ups cost at most one long-poll wait: agents re-poll when theirs ends.
        events.emit('wake', '*');
        reconnectTimer = setTimeout(() => void listen().catch(() => undefined), 1000);
      }
    });
    await client.connect();
    await client.query(`LISTEN ${CHANNEL}`);
    listener = client;
  };

  return {
    db,
    dialect: 'postgres',
    description,
    start: listen,
    wakeHosts: async (hostIds) => {
      const payload = hostIds === '*' ? '*' : hostIds.join(',');
      if (payload === '') return;
      await pool.query('select pg_notify($1, $2)', [
        CHANNEL,
        payload.length > MAX_PAYLOAD ? '*' : payload,
      ]);
    },
    onWake: (fn) => {
      events.on('wake', fn);
      return () => events.off('wake', fn);
    },
    close: async () => {
      closed = true;
      clearTimeout(reconnectTimer);
      await listener?.end().catch(() => undefined);
      await db.destroy();
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
