import { overlaySilence, type Condition } from '../conditions.js';
import type { AuditEntry, EventView, HostView, RolloutView } from '../protocol.js';
import type { RolloutParams } from '../rollout-plan.js';
import { RefusedError } from '../request-error.js';
import type { ControllerCore, HostRow } from './controller-core.js';

export async function listHosts(
  core: ControllerCore,
  options: { includeDecommissioned?: boolean } = {},
): Promise<HostView[]> {
  let query = core.store.db.selectFrom('hosts').selectAll().orderBy('name');
  if (options.includeDecommissioned !== true) query = query.where('decommissioned_at', 'is', null);
  const now = core.clock.now();
  return (await query.execute()).map((row) => viewHost(core, row, now));
}

export async function hostView(core: ControllerCore, hostName: string): Promise<HostView> {
  return viewHost(core, await core.hostByName(core.store.db, hostName), core.clock.now());
}

export async function listRollouts(core: ControllerCore, limit = 20): Promise<RolloutView[]> {
  const rows = await core.store.db
    .selectFrom('rollouts')
    .select('id')
    .orderBy('created_at', 'desc')
    .limit(limit)
    .execute();
  return Promise.all(rows.map((r) => rolloutView(core, r.id)));
}

export async function rolloutView(core: ControllerCore, rolloutId: string): Promise<RolloutView> {
  const rollout = await core.store.db
    .selectFrom('rollouts')
    .selectAll()
    .where('id', '=', rolloutId)
    .executeTakeFirst();
  if (rollout === undefined)
    throw new RefusedError('not-found', `Rollout "${rolloutId}" does not exist`);
  const waves = await core.store.db
    .selectFrom('waves')
    .selectAll()
    .where('rollout_id', '=', rolloutId)
    .orderBy('wave_index')
    .execute();
  const names = new Map(
    (await core.store.db.selectFrom('hosts').select(['id', 'name']).execute()).map((h) => [
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

export async function listEvents(
  core: ControllerCore,
  filter: {
    hostName?: string;
    rolloutId?: string;
    limit?: number;
  },
): Promise<EventView[]> {
  let query = core.store.db
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
      (await core.hostByName(core.store.db, filter.hostName)).id,
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

export async function listAudit(core: ControllerCore, limit = 100): Promise<AuditEntry[]> {
  const rows = await core.store.db
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
export async function pruneEvents(core: ControllerCore): Promise<void> {
  await core.store.db
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
        .where('ranked.rank', '>', core.eventsPerHost),
    )
    .execute();
}

export function viewHost(core: ControllerCore, row: HostRow, now: number): HostView {
  const silentSince = core.silentSince(row, now);
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
