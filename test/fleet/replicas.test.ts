import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { RunningServer } from '../../src/server/index.js';
import {
  POLICY_V1,
  createScratch,
  policyVariant,
  startTestAgent,
  startTestServer,
  waitFor,
  waitForConverged,
  type TestAgent,
} from './support/fleet-lab.js';
import { startPostgresCluster, type PostgresCluster } from './support/postgres-cluster.js';

/** Two controller replicas sharing one PostgreSQL database, as several replicas would. */
describe('two controller replicas on PostgreSQL', () => {
  const scratch = createScratch();
  let cluster: PostgresCluster;
  const servers: RunningServer[] = [];
  const agents: TestAgent[] = [];

  beforeAll(async () => {
    cluster = await startPostgresCluster();
  });
  afterAll(async () => {
    await Promise.all(agents.map((a) => a.stop()));
    await Promise.all(servers.map((s) => s.close()));
    await cluster.stop();
    scratch.cleanup();
  });

  /** Replicas share the state directory's CA, so an agent trusts whichever one it reaches. */
  async function replicas(pollIntervalMs: number): Promise<[RunningServer, RunningServer]> {
    const store = await cluster.createDatabase();
    const stateDir = scratch.dir('replicas');
    const a = await startTestServer({
      store,
      stateDir,
      pollIntervalMs,
      graceMs: 10 * pollIntervalMs,
    });
    const b = await startTestServer({
      store,
      stateDir,
      pollIntervalMs,
      graceMs: 10 * pollIntervalMs,
    });
    servers.push(a, b);
    expect(b.caPin).toBe(a.caPin);
    return [a, b];
  }

  it('wakes an agent long-polling one replica when the other takes a push (LISTEN/NOTIFY), long before its poll ends', async () => {
    // A 60 s long poll: without a wake-up the agent would hear of the push only a minute later.
    const [a, b] = await replicas(60_000);
    const { token } = await a.controller.createBootstrapToken({ ttlMs: 60_000, uses: 1 }, 'test');
    const agent = startTestAgent({
      serverUrl: b.url,
      token,
      name: 'runner-1',
      root: scratch.dir('agent'),
    });
    agents.push(agent);
    await waitFor('the agent to long-poll replica B', async () => {
      const health = (await (await fetchWithCa(`${b.url}/healthz`, b.caPem)).json()) as {
        waiting: number;
      };
      return health.waiting >= 1 ? true : undefined;
    });

    const started = Date.now();
    const pushed = await a.controller.push(
      {
        text: POLICY_V1,
        source: 'policy.yaml',
        rollout: { canary: 0, bakeMs: 0, maxUnavailable: 1 },
      },
      'test',
    );
    if (!pushed.ok) throw new Error('push refused');
    const [host] = await waitForConverged(b, ['runner-1']);
    const elapsed = Date.now() - started;
    // Generous for a loaded machine; the 2 s target is measured by scripts/bench-fleet.mjs.
    expect(elapsed).toBeLessThan(20_000);
    expect(agent.engine.applies.at(-1)?.hash).toBe(host?.desiredHash);
  });

  it('judges each wave once with two replicas ticking: transitions recorded exactly once, in order, no host ahead of its wave', async () => {
    const [a, b] = await replicas(2_000);
    const names = ['h1', 'h2', 'h3', 'h4', 'h5', 'h6'];
    const { token } = await a.controller.createBootstrapToken(
      { ttlMs: 60_000, uses: names.length },
      'test',
    );
    const root = scratch.dir('agents');
    for (const [i, name] of names.entries()) {
      const agent = startTestAgent({ serverUrl: (i % 2 === 0 ? a : b).url, token, name, root });
      agents.push(agent);
    }
    await waitFor('six hosts', async () =>
      (await a.controller.listHosts()).length === 6 ? true : undefined,
    );
    for (const text of [POLICY_V1, policyVariant('second rollout')]) {
      const pushed = await b.controller.push(
        { text, source: 'policy.yaml', rollout: { canary: 1, maxUnavailable: 2, bakeMs: 200 } },
        'test',
      );
      if (!pushed.ok) throw new Error('push refused');
      await waitFor('the rollout to succeed', async () =>
        (await a.controller.rolloutView(pushed.rolloutId)).state === 'succeeded' ? true : undefined,
      );
      await waitForConverged(a, names);

      const events = await a.controller.events({ limit: 10_000 });
      const transitions = events
        .filter((e) => e.rolloutId === pushed.rolloutId)
        .map((e) => `${e.kind} ${e.message.split(':')[0]}`);
      expect(transitions).toEqual([
        expect.stringMatching(/^rollout-created /),
        'wave-started wave 0 started',
        'wave-succeeded wave 0 succeeded',
        'wave-started wave 1 started',
        'wave-succeeded wave 1 succeeded',
        'wave-started wave 2 started',
        'wave-succeeded wave 2 succeeded',
        'wave-started wave 3 started',
        'wave-succeeded wave 3 succeeded',
        'rollout-succeeded every wave judged',
      ]);
      const view = await a.controller.rolloutView(pushed.rolloutId);
      const succeeded = events.flatMap((e, i) =>
        e.kind === 'wave-succeeded' && e.rolloutId === pushed.rolloutId ? [i] : [],
      );
      for (const [index, wave] of view.waves.entries()) {
        for (const host of wave.hosts) {
          const desired = events.flatMap((e, i) =>
            e.kind === 'desired' && e.host === host && e.message.includes(pushed.pushId) ? [i] : [],
          );
          expect(desired).toHaveLength(1); // given its hash once, by one replica
          if (index > 0) expect(desired[0]).toBeGreaterThan(succeeded[index - 1] ?? Infinity);
        }
      }
    }
  });
});

/** A GET verified against the controller CA (Node 20 fetch takes no CA option). */
async function fetchWithCa(
  url: string,
  caPem: string | null,
): Promise<{ json(): Promise<unknown> }> {
  const { connectController } = await import('../../src/fleet/index.js');
  const connection = connectController(new URL(url).origin, caPem);
  try {
    const answer = await connection.request('GET', new URL(url).pathname);
    return { json: () => Promise.resolve(answer.body) };
  } finally {
    connection.close();
  }
}
