import { readFileSync } from 'node:fs';
import type { KyselyPlugin } from 'kysely';
import { afterEach, describe, expect, it } from 'vitest';
import { packagePath } from '../core/index.js';
import {
  createPolicyDocumentBinder,
  hashPolicyBundle,
  type BundleBinder,
} from './bundle-binder.js';
import { Controller } from './controller.js';
import { AGENT_RECONNECT_CAP_MS, statusReportSchema } from './protocol.js';
import { RefusedError } from './request-error.js';
import { openStore, type Store } from './store/open-store.js';

const POLICY = readFileSync(
  packagePath('testdata/policies/valid/linux-vpn-gateway/policy.yaml'),
  'utf8',
);
const FACTS = JSON.parse(
  readFileSync(packagePath('testdata/policies/valid/linux-vpn-gateway/facts.json'), 'utf8'),
) as object;

/** A clock the test moves: silence and transition times without waiting. */
function manualClock(start: number): { now(): number; advance(ms: number): void } {
  let t = start;
  return { now: () => t, advance: (ms) => (t += ms) };
}

const stores: Store[] = [];
afterEach(async () => {
  await Promise.all(stores.splice(0).map((s) => s.close()));
});

async function setUp(
  options: {
    binder?: BundleBinder;
    eventsPerHost?: number;
    start?: number;
    plugin?: KyselyPlugin;
    pollIntervalMs?: number;
  } = {},
) {
  const opened = await openStore('sqlite::memory:');
  stores.push(opened);
  const store =
    options.plugin === undefined ? opened : { ...opened, db: opened.db.withPlugin(options.plugin) };
  const clock = manualClock(options.start ?? 1_000_000);
  const make = () =>
    new Controller({
      store,
      binder: options.binder ?? createPolicyDocumentBinder(hashPolicyBundle),
      caPin: null,
      clock,
      pollIntervalMs: options.pollIntervalMs ?? 30_000,
      ...(options.eventsPerHost === undefined ? {} : { eventsPerHost: options.eventsPerHost }),
    });
  const controller = make();
  const enroll = async (names: string[]) => {
    const { token } = await controller.createBootstrapToken(
      { ttlMs: 60_000, uses: names.length },
      'test',
    );
    for (const name of names) {
      await controller.enroll({
        token,
        hostname: name,
        agentVersion: 't',
        facts: { ...FACTS, hostname: name },
      });
    }
  };
  return { store, clock, controller, enroll, restart: make };
}

/** A report of a host that applied `hash` and reads it back. */
function converged(hash: string) {
  return statusReportSchema.parse({
    agentVersion: 't',
    desiredHash: hash,
    appliedHash: hash,
    liveHash: hash,
  });
}

describe('Controller (SQLite in memory, injected clock)', () => {
  it('marks a host Stalled when the controller cannot bind the policy to its facts, and a new push re-arms it', async () => {
    const base = createPolicyDocumentBinder(hashPolicyBundle);
    // Phase B's compile failure for one host's facts, as a binder that refuses "db-1" for one policy.
    const binder: BundleBinder = {
      preparePolicy: (push) => base.preparePolicy(push),
      bindHost: (prepared, target) =>
        target.hostName === 'db-1' && (prepared as { text: string }).text.includes('needs-wg9')
          ? {
              ok: false,
              reason: 'CompileFailed',
              message: 'class "vpn" needs interface "wg9", which host "db-1" lacks',
            }
          : base.bindHost(prepared as never, target),
    };
    const { controller, enroll } = await setUp({ binder });
    await enroll(['db-1', 'web-1']);
    const bad = await controller.push(
      {
        text: `${POLICY}\n# needs-wg9\n`,
        source: 'p.yaml',
        rollout: { canary: 0, bakeMs: 0, maxUnavailable: 2 },
      },
      'op',
    );
    if (!bad.ok) throw new Error('push refused');
    const db = await controller.host('db-1');
    expect(db.desiredHash).toBeNull();
    expect(db.conditions.find((c) => c.type === 'Stalled')).toMatchObject({
      status: 'True',
      reason: 'CompileFailed',
    });
    expect((await controller.host('web-1')).desiredHash).not.toBeNull();
    expect((await controller.rolloutView(bad.rolloutId)).state).toBe('paused');

    const fixed = await controller.push(
      { text: POLICY, source: 'p.yaml', rollout: { canary: 0, bakeMs: 0, maxUnavailable: 2 } },
      'op',
    );
    if (!fixed.ok) throw new Error('push refused');
    const rearmed = await controller.host('db-1');
    expect(rearmed.desiredHash).not.toBeNull();
    expect(rearmed.conditions.find((c) => c.type === 'Stalled')?.status).toBe('False');
    expect(rearmed.conditions.find((c) => c.type === 'Progressing')).toMatchObject({
      status: 'True',
      reason: 'Applying',
    });
  });

  it('finishes a rollout pushed to a fleet with no hosts, and a host enrolled later gets it', async () => {
    const { controller, enroll } = await setUp();
    const pushed = await controller.push(
      { text: POLICY, source: 'p.yaml', rollout: { canary: 1, bakeMs: 0, maxUnavailable: 1 } },
      'op',
    );
    if (!pushed.ok) throw new Error('push refused');
    await controller.tick();
    expect((await controller.rolloutView(pushed.rolloutId)).state).toBe('succeeded');
    await enroll(['late-1']);
    expect((await controller.host('late-1')).desiredHash).not.toBeNull();
  });

  it('refuses an invalid policy with every problem, recording nothing', async () => {
    const { controller, enroll } = await setUp();
    await enroll(['a']);
    const result = await controller.push(
      { text: 'apiVersion: egressguard/v9\n', source: 'bad.yaml' },
      'op',
    );
    expect(result.ok).toBe(false);
    if (result.ok) return;
    expect(result.issues[0]).toMatchObject({ file: 'bad.yaml', severity: 'error' });
    expect(await controller.listRollouts()).toEqual([]);
    expect((await controller.auditLog()).map((e) => e.action)).not.toContain('policy.push');
  });

  it('refuses a rollback to a policy that no longer validates, naming its push, and pushes nothing', async () => {
    const { controller, store, enroll } = await setUp();
    await enroll(['a']);
    const rollout = { canary: 0, bakeMs: 0, maxUnavailable: 1 };
    const first = await controller.push({ text: POLICY, source: 'v1.yaml', rollout }, 'op');
    const second = await controller.push(
      { text: `${POLICY}\n# v2\n`, source: 'v2.yaml', rollout },
      'op',
    );
    if (!first.ok || !second.ok) throw new Error('the test policies must push');
    // As if a newer egressguard validated more strictly than the one that took the first push.
    await store.db
      .updateTable('pushes')
      .set({ policy_text: 'apiVersion: egressguard/v9\n' })
      .where('id', '=', first.pushId)
      .execute();
    const refused = await controller.rollback('op').then(
      () => undefined,
      (error: unknown) => error,
    );
    expect(refused).toBeInstanceOf(RefusedError);
    if (!(refused instanceof RefusedError)) return;
    expect([refused.code, refused.status]).toEqual(['policy-invalid', 422]);
    expect(refused.message).toContain(`Cannot roll back to push ${first.pushId} ("v1.yaml")`);
    expect(refused.issues).toContainEqual(
      expect.objectContaining({ code: 'api-version', file: 'v1.yaml' }),
    );
    expect((await controller.listRollouts()).map((r) => r.pushId).sort()).toEqual(
      [first.pushId, second.pushId].sort(),
    );
    expect((await controller.auditLog()).map((e) => e.action)).not.toContain('policy.rollback');
  });

  it('marks a host silent after its grace; after a restart, only once the agents’ longest reconnect backoff and a poll interval are over', async () => {
    const { clock, controller, enroll, restart } = await setUp();
    await enroll(['a', 'b']);
    clock.advance(59_000); // grace: two poll intervals
    expect((await controller.listHosts()).map((h) => h.silent)).toEqual([false, false]);
    await controller.checkIn((await controller.host('b')).id);
    clock.advance(2_000);
    expect((await controller.listHosts()).map((h) => [h.name, h.silent])).toEqual([
      ['a', true],
      ['b', false],
    ]);
    expect((await controller.host('a')).conditions.find((c) => c.type === 'Ready')).toMatchObject({
      status: 'Unknown',
      reason: 'AgentSilent',
    });

    // A controller that starts now: "a" was silent long ago, but its agent may be in a reconnect
    // backoff of up to AGENT_RECONNECT_CAP_MS, so it gets that and a poll interval.
    clock.advance(600_000);
    const restarted = restart();
    expect(restarted.restartGraceMs).toBe(AGENT_RECONNECT_CAP_MS + 30_000);
    clock.advance(AGENT_RECONNECT_CAP_MS - 3_000);
    expect((await restarted.host('a')).silent).toBe(false);
    clock.advance(33_001);
    expect((await restarted.host('a')).silent).toBe(true);
  });

  it('gives a host at least 60 s before it is silent with a short poll interval: a wave is not paused while its canary applies', async () => {
    const { clock, controller, enroll } = await setUp({ pollIntervalMs: 5_000 });
    await enroll(['a', 'b']);
    const pushed = await controller.push(
      { text: POLICY, source: 'p.yaml', rollout: { canary: 1, bakeMs: 3_000, maxUnavailable: 1 } },
      'op',
    );
    if (!pushed.ok) throw new Error('push refused');
    // The canary took its bundle and is applying: no check-in for 15 s (three poll intervals).
    clock.advance(15_000);
    await controller.tick();
    expect((await controller.host('a')).silent).toBe(false);
    expect((await controller.rolloutView(pushed.rolloutId)).state).toBe('progressing');
    const a = await controller.host('a');
    await controller.reportStatus(a.id, converged(a.desiredHash ?? ''));
    clock.advance(3_000);
    await controller.tick();
    expect((await controller.rolloutView(pushed.rolloutId)).waves[0]?.state).toBe('succeeded');
    // Silent once the 60 s are over.
    clock.advance(60_001 - 18_000);
    expect((await controller.host('b')).silent).toBe(true);
  });

  it('keeps a wave going through a restart while the agent is still in its reconnect backoff (57 s), and fails a host once the restart grace is over', async () => {
    const { clock, controller, enroll, restart } = await setUp();
    await enroll(['a', 'b']);
    const pushed = await controller.push(
      {
        text: POLICY,
        source: 'p.yaml',
        rollout: { canary: 1, bakeMs: 120_000, maxUnavailable: 1 },
      },
      'op',
    );
    if (!pushed.ok) throw new Error('push refused');
    const a = await controller.host('a');
    await controller.reportStatus(a.id, converged(a.desiredHash ?? ''));
    // The controller is down for 40 s; the canary's agent, in its reconnect backoff, finds the
    // new one 57 s after it started (one poll interval of grace would have called it silent).
    clock.advance(40_000);
    const restarted = restart();
    clock.advance(57_000);
    await restarted.tick();
    expect((await restarted.host('a')).silent).toBe(false);
    expect((await restarted.rolloutView(pushed.rolloutId)).state).toBe('progressing');
    await restarted.reportStatus(a.id, converged(a.desiredHash ?? ''));
    clock.advance(28_000); // the canary baked
    await restarted.tick();
    expect((await restarted.rolloutView(pushed.rolloutId)).waves.map((w) => w.state)).toEqual([
      'succeeded',
      'progressing',
    ]);
    // Host "b" has not been seen since before the restart: silent once the grace is over, and
    // its wave counts it as failing.
    clock.advance(40_000 + restarted.restartGraceMs - 125_000 + 1);
    await restarted.tick();
    expect((await restarted.host('b')).silent).toBe(true);
    expect((await restarted.rolloutView(pushed.rolloutId)).state).toBe('paused');
  });

  it('counts at most one drift repair a second since the host last checked in, whatever a report claims', async () => {
    const { clock, controller, enroll } = await setUp();
    await enroll(['a']);
    const { id } = await controller.host('a');
    const repaired = (repairs: number) =>
      statusReportSchema.parse({
        agentVersion: 't',
        desiredHash: null,
        appliedHash: null,
        liveHash: null,
        drift: { detectedHash: null, repaired: true, message: 'table deleted', repairs },
      });
    expect(await controller.reportStatus(id, repaired(100_000))).toEqual({ repairs: 1 });
    clock.advance(30_000);
    expect(await controller.reportStatus(id, repaired(100_000))).toEqual({ repairs: 31 });
    expect(await controller.reportStatus(id, repaired(2))).toEqual({ repairs: 1 });
    clock.advance(10_000);
    expect(await controller.reportStatus(id, repaired(3))).toEqual({ repairs: 3 });
    const events = await controller.events({ hostName: 'a' });
    expect(events.filter((e) => e.kind === 'drift-repaired').map((e) => e.message)).toEqual([
      'table deleted (it reported 100000 repairs; counted 1, one a second since its last check-in)',
      'table deleted (it reported 100000 repairs; counted 31, one a second since its last check-in)',
      'table deleted (it reported 2 repairs; counted 1, one a second since its last check-in)',
      'table deleted',
    ]);
  });

  it('pushes once per idempotency key: a retry gets the push it made, another policy under the key is refused', async () => {
    const { store, controller, enroll } = await setUp();
    await enroll(['a', 'b']);
    const push = (text: string) =>
      controller.push(
        {
          text,
          source: 'p.yaml',
          rollout: { canary: 1, maxUnavailable: 1 },
          idempotencyKey: 'key-0001',
        },
        'op',
      );
    const first = await push(POLICY);
    const again = await push(POLICY);
    if (!first.ok || !again.ok) throw new Error('push refused');
    expect(again).toMatchObject({
      pushId: first.pushId,
      rolloutId: first.rolloutId,
      waves: [1, 1],
      replayed: true,
    });
    await expect(push(`${POLICY}\n# another\n`)).rejects.toThrow(
      /idempotency key "key-0001": push p\w+ used it for another policy/,
    );
    const pushes = await store.db.selectFrom('pushes').select('id').execute();
    expect(pushes.map((p) => p.id)).toEqual([first.pushId]);
    const audit = await controller.auditLog();
    expect(audit.filter((e) => e.action === 'policy.push')).toHaveLength(1);
  });

  it('writes check-ins together, and never over a newer time another replica stored', async () => {
    const { clock, controller, enroll, store } = await setUp();
    await enroll(['a', 'b']);
    const [a, b] = [(await controller.host('a')).id, (await controller.host('b')).id];
    const stored = async (id: string) =>
      (
        await store.db
          .selectFrom('hosts')
          .select('last_checkin_at')
          .where('id', '=', id)
          .executeTakeFirstOrThrow()
      ).last_checkin_at;
    clock.advance(1_000);
    await controller.checkIn(a);
    clock.advance(1_000);
    await controller.checkIn(b);
    expect([await stored(a), await stored(b)]).toEqual([1_000_000, 1_000_000]); // enrollment
    // Another replica saw "b" later and wrote it first.
    await store.db
      .updateTable('hosts')
      .set({ last_checkin_at: 1_005_000 })
      .where('id', '=', b)
      .execute();
    await controller.flushCheckins();
    expect([await stored(a), await stored(b)]).toEqual([1_001_000, 1_005_000]);
    // Views write what is held first: what they show is never older than the last check-in.
    clock.advance(1_000);
    await controller.checkIn(a);
    expect((await controller.host('a')).lastCheckinAt).toBe(1_003_000);
  });

  it('writes concurrent status reports together; a refused one is refused alone and writes nothing', async () => {
    let eventInserts = 0;
    const counting: KyselyPlugin = {
      transformQuery: ({ node }) => {
        if (node.kind === 'InsertQueryNode' && node.into?.table.identifier.name === 'events') {
          eventInserts += 1;
        }
        return node;
      },
      transformResult: ({ result }) => Promise.resolve(result),
    };
    const { controller, enroll } = await setUp({ plugin: counting });
    const names = Array.from({ length: 30 }, (_, i) => `h${String(i).padStart(2, '0')}`);
    await enroll(names);
    const ids = await Promise.all(names.map(async (n) => (await controller.host(n)).id));
    const hash = (c: string) => `sha256:${c.repeat(64)}`;
    const report = (attempt: 'applied' | 'failed') => ({
      agentVersion: 't',
      desiredHash: hash('a'),
      appliedHash: attempt === 'applied' ? hash('a') : null,
      liveHash: attempt === 'applied' ? hash('a') : null,
      attempt: { hash: hash('a'), outcome: attempt, number: 1, message: attempt, durationMs: 5 },
      counters: {},
      tunnels: [],
    });
    eventInserts = 0;
    const results = await Promise.allSettled([
      ...ids.map((id) => controller.reportStatus(id, report('applied'))),
      controller.reportStatus(ids[0] ?? '', { ...report('failed'), facts: { os: 7 } }),
      // The same host twice in one batch: the second report sees what the first wrote.
      controller.reportStatus(ids[1] ?? '', report('failed')),
      controller.reportStatus(ids[1] ?? '', report('applied')),
    ]);
    const refused = results.filter((r) => r.status === 'rejected');
    expect(refused).toHaveLength(1);
    expect(String((refused[0] as PromiseRejectedResult).reason)).toMatch(/status of host "h00"/);
    // 33 reports, at most two writers: a handful of transactions, not 33.
    expect(eventInserts).toBeGreaterThan(0);
    expect(eventInserts).toBeLessThanOrEqual(4);
    for (const name of names) expect((await controller.host(name)).appliedHash).toBe(hash('a'));
    const h00 = await controller.events({ hostName: 'h00' });
    expect(h00.filter((e) => e.kind === 'apply-failed')).toEqual([]);
    const h01 = await controller.events({ hostName: 'h01' });
    expect(
      h01.filter((e) => e.kind === 'apply-failed' || e.kind === 'applied').map((e) => e.kind),
    ).toEqual(['applied', 'apply-failed', 'applied']);
    expect((await controller.host('h01')).failures).toBeNull();
  });

  it('writes each report of a batch again on its own when a statement fails, so a failure stays with its host', async () => {
    let broken = '';
    const failing: KyselyPlugin = {
      transformQuery: ({ node }) => {
        if (
          node.kind === 'UpdateQueryNode' &&
          broken !== '' &&
          JSON.stringify(node).includes(broken)
        ) {
          throw new Error('disk full');
        }
        return node;
      },
      transformResult: ({ result }) => Promise.resolve(result),
    };
    const { controller, enroll } = await setUp({ plugin: failing });
    const names = ['a', 'b', 'c', 'd', 'e'];
    await enroll(names);
    const ids = await Promise.all(names.map(async (n) => (await controller.host(n)).id));
    broken = ids[2] ?? '';
    const hash = `sha256:${'b'.repeat(64)}`;
    const results = await Promise.allSettled(
      ids.map((id) =>
        controller.reportStatus(id, {
          agentVersion: 't',
          desiredHash: hash,
          appliedHash: hash,
          liveHash: hash,
          counters: {},
          tunnels: [],
        }),
      ),
    );
    expect(results.map((r) => r.status)).toEqual([
      'fulfilled',
      'fulfilled',
      'rejected',
      'fulfilled',
      'fulfilled',
    ]);
    expect(String((results[2] as PromiseRejectedResult).reason)).toMatch(/disk full/);
    broken = '';
    const applied = await Promise.all(
      names.map(async (n) => (await controller.host(n)).appliedHash),
    );
    expect(applied).toEqual([hash, hash, null, hash, hash]);
  });

  it('keeps only the newest events of each host, and every rollout event', async () => {
    const { controller, enroll } = await setUp({ eventsPerHost: 5 });
    await enroll(['a']);
    for (let i = 0; i < 6; i++) {
      await controller.suspend('a', 'op');
      await controller.resume('a', 'op');
    }
    await controller.push(
      { text: POLICY, source: 'p.yaml', rollout: { canary: 0, bakeMs: 0, maxUnavailable: 1 } },
      'op',
    );
    expect((await controller.events({ hostName: 'a' })).length).toBeGreaterThan(5);
    await controller.pruneEvents();
    const kept = await controller.events({ hostName: 'a' });
    expect(kept).toHaveLength(5);
    expect(kept.at(-1)?.kind).toBe('condition');
    expect(
      (await controller.events({ limit: 1000 })).filter((e) => e.rolloutId !== null).length,
    ).toBeGreaterThan(1);
  });

  it('refuses enrollment with an expired token, and a second host of the same name', async () => {
    const { clock, controller } = await setUp();
    const { token } = await controller.createBootstrapToken({ ttlMs: 1_000, uses: 5 }, 'op');
    await controller.enroll({
      token,
      hostname: 'a',
      agentVersion: 't',
      facts: { ...FACTS, hostname: 'a' },
    });
    // Another token (the same one may enroll it again while its credential is unused).
    const other = await controller.createBootstrapToken({ ttlMs: 1_000, uses: 5 }, 'op');
    await expect(
      controller.enroll({
        token: other.token,
        hostname: 'a',
        agentVersion: 't',
        facts: { ...FACTS, hostname: 'a' },
      }),
    ).rejects.toThrow(/a host of that name is enrolled/);
    clock.advance(1_000);
    await expect(
      controller.enroll({
        token,
        hostname: 'b',
        agentVersion: 't',
        facts: { ...FACTS, hostname: 'b' },
      }),
    ).rejects.toThrow(/has expired or was revoked/);
  });
});
