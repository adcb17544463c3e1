import { sql, type Kysely, type Migration, type MigrationProvider } from 'kysely';

export type StoreDialect = 'sqlite' | 'postgres';

/**
 * Versioned migrations, applied in name order by Kysely's Migrator (which holds a lock while it
 * migrates, an advisory lock on PostgreSQL, so replicas starting together migrate once). Never edit
 * a migration that has shipped: add the next one.
 */
export function createMigrationProvider(dialect: StoreDialect): MigrationProvider {
  const migrations: Record<string, Migration> = {
    '0001_fleet': { up: (db) => createFleetTables(db, dialect) },
    // Host-IR bundles: a push carries backend options (the steering priority, say).
    '0002_push_backend_options': {
      up: async (db) => {
        await db.schema
          .alterTable('pushes')
          .addColumn('backend_options', 'text', (c) => c.notNull().defaultTo('{}'))
          .execute();
      },
    },
    '0003_idempotent_pushes_and_health': { up: (db) => addIdempotencyAndHealth(db) },
  };
  return { getMigrations: () => Promise.resolve(migrations) };
}

/**
 * A push may carry a client's idempotency key (a retry after an error never pushes twice); a host's
 * failure says what failed (an apply, or a bundle the agent refused); a host remembers the token
 * that enrolled it (an agent whose answer was lost may enroll again); a one-row table the health
 * probe writes (a committed write is the only proof that a full disk has room again).
 */
async function addIdempotencyAndHealth(db: Kysely<unknown>): Promise<void> {
  await db.schema.alterTable('pushes').addColumn('idempotency_key', 'text').execute();
  await db.schema
    .createIndex('pushes_idempotency_key')
    .on('pushes')
    .column('idempotency_key')
    .unique()
    .execute();
  await db.schema.alterTable('hosts').addColumn('failure_reason', 'text').execute();
  await db.schema.alterTable('hosts').addColumn('enrolled_token_id', 'text').execute();
  await db.schema
    .createTable('store_probe')
    .addColumn('id', 'integer', (c) => c.primaryKey())
    .addColumn('at', 'bigint', (c) => c.notNull())
    .execute();
  await sql`insert into store_probe (id, at) values (1, 0)`.execute(db);
}

async function createFleetTables(db: Kysely<unknown>, dialect: StoreDialect): Promise<void> {
  const serial =
    dialect === 'postgres' ? sql`bigserial primary key` : sql`integer primary key autoincrement`;

  await db.schema
    .createTable('hosts')
    .addColumn('id', 'text', (c) => c.primaryKey())
    .addColumn('name', 'text', (c) => c.notNull())
    .addColumn('labels', 'text', (c) => c.notNull())
    .addColumn('facts', 'text')
    .addColumn('facts_digest', 'text')
    .addColumn('agent_version', 'text')
    .addColumn('enrolled_at', 'bigint', (c) => c.notNull())
    .addColumn('last_checkin_at', 'bigint')
    .addColumn('desired_push_id', 'text')
    .addColumn('desired_hash', 'text')
    .addColumn('desired_error', 'text')
    .addColumn('last_attempted_hash', 'text')
    .addColumn('applied_hash', 'text')
    .addColumn('live_hash', 'text')
    .addColumn('failure_hash', 'text')
    .addColumn('failure_count', 'integer', (c) => c.notNull().defaultTo(0))
    .addColumn('next_attempt_at', 'bigint')
    .addColumn('last_error', 'text')
    .addColumn('invalid_hash', 'text')
    .addColumn('invalid_message', 'text')
    .addColumn('converged_since', 'bigint')
    .addColumn('retry_token', 'integer', (c) => c.notNull().defaultTo(0))
    .addColumn('force_token', 'integer', (c) => c.notNull().defaultTo(0))
    .addColumn('suspended', 'integer', (c) => c.notNull().defaultTo(0))
    .addColumn('decommissioned_at', 'bigint')
    .addColumn('conditions', 'text', (c) => c.notNull())
    .addColumn('counters', 'text')
    .addColumn('updated_at', 'bigint', (c) => c.notNull())
    .execute();
  // A decommissioned host keeps its row (history, audit); its name is free for a new enrollment.
  await db.schema
    .createIndex('hosts_active_name')
    .on('hosts')
    .column('name')
    .unique()
    .where(sql.ref('decommissioned_at'), 'is', null)
    .execute();

  await db.schema
    .createTable('credentials')
    .addColumn('id', 'text', (c) => c.primaryKey())
    .addColumn('host_id', 'text', (c) => c.notNull().references('hosts.id'))
    .addColumn('secret_hash', 'text', (c) => c.notNull())
    .addColumn('created_at', 'bigint', (c) => c.notNull())
    .addColumn('first_used_at', 'bigint')
    .addColumn('revoked_at', 'bigint')
    .addColumn('replaced_by', 'text')
    .execute();
  await db.schema.createIndex('credentials_host').on('credentials').column('host_id').execute();

  await db.schema
    .createTable('bootstrap_tokens')
    .addColumn('id', 'text', (c) => c.primaryKey())
    .addColumn('secret_hash', 'text', (c) => c.notNull())
    .addColumn('created_at', 'bigint', (c) => c.notNull())
    .addColumn('expires_at', 'bigint', (c) => c.notNull())
    .addColumn('uses_left', 'integer', (c) => c.notNull())
    .addColumn('labels', 'text', (c) => c.notNull())
    .addColumn('description', 'text', (c) => c.notNull())
    .addColumn('revoked_at', 'bigint')
    .execute();

  await db.schema
    .createTable('pushes')
    .addColumn('id', 'text', (c) => c.notNull().unique())
    .addColumn('seq', serial)
    .addColumn('policy_text', 'text', (c) => c.notNull())
    .addColumn('policy_digest', 'text', (c) => c.notNull())
    .addColumn('source', 'text', (c) => c.notNull())
    .addColumn('kind', 'text', (c) => c.notNull())
    .addColumn('created_at', 'bigint', (c) => c.notNull())
    .execute();

  await db.schema
    .createTable('rollouts')
    .addColumn('id', 'text', (c) => c.primaryKey())
    .addColumn('push_id', 'text', (c) => c.notNull().references('pushes.id'))
    .addColumn('state', 'text', (c) => c.notNull())
    .addColumn('params', 'text', (c) => c.notNull())
    .addColumn('current_wave', 'integer', (c) => c.notNull())
    .addColumn('paused_reason', 'text')
    .addColumn('created_at', 'bigint', (c) => c.notNull())
    .addColumn('updated_at', 'bigint', (c) => c.notNull())
    .execute();
  await db.schema.createIndex('rollouts_state').on('rollouts').column('state').execute();

  await db.schema
    .createTable('waves')
    .addColumn('rollout_id', 'text', (c) => c.notNull().references('rollouts.id'))
    .addColumn('wave_index', 'integer', (c) => c.notNull())
    .addColumn('host_ids', 'text', (c) => c.notNull())
    .addColumn('state', 'text', (c) => c.notNull())
    .addColumn('started_at', 'bigint')
    .addColumn('judged_at', 'bigint')
    .addPrimaryKeyConstraint('waves_pk', ['rollout_id', 'wave_index'])
    .execute();

  await db.schema
    .createTable('events')
    .addColumn('id', serial)
    .addColumn('at', 'bigint', (c) => c.notNull())
    .addColumn('host_id', 'text')
    .addColumn('rollout_id', 'text')
    .addColumn('kind', 'text', (c) => c.notNull())
    .addColumn('message', 'text', (c) => c.notNull())
    .addColumn('hash', 'text')
    .addColumn('once_key', 'text', (c) => c.unique())
    .execute();
  await db.schema.createIndex('events_host').on('events').columns(['host_id', 'id']).execute();
  await db.schema
    .createIndex('events_rollout')
    .on('events')
    .columns(['rollout_id', 'id'])
    .execute();

  await db.schema
    .createTable('audit_log')
    .addColumn('id', serial)
    .addColumn('at', 'bigint', (c) => c.notNull())
    .addColumn('actor', 'text', (c) => c.notNull())
    .addColumn('action', 'text', (c) => c.notNull())
    .addColumn('target', 'text', (c) => c.notNull())
    .addColumn('details', 'text', (c) => c.notNull())
    .execute();
}
