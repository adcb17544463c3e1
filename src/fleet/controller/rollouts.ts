import type { Transaction } from 'kysely';
import type { PolicyIssue } from '../../policy/index.js';
import { findPushOptionProblem } from '../compile-bundle.js';
import { RefusedError } from '../request-error.js';
import {
  judgeHost,
  judgeWave,
  planWaves,
  resolveRolloutParams,
  type RolloutParams,
  type RolloutParamsInput,
} from '../rollout-plan.js';
import { createId } from '../secrets.js';
import type { Database, RolloutState } from '../store/database.js';
import type { ControllerCore } from './controller-core.js';
import type { PushResult, RollbackResponse, RolloutView } from '../protocol.js';
import { rolloutView } from './views.js';

/** What an operator pushes: a policy's text, where it came from, and how to roll it out. */
export interface PushOrder {
  readonly text: string;
  readonly source: string;
  readonly rollout?: RolloutParamsInput;
  /** Backend options for every host's compile (`--rule-priority`…). */
  readonly options?: Readonly<Record<string, string>>;
  /**
   * The client's key for this push: a push sent again with it (a retry after an error or a
   * lost answer) is answered with the push it made, never made twice.
   */
  readonly idempotencyKey?: string;
}

/** Validates a policy and starts rolling it out in waves; supersedes any unfinished rollout. */
export async function push(
  core: ControllerCore,
  input: PushOrder,
  actor: string,
  kind: 'push' | 'rollback' = 'push',
): Promise<PushResult> {
  const pushId = createId('p');
  const options = input.options ?? {};
  const optionProblem = findPushOptionProblem(options);
  if (optionProblem !== undefined) throw new RefusedError('invalid-request', optionProblem);
  const prepared = core.binder.preparePolicy({
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
      : replayPush(core, key, prepared.digest, input.source, prepared.warnings);
  const earlier = await replay();
  if (earlier !== undefined) return earlier;
  core.prepared.set(pushId, prepared.prepared);
  const now = core.clock.now();
  const rolloutId = createId('r');
  let waves: number[];
  try {
    waves = await recordPush(
      core,
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
  await advanceRollout(core, rolloutId).catch((error: unknown) => {
    if (core.store.noteFailure(error) === undefined) throw error;
  });
  return { ok: true, pushId, rolloutId, waves, warnings: prepared.warnings };
}

/** The push an idempotency key already made, or undefined; a key reused for another policy is refused. */
async function replayPush(
  core: ControllerCore,
  key: string,
  digest: string,
  source: string,
  warnings: readonly PolicyIssue[],
): Promise<PushResult | undefined> {
  const push = await core.store.db
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
  const waves = await core.store.db
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
async function recordPush(
  core: ControllerCore,
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
  return core.transaction(async (trx) => {
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
    await supersedeRollouts(core, trx, rolloutId);
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
    await core.event(trx, {
      rolloutId,
      kind: 'rollout-created',
      message: `${kind} ${pushId} from "${push.source}": ${planned.length} waves (${planned.map((w) => w.length).join(', ')} hosts)`,
    });
    await core.audit(trx, actor, kind === 'push' ? 'policy.push' : 'policy.rollback', pushId, {
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
export async function rollback(
  core: ControllerCore,
  actor: string,
  rollout: RolloutParamsInput = {},
): Promise<RollbackResponse> {
  const pushes = await core.store.db
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
  const result = await push(
    core,
    {
      text: previous.policy_text,
      source: previous.source,
      options: JSON.parse(previous.backend_options) as Record<string, string>,
      rollout: { canary: 0, maxUnavailable: 1_000_000, bakeMs: 0, ...rollout },
    },
    actor,
    'rollback',
  );
  if (!result.ok) {
    // Validation has grown stricter since that push (a newer egressguard): nothing is pushed.
    throw new RefusedError(
      'policy-invalid',
      `Cannot roll back to push ${previous.id} ("${previous.source}"): its policy no longer validates (${result.issues.length} problem(s)); push a corrected policy instead`,
      { issues: result.issues },
    );
  }
  return { ...result, restoredPushId: previous.id };
}

/** Continues a paused rollout: the paused wave is accepted as judged and the next one starts. */
export async function resumeRollout(
  core: ControllerCore,
  rolloutId: string | undefined,
  actor: string,
): Promise<RolloutView> {
  const now = core.clock.now();
  const id = await core.transaction(async (trx) => {
    const query = trx.selectFrom('rollouts').selectAll();
    const rollout = await core.store
      .lockRows(
        rolloutId === undefined
          ? query.where('state', '=', 'paused').orderBy('created_at', 'desc').limit(1)
          : query.where('id', '=', rolloutId),
      )
      .executeTakeFirst();
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
    await setWaveState(core, trx, {
      rolloutId: rollout.id,
      index: rollout.current_wave,
      state: 'accepted',
      message: `wave ${rollout.current_wave} accepted by ${actor}`,
      now,
    });
    await finishWave(core, trx, rollout.id, rollout.current_wave, now);
    await core.audit(trx, actor, 'rollout.resume', rollout.id, { wave: rollout.current_wave });
    return rollout.id;
  });
  await advanceRollout(core, id);
  return rolloutView(core, id);
}

/** Advances every progressing rollout one judgement. */
export async function advanceProgressingRollouts(core: ControllerCore): Promise<void> {
  const rollouts = await core.store.db
    .selectFrom('rollouts')
    .select('id')
    .where('state', '=', 'progressing')
    .execute();
  for (const rollout of rollouts) await advanceRollout(core, rollout.id);
}

/**
 * Starts the current wave, or judges it: pause, or succeed and start the next. Runs under the
 * rollout's row lock (PostgreSQL skips a rollout another replica is judging); every transition
 * is an event under a unique key, so it is recorded once whoever gets there.
 */
export async function advanceRollout(core: ControllerCore, rolloutId: string): Promise<void> {
  const woken: string[] = [];
  await core.transaction(async (trx) => {
    const rollout = await core.store
      .lockRows(trx.selectFrom('rollouts').selectAll().where('id', '=', rolloutId), {
        skipLocked: true,
      })
      .executeTakeFirst();
    if (rollout === undefined) return;
    const params = JSON.parse(rollout.params) as RolloutParams;
    let current = rollout.current_wave;
    let state = rollout.state;
    while (state === 'progressing') {
      const now = core.clock.now();
      const wave = await trx
        .selectFrom('waves')
        .selectAll()
        .where('rollout_id', '=', rolloutId)
        .where('wave_index', '=', current)
        .executeTakeFirst();
      if (wave === undefined) {
        // No wave left to judge (a push to a fleet with no hosts has none at all): the rollout
        // is done, and hosts that enrol later follow it.
        const next = await finishWave(core, trx, rolloutId, current - 1, now);
        woken.push(...next.woken);
        state = next.state;
        break;
      }
      const hostIds = JSON.parse(wave.host_ids) as string[];
      if (wave.state === 'pending') {
        await setWaveState(core, trx, {
          rolloutId,
          index: current,
          state: 'progressing',
          message: `wave ${current} started: ${hostIds.length} hosts`,
          now,
        });
        // One locking read for the whole wave (a thousand hosts are a thousand round trips).
        const rows = await core.lockHosts(trx, hostIds);
        for (const hostId of hostIds) {
          const host = rows.get(hostId);
          if (host === undefined || host.decommissioned_at !== null) continue;
          await core.setDesired(trx, host, rollout.push_id, now);
          woken.push(hostId);
        }
      }
      const hosts =
        hostIds.length === 0
          ? []
          : await trx.selectFrom('hosts').selectAll().where('id', 'in', hostIds).execute();
      const verdicts = hosts.map((h) => judgeHost(core.waveHost(h, now), now, params.bakeMs));
      const judged = judgeWave(verdicts, params.maxFailures);
      if (judged.verdict === 'waiting') break;
      if (judged.verdict === 'paused') {
        const reason = `wave ${current}: ${judged.failed} of ${judged.counted} hosts failing (at most ${params.maxFailures} tolerated)`;
        await setWaveState(core, trx, {
          rolloutId,
          index: current,
          state: 'paused',
          message: reason,
          now,
        });
        await trx
          .updateTable('rollouts')
          .set({ state: 'paused', paused_reason: reason, updated_at: now })
          .where('id', '=', rolloutId)
          .execute();
        state = 'paused';
        break;
      }
      await setWaveState(core, trx, {
        rolloutId,
        index: current,
        state: 'succeeded',
        message: `wave ${current} succeeded: ${judged.baked} hosts baked${judged.failed > 0 ? `, ${judged.failed} failing tolerated` : ''}`,
        now,
      });
      const next = await finishWave(core, trx, rolloutId, current, now);
      woken.push(...next.woken);
      current += 1;
      state = next.state;
    }
  });
  if (woken.length > 0) await core.store.wakeHosts(woken.length > 200 ? '*' : woken);
}

/** Marks a judged wave done and moves on: the next wave, or the rollout's end. */
async function finishWave(
  core: ControllerCore,
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
  await core.event(trx, {
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
  // Locked, in id order as every statement that locks several hosts: setDesired rewrites
  // conditions from these rows, which a status report must not change meanwhile.
  const stragglers = await core.store
    .lockRows(
      trx
        .selectFrom('hosts')
        .selectAll()
        .where('decommissioned_at', 'is', null)
        .where((eb) =>
          eb.or([eb('desired_push_id', 'is', null), eb('desired_push_id', '!=', rollout.push_id)]),
        )
        .orderBy('id'),
    )
    .execute();
  for (const host of stragglers) await core.setDesired(trx, host, rollout.push_id, now);
  return { state: 'succeeded', woken: stragglers.map((h) => h.id) };
}

async function supersedeRollouts(
  core: ControllerCore,
  trx: Transaction<Database>,
  by: string,
): Promise<void> {
  const active = await core.store
    .lockRows(
      trx.selectFrom('rollouts').select(['id']).where('state', 'in', ['progressing', 'paused']),
    )
    .execute();
  const now = core.clock.now();
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
    await core.event(trx, {
      rolloutId: rollout.id,
      kind: 'rollout-superseded',
      message: `superseded by rollout ${by}`,
      onceKey: `${rollout.id}/superseded`,
    });
  }
}

/**
 * Moves a wave to its next state and records the transition as an event under a unique key, so
 * it is recorded once whichever replica gets there. A started wave records when it started; every
 * other state is a judgement and records when it was judged.
 */
async function setWaveState(
  core: ControllerCore,
  trx: Transaction<Database>,
  wave: {
    rolloutId: string;
    index: number;
    state: 'progressing' | 'paused' | 'succeeded' | 'accepted';
    message: string;
    now: number;
  },
): Promise<void> {
  const { rolloutId, index, state, now } = wave;
  await trx
    .updateTable('waves')
    .set(state === 'progressing' ? { state, started_at: now } : { state, judged_at: now })
    .where('rollout_id', '=', rolloutId)
    .where('wave_index', '=', index)
    .execute();
  const transition = state === 'progressing' ? 'started' : state;
  await core.event(trx, {
    rolloutId,
    kind: `wave-${transition}`,
    message: wave.message,
    onceKey: `${rolloutId}/wave/${index}/${transition}`,
  });
}
