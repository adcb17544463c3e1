import type { Transaction } from 'kysely';
import type { Condition } from '../conditions.js';
import type { Database } from '../store/database.js';
import type { ControllerCore, HostRow } from './controller-core.js';
import type { HostView } from '../protocol.js';
import { viewHost } from './views.js';

/** Re-arms the host's failure budget: its agent tries again now. */
export async function retry(
  core: ControllerCore,
  hostName: string,
  actor: string,
): Promise<HostView> {
  return operatorVerb(core, hostName, actor, 'host.retry', async (trx, host) => {
    const changes: Partial<HostRow> = { retry_token: host.retry_token + 1 };
    if (host.desired_push_id !== null && host.desired_error !== null) {
      Object.assign(changes, await core.desiredFields(trx, host, host.desired_push_id));
    }
    return changes;
  });
}

/** Makes the host's agent apply its bundle again, even when the live hash matches. */
export async function force(
  core: ControllerCore,
  hostName: string,
  actor: string,
): Promise<HostView> {
  return operatorVerb(core, hostName, actor, 'host.force', (_trx, host) =>
    Promise.resolve({ force_token: host.force_token + 1, retry_token: host.retry_token + 1 }),
  );
}

/** The agent keeps enforcing what it has and takes no new bundle until resumed. */
export async function suspend(
  core: ControllerCore,
  hostName: string,
  actor: string,
): Promise<HostView> {
  return operatorVerb(core, hostName, actor, 'host.suspend', () =>
    Promise.resolve({ suspended: 1 }),
  );
}

export async function resume(
  core: ControllerCore,
  hostName: string,
  actor: string,
): Promise<HostView> {
  return operatorVerb(core, hostName, actor, 'host.resume', () =>
    Promise.resolve({ suspended: 0 }),
  );
}

/** Retires a host: its credentials are revoked and its agent told to stop; history is kept. */
export async function decommission(
  core: ControllerCore,
  hostName: string,
  actor: string,
): Promise<HostView> {
  const now = core.clock.now();
  const view = await operatorVerb(core, hostName, actor, 'host.decommission', async (trx, host) => {
    await trx
      .updateTable('credentials')
      .set({ revoked_at: now })
      .where('host_id', '=', host.id)
      .where('revoked_at', 'is', null)
      .execute();
    return { decommissioned_at: now };
  });
  return view;
}

async function operatorVerb(
  core: ControllerCore,
  hostName: string,
  actor: string,
  action: string,
  change: (trx: Transaction<Database>, host: HostRow) => Promise<Partial<HostRow>>,
): Promise<HostView> {
  const now = core.clock.now();
  const id = await core.transaction(async (trx) => {
    const found = await core.hostByName(trx, hostName);
    const host = await core.lockHost(trx, found.id);
    const changes = { ...(await change(trx, host)), updated_at: now };
    const next = { ...host, ...changes };
    const previous = JSON.parse(host.conditions) as Condition[];
    const conditions = core.conditionsFor(next, previous, now);
    changes.conditions = JSON.stringify(conditions);
    await trx.updateTable('hosts').set(changes).where('id', '=', host.id).execute();
    await core.event(trx, {
      hostId: host.id,
      kind: action,
      message: `${action.slice('host.'.length)} by ${actor}`,
    });
    await core.recordTransitions(trx, host.id, previous, conditions);
    await core.audit(trx, actor, action, hostName, {});
    return host.id;
  });
  await core.store.wakeHosts([id]);
  return viewHost(
    core,
    await core.store.db
      .selectFrom('hosts')
      .selectAll()
      .where('id', '=', id)
      .executeTakeFirstOrThrow(),
    core.clock.now(),
  );
}
