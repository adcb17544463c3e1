import type { Transaction } from 'kysely';
import { isEgressguardError } from '../../core/index.js';
import { parseHostFacts } from '../../facts/index.js';
import { digestFacts } from '../bundle-binder.js';
import type { EnrollRequest, EnrollResponse, TokenResponse } from '../protocol.js';
import { RefusedError } from '../request-error.js';
import {
  createId,
  createSecret,
  formatBootstrapToken,
  formatCredential,
  hashSecret,
  matchesSecret,
  parseBootstrapToken,
  parseCredential,
} from '../secrets.js';
import type { Database } from '../store/database.js';
import { checkLabels, type ControllerCore, type HostRow } from './controller-core.js';

/** A host's agent as its credential identifies it. */
export interface HostIdentity {
  readonly hostId: string;
  readonly credentialId: string;
}

/** A bootstrap token to mint: how long it lives, how many hosts it enrolls, the labels it gives. */
export interface BootstrapTokenOrder {
  readonly ttlMs: number;
  readonly uses: number;
  readonly labels?: Readonly<Record<string, string>>;
  readonly description?: string;
}

/** Mints a bootstrap token that enrolls up to `uses` hosts before it expires. */
export async function createBootstrapToken(
  core: ControllerCore,
  options: BootstrapTokenOrder,
  actor: string,
): Promise<TokenResponse> {
  const now = core.clock.now();
  checkLabels({ ...options.labels }, 'the labels of a bootstrap token');
  const id = createId('t');
  const secret = createSecret();
  const expiresAt = now + options.ttlMs;
  await core.transaction(async (trx) => {
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
    await core.audit(trx, actor, 'token.create', id, {
      uses: options.uses,
      expiresAt,
      labels: options.labels ?? {},
    });
  });
  return { token: formatBootstrapToken({ id, secret, caPin: core.caPin }), id, expiresAt };
}

/** Exchanges a bootstrap token for the host's own credential (shown once, stored hashed). */
export async function enroll(
  core: ControllerCore,
  request: EnrollRequest,
): Promise<EnrollResponse> {
  const now = core.clock.now();
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
  await core.transaction(async (trx) => {
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
      if (await isUnansweredEnrollment(trx, existing, token.id)) {
        // The agent enrolled, but the answer never reached it (a timeout, a broken
        // connection): it asks again with the same token. Its unused credential is replaced.
        enrolledAgain = existing.id;
        await trx
          .updateTable('credentials')
          .set({ revoked_at: now })
          .where('host_id', '=', existing.id)
          .where('revoked_at', 'is', null)
          .execute();
        await insertCredential(trx, { id: credentialId, hostId: existing.id, secret, now });
        await core.event(trx, {
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
    const baseline = await core.baselinePush(trx);
    const host =
      baseline === undefined
        ? base
        : { ...base, ...(await core.desiredFields(trx, base, baseline)) };
    await trx
      .insertInto('hosts')
      .values({ ...host, conditions: JSON.stringify(core.conditionsFor(host, [], now)) })
      .execute();
    await insertCredential(trx, { id: credentialId, hostId, secret, now });
    await core.event(trx, {
      hostId,
      kind: 'enrolled',
      message: `enrolled with bootstrap token "${token.id}"`,
    });
    await core.audit(trx, `token:${token.id}`, 'host.enroll', request.hostname, { hostId });
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
async function isUnansweredEnrollment(
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

async function insertCredential(
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
export async function authenticateHost(
  core: ControllerCore,
  presented: string,
): Promise<HostIdentity> {
  const credential = parseCredential(presented);
  if (credential === undefined) {
    throw new RefusedError('unauthenticated', 'The host credential is malformed');
  }
  const row = await core.store.db
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
    const now = core.clock.now();
    await core.transaction(async (trx) => {
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
export async function rotateCredential(
  core: ControllerCore,
  identity: HostIdentity,
): Promise<string> {
  const now = core.clock.now();
  const id = createId('c');
  const secret = createSecret();
  await core.transaction(async (trx) => {
    await trx
      .updateTable('credentials')
      .set({ revoked_at: now })
      .where('host_id', '=', identity.hostId)
      .where('id', '!=', identity.credentialId)
      .where('revoked_at', 'is', null)
      .execute();
    await insertCredential(trx, { id, hostId: identity.hostId, secret, now });
    await trx
      .updateTable('credentials')
      .set({ replaced_by: id })
      .where('id', '=', identity.credentialId)
      .execute();
    await core.event(trx, {
      hostId: identity.hostId,
      kind: 'credential-rotated',
      message: `credential "${identity.credentialId}" rotated to "${id}"`,
    });
    await core.audit(trx, `host:${identity.hostId}`, 'credential.rotate', identity.hostId, {
      from: identity.credentialId,
      to: id,
    });
  });
  return formatCredential({ id, secret });
}

/** Revokes every credential of a host: its agent is refused until it enrolls again. */
export async function revokeCredentials(
  core: ControllerCore,
  hostName: string,
  actor: string,
): Promise<{ revoked: number }> {
  const now = core.clock.now();
  const host = await core.hostByName(core.store.db, hostName);
  const result = await core.transaction(async (trx) => {
    const updated = await trx
      .updateTable('credentials')
      .set({ revoked_at: now })
      .where('host_id', '=', host.id)
      .where('revoked_at', 'is', null)
      .executeTakeFirst();
    await core.event(trx, {
      hostId: host.id,
      kind: 'credential-revoked',
      message: `credentials revoked by ${actor}`,
    });
    await core.audit(trx, actor, 'credential.revoke', hostName, {
      revoked: Number(updated.numUpdatedRows),
    });
    return { revoked: Number(updated.numUpdatedRows) };
  });
  await core.store.wakeHosts([host.id]);
  return result;
}
