import { readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import {
  afterAll,
  afterEach,
  beforeAll,
  describe,
  expect,
  it,
  onTestFailed,
  onTestFinished,
} from 'vitest';
import { connectController, openStore, type StoreHealth } from '../../src/fleet/index.js';
import type { RunningServer } from '../../src/server/index.js';
import { runCli } from '../e2e-cli/run-cli.js';
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
import { freePort, startServerProcess, type ServerProcess } from './support/server-process.js';

interface Health {
  ok: boolean;
  waiting: number;
  store: StoreHealth;
}

/**
 * PostgreSQL stopped and started under running controller replicas, for real: a private cluster
 * whose server is halted (every connection broken, new ones refused) and started again.
 */
describe('controller replicas when PostgreSQL stops and comes back', () => {
  const scratch = createScratch();
  let cluster: PostgresCluster;
  const processes: ServerProcess[] = [];
  const servers: RunningServer[] = [];
  const agents: TestAgent[] = [];

  beforeAll(async () => {
    cluster = await startPostgresCluster();
  });
  afterEach(async () => {
    // A failed test may leave the cluster halted: the next one needs it.
    await cluster.resume().catch(() => undefined);
    await Promise.all(agents.splice(0).map((a) => a.stop()));
    await Promise.all(servers.splice(0).map((s) => s.close()));
    for (const server of processes.splice(0)) {
      server.kill();
      await server.exited;
    }
  });
  afterAll(async () => {
    await cluster.stop();
    scratch.cleanup();
  });

  const health = async (server: ServerProcess): Promise<Health> =>
    (await server.request('GET', '/healthz')).body as Health;

  it('keeps an idle replica running when the database stops: 503 with Retry-After, /healthz says why, and it serves again once the database is back', async () => {
    const stateDir = scratch.dir('idle');
    const server = await startServerProcess({
      store: await cluster.createDatabase(),
      stateDir,
      port: await freePort(),
    });
    processes.push(server);
    const operator = readFileSync(join(stateDir, 'operator.token'), 'utf8').trim();
    expect((await health(server)).store).toMatchObject({
      state: 'ok',
      listen: { listening: true },
    });

    await cluster.halt();
    const down = await waitFor('the replica to see the database gone', async () => {
      const answer = await server.request('GET', '/healthz');
      return answer.status === 503 ? (answer.body as Health) : undefined;
    });
    expect(down.store.state).toBe('unavailable');
    expect(down.store.message).toMatch(/the database cannot be reached/);
    const refused = await server.request('GET', '/v1/hosts', { token: operator });
    expect(refused.status).toBe(503);
    expect(refused.retryAfterSeconds).toBeGreaterThan(0);
    expect(refused.body).toMatchObject({ error: { code: 'store-unavailable' } });
    // Still there after the pool's idle connections and the LISTEN connection broke.
    await waitFor('a failed attempt to listen again', async () =>
      ((await health(server)).store.listen?.failedAttempts ?? 0) >= 2 ? true : undefined,
    );
    expect(server.running()).toBe(true);

    await cluster.resume();
    await waitFor('the replica to serve again', async () => {
      const back = await health(server);
      return back.ok && back.store.listen?.listening === true ? true : undefined;
    });
    expect((await server.request('GET', '/v1/hosts', { token: operator })).status).toBe(200);
    expect(server.running()).toBe(true);
    // The fault is logged when it starts and when it ends, not at every request.
    expect(server.log().match(/store ".*": the database cannot be reached/g)).toHaveLength(1);
    expect(server.log()).toMatch(/works again after/);
    expect(unhandled(server.log())).toEqual([]);
  });

  it('listens again for ever after failed attempts: a push on one replica wakes an agent long-polling the other at once, and the reconnects are counted', async () => {
    const store = await cluster.createDatabase();
    const stateDir = scratch.dir('listen');
    // A ten-minute long poll: an agent that missed the wake-up would hear of the push that late.
    const options = { store, stateDir, pollIntervalMs: 600_000, graceMs: 1_200_000 };
    const a = await startTestServer(options);
    const b = await startTestServer(options);
    servers.push(a, b);
    const { token } = await a.controller.createBootstrapToken({ ttlMs: 60_000, uses: 1 }, 'test');
    const agent = startTestAgent({ serverUrl: b.url, token, name: 'r1', root: scratch.dir('r1') });
    agents.push(agent);
    const waitingOnB = async (): Promise<number> => {
      const connection = connectController(b.url, b.caPem);
      try {
        const answer = await connection.request('GET', '/healthz');
        return (answer.body as Health).waiting;
      } finally {
        connection.close();
      }
    };
    await waitFor('the agent to long-poll replica B', async () =>
      (await waitingOnB()) >= 1 ? true : undefined,
    );

    await cluster.halt();
    await waitFor('both replicas to fail to listen again, more than once', () =>
      [a, b].every((s) => (s.controller.store.health().listen?.failedAttempts ?? 0) >= 2)
        ? true
        : undefined,
    );
    await cluster.resume();
    await waitFor('both replicas to listen again', () =>
      [a, b].every((s) => s.controller.store.health().listen?.listening === true)
        ? true
        : undefined,
    );
    // The agent is back on B's long poll (its requests were refused meanwhile).
    await waitFor('the agent to long-poll replica B again', async () =>
      (await waitingOnB()) >= 1 ? true : undefined,
    );
    const pushed = await a.controller.push(
      { text: POLICY_V1, source: 'p.yaml', rollout: { canary: 0, bakeMs: 0, maxUnavailable: 1 } },
      'test',
    );
    if (!pushed.ok) throw new Error('push refused');
    // Far within the ten-minute poll: only a NOTIFY from A can have told B.
    const [host] = await waitForConverged(b, ['r1']);
    expect(agent.engine.applies.at(-1)?.hash).toBe(host?.desiredHash);
    for (const server of [a, b]) {
      expect(server.controller.store.health().listen?.reconnects).toBeGreaterThanOrEqual(1);
    }
    const connection = connectController(b.url, b.caPem);
    try {
      // The store's state is re-read on its own schedule: on a loaded machine it can still say
      // what it saw during the failed attempts, so wait for it to read ok (a state, not a sleep).
      const text = await waitFor('replica B to report its store ok', async () => {
        const body = String(
          (await connection.request('GET', '/metrics', { token: b.metricsToken })).body,
        );
        return body.includes('egressguard_fleet_store_state{state="ok"} 1') ? body : undefined;
      });
      expect(text).toMatch(/^egressguard_fleet_store_listen_reconnects_total [1-9]\d*$/m);
    } finally {
      connection.close();
    }
  });

  it('stores and judges times on the database’s clock: a replica whose own clock is 120 s ahead sees no host silent, pauses nothing, and stores no check-in in the future', async () => {
    const store = await cluster.createDatabase();
    const stateDir = scratch.dir('skew');
    const a = await startTestServer({ store, stateDir });
    const ahead = { now: () => Date.now() + 120_000 };
    const b = await startTestServer({ store, stateDir, clock: ahead });
    servers.push(a, b);
    const { token } = await a.controller.createBootstrapToken({ ttlMs: 60_000, uses: 4 }, 'test');
    const root = scratch.dir('skew-agents');
    for (const [i, name] of ['s1', 's2', 's3', 's4'].entries()) {
      agents.push(startTestAgent({ serverUrl: (i % 2 === 0 ? a : b).url, token, name, root }));
    }
    await waitFor('four hosts', async () =>
      (await b.controller.listHosts()).length === 4 ? true : undefined,
    );
    // B pushes and both replicas judge: a wave needs its hosts baked and none silent.
    const pushed = await b.controller.push(
      { text: POLICY_V1, source: 'p.yaml', rollout: { canary: 1, maxUnavailable: 1, bakeMs: 500 } },
      'test',
    );
    if (!pushed.ok) throw new Error('push refused');
    await waitFor(
      'the rollout to finish',
      async () => {
        const view = await b.controller.rolloutView(pushed.rolloutId);
        return view.state === 'progressing' ? undefined : view;
      },
      60_000,
    );
    const view = await a.controller.rolloutView(pushed.rolloutId);
    expect({ state: view.state, pausedReason: view.pausedReason }).toEqual({
      state: 'succeeded',
      pausedReason: null,
    });
    const seenByB = await b.controller.listHosts();
    expect(seenByB.map((h) => [h.name, h.silent])).toEqual([
      ['s1', false],
      ['s2', false],
      ['s3', false],
      ['s4', false],
    ]);
    // Nothing stored ahead of the database's clock (the test's clock is this machine's too).
    const latest = Date.now() + 5_000;
    for (const host of seenByB) expect(host.lastCheckinAt).toBeLessThan(latest);
    const events = await b.controller.events({ limit: 1_000 });
    expect(events.filter((e) => e.at >= latest)).toEqual([]);
  });

  it(
    'fault injection: PostgreSQL stopped and started under two replicas (built CLI) and 50 agents, a rollout in flight: no crash, no push lost or made twice, each wave once, every host converged within two poll intervals of the recovery',
    { timeout: 300_000 },
    async () => {
      const pollSeconds = 30; // the default: two intervals are what the docs promise
      const store = await cluster.createDatabase();
      const stateDir = scratch.dir('fault');
      const replicas = [
        await startServerProcess({
          store,
          stateDir,
          port: await freePort(),
          pollIntervalSeconds: pollSeconds,
        }),
      ];
      processes.push(...replicas);
      replicas.push(
        await startServerProcess({
          store,
          stateDir,
          port: await freePort(),
          pollIntervalSeconds: pollSeconds,
        }),
      );
      processes.push(replicas[1] as ServerProcess);
      onTestFailed(() => {
        for (const [i, replica] of replicas.entries())
          console.error(`replica ${i}:\n${replica.log()}`);
      });
      const [one, two] = replicas as [ServerProcess, ServerProcess];
      const fleet = (...args: string[]) =>
        runCli(['fleet', ...args, '--server', one.url, '--state-dir', stateDir]);
      const status = async () =>
        JSON.parse((await fleet('status', '--json')).stdout) as {
          hosts: {
            name: string;
            desiredHash: string | null;
            appliedHash: string | null;
            liveHash: string | null;
            desiredPushId: string | null;
          }[];
          rollouts: { id: string; state: string; waves: { state: string; hosts: string[] }[] }[];
        };

      const tokenFile = join(stateDir, 'bootstrap.token');
      expect((await fleet('token', 'create', '--uses', '50', '--out', tokenFile)).exitCode).toBe(0);
      const token = readFileSync(tokenFile, 'utf8').trim();
      const root = scratch.dir('fault-agents');
      const names = Array.from({ length: 50 }, (_, i) => `f${String(i).padStart(2, '0')}`);
      for (const [i, name] of names.entries()) {
        agents.push(
          startTestAgent({
            serverUrl: replicas[i % 2]?.url ?? '',
            token,
            name,
            root,
            seed: i + 1,
            // What a real agent waits after the 503s of the outage: the bound is theirs to meet.
            agentBackoff: true,
          }),
        );
      }
      await waitFor(
        'fifty hosts',
        async () => ((await status()).hosts.length === 50 ? true : undefined),
        60_000,
      );

      const policy = join(scratch.dir('policy'), 'policy.yaml');
      writeFileSync(policy, POLICY_V1);
      // Every host applies slowly until the test lets it: one host of wave 1 is kept inside its
      // apply until the database is down, so the rollout is in flight then however slow this
      // machine is (the next waves could otherwise finish between two looks at the status).
      const holds = new Map(agents.map((a) => [a.name, a.engine.holdApplies()]));
      onTestFinished(() => {
        for (const release of holds.values()) release();
      });
      const first = await fleet(
        'push',
        policy,
        '--canary',
        '1',
        '--max-unavailable',
        '20',
        '--bake',
        '1s',
        '--json',
      );
      expect(first.exitCode).toBe(0);
      const { pushId, rolloutId } = JSON.parse(first.stdout) as {
        pushId: string;
        rolloutId: string;
      };
      const plan = (await status()).rollouts.find((r) => r.id === rolloutId);
      const heldHost = plan?.waves[1]?.hosts[0];
      if (heldHost === undefined) throw new Error(`no host in wave 1: ${JSON.stringify(plan)}`);
      for (const [name, release] of holds) if (name !== heldHost) release();
      await waitFor(
        'wave 1 in flight',
        async () =>
          (await status()).rollouts.find((r) => r.id === rolloutId)?.waves[1]?.state ===
          'progressing'
            ? true
            : undefined,
        120_000,
      );

      // The fault: the database stops under the rollout; the held host's apply ends meanwhile.
      await cluster.halt();
      holds.get(heldHost)?.();
      await waitFor('both replicas to see it', async () => {
        const answers = await Promise.all(replicas.map((r) => r.request('GET', '/healthz')));
        return answers.every((a) => a.status === 503) ? true : undefined;
      });
      // A push made meanwhile fails, after the command's own retries, and says how to try again.
      writeFileSync(policy, policyVariant('second'));
      const pushSecond = (...extra: string[]) =>
        fleet(
          'push',
          policy,
          '--canary',
          '0',
          '--max-unavailable',
          '50',
          '--bake',
          '0s',
          '--idempotency-key',
          'fault-push-0002',
          ...extra,
        );
      const meanwhile = await pushSecond();
      expect(meanwhile.exitCode).toBe(2);
      expect(meanwhile.stderr).toMatch(/HTTP 503/);
      expect(meanwhile.stderr).toMatch(/--idempotency-key fault-push-0002/);
      await waitFor('both replicas to have failed to listen again', async () => {
        const states = await Promise.all(replicas.map(health));
        return states.every((s) => (s.store.listen?.failedAttempts ?? 0) >= 2) ? true : undefined;
      });

      await cluster.resume();
      const recovered = Date.now();
      await waitFor(
        'the first rollout to succeed and every host to converge, within two poll intervals of the recovery',
        async () => {
          const now = await status();
          const rollout = now.rollouts.find((r) => r.id === rolloutId);
          return rollout?.state === 'succeeded' &&
            now.hosts.every(
              (h) =>
                h.desiredPushId === pushId &&
                h.appliedHash === h.desiredHash &&
                h.liveHash === h.desiredHash,
            )
            ? true
            : undefined;
        },
        2 * pollSeconds * 1000,
      );
      const convergedAfterMs = Date.now() - recovered;

      // The push the operator tried during the fault, made now, once, however often it is sent.
      const again = await pushSecond('--json');
      const twice = await pushSecond('--json');
      expect(again.exitCode).toBe(0);
      expect(twice.exitCode).toBe(0);
      const second = JSON.parse(again.stdout) as { pushId: string; rolloutId: string };
      expect(JSON.parse(twice.stdout)).toMatchObject({ ...second, replayed: true });
      await waitFor(
        'the second rollout to succeed',
        async () =>
          (await status()).rollouts.find((r) => r.id === second.rolloutId)?.state === 'succeeded'
            ? true
            : undefined,
        60_000,
      );

      const audit = JSON.parse((await fleet('audit', '--json', '--limit', '1000')).stdout) as {
        action: string;
        target: string;
      }[];
      expect(audit.filter((e) => e.action === 'policy.push').map((e) => e.target)).toEqual([
        pushId,
        second.pushId,
      ]);
      const events = JSON.parse(
        (
          await runCli([
            'fleet',
            'rollout',
            'status',
            rolloutId,
            '--json',
            '--server',
            two.url,
            '--state-dir',
            stateDir,
          ])
        ).stdout,
      ) as { waves: { state: string }[] }[];
      expect(events[0]?.waves.map((w) => w.state)).toEqual([
        'succeeded',
        'succeeded',
        'succeeded',
        'succeeded',
      ]);
      const db = await openStore(store);
      try {
        const transitions = await db.db
          .selectFrom('events')
          .select(['kind', 'message'])
          .where('rollout_id', '=', rolloutId)
          .where('kind', 'like', 'wave-%')
          .orderBy('id')
          .execute();
        expect(transitions.map((t) => `${t.kind} ${t.message.split(':')[0] ?? ''}`)).toEqual([
          'wave-started wave 0 started',
          'wave-succeeded wave 0 succeeded',
          'wave-started wave 1 started',
          'wave-succeeded wave 1 succeeded',
          'wave-started wave 2 started',
          'wave-succeeded wave 2 succeeded',
          'wave-started wave 3 started',
          'wave-succeeded wave 3 succeeded',
        ]);
        const pushes = await db.db.selectFrom('pushes').select('id').orderBy('seq').execute();
        expect(pushes.map((p) => p.id)).toEqual([pushId, second.pushId]);
      } finally {
        await db.close();
      }
      // No agent ended or threw (they run in this process: a crash would be a rejection).
      expect(agents.filter((a) => a.ended !== undefined).map((a) => [a.name, a.ended])).toEqual([]);
      for (const replica of replicas) {
        expect(replica.running()).toBe(true);
        expect(unhandled(replica.log())).toEqual([]);
      }
      console.error(
        `fault injection: 50 hosts converged ${(convergedAfterMs / 1000).toFixed(1)} s after PostgreSQL was back`,
      );
    },
  );
});

/**
 * Lines of a server's log that tell of an error nothing handled: an uncaught exception, a broken
 * pipe, an internal error. The store's own report of the fault names the error it met (`the
 * database cannot be reached: EPIPE: …`, answered 503 and checked again): that is the handling.
 */
function unhandled(log: string): string[] {
  return log
    .split('\n')
    .filter((line) => /Uncaught|unhandled|EPIPE|Internal error/i.test(line))
    .filter((line) => !/^error: store ".*": the database cannot be reached: /.test(line));
}
