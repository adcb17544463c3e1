import { readFileSync } from 'node:fs';
import { afterEach, describe, expect, it } from 'vitest';
import { packagePath } from '../core/index.js';
import {
  createPolicyDocumentBinder,
  hashPolicyBundle,
  type BundleBinder,
} from './bundle-binder.js';
import { Controller } from './controller.js';
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
  options: { binder?: BundleBinder; eventsPerHost?: number; start?: number } = {},
) {
  const store = await openStore('sqlite::memory:');
  stores.push(store);
  const clock = manualClock(options.start ?? 1_000_000);
  const make = () =>
    new Controller({
      store,
      binder: options.binder ?? createPolicyDocumentBinder(hashPolicyBundle),
      caPin: null,
      clock,
      pollIntervalMs: 30_000,
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

  it('marks a host silent after its grace, and gives every host one poll interval after a restart', async () => {
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

    // A controller that starts now: "a" was silent long ago, but gets one poll interval to find it.
    clock.advance(600_000);
    const restarted = restart();
    expect((await restarted.host('a')).silent).toBe(false);
    clock.advance(30_001);
    expect((await restarted.host('a')).silent).toBe(true);
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
    await expect(
      controller.enroll({
        token,
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
