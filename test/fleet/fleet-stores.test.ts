import { join } from 'node:path';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { connectController, type EventView, type HostView } from '../../src/fleet/index.js';
import { createOperatorClient, type RunningServer } from '../../src/server/index.js';
import {
  POLICY_V1,
  condition,
  createScratch,
  policyVariant,
  startTestAgent,
  startTestServer,
  waitFor,
  waitForConverged,
  type TestAgent,
} from './support/fleet-lab.js';
import { startPostgresCluster, type PostgresCluster } from './support/postgres-cluster.js';

/** The controller and the real agent protocol against each store: SQLite and PostgreSQL. */
describe.each(['sqlite', 'postgres'] as const)('fleet on %s', (kind) => {
  const scratch = createScratch();
  let cluster: PostgresCluster | undefined;
  const running: { servers: RunningServer[]; agents: TestAgent[] } = { servers: [], agents: [] };

  beforeAll(async () => {
    if (kind === 'postgres') cluster = await startPostgresCluster();
  });
  afterEach(async () => {
    await Promise.all(running.agents.splice(0).map((a) => a.stop()));
    await Promise.all(running.servers.splice(0).map((s) => s.close()));
  });
  afterAll(async () => {
    await cluster?.stop();
    scratch.cleanup();
  });

  async function storeUrl(): Promise<string> {
    return cluster === undefined
      ? `sqlite:${join(scratch.dir('sqlite'), 'fleet.db')}`
      : cluster.createDatabase();
  }

  async function fleetOf(
    names: readonly string[],
  ): Promise<{ server: RunningServer; agents: Record<string, TestAgent>; stateDir: string }> {
    const stateDir = scratch.dir('server');
    const server = await startTestServer({ store: await storeUrl(), stateDir });
    running.servers.push(server);
    const { token } = await server.controller.createBootstrapToken(
      { ttlMs: 600_000, uses: names.length },
      'test',
    );
    const root = scratch.dir('agents');
    const agents: Record<string, TestAgent> = {};
    for (const name of names) {
      const agent = startTestAgent({ serverUrl: server.url, token, name, root });
      running.agents.push(agent);
      agents[name] = agent;
    }
    await waitFor('every agent to enroll', async () =>
      (await server.controller.listHosts()).length === names.length ? true : undefined,
    );
    return { server, agents, stateDir };
  }

  async function hostNamed(server: RunningServer, name: string): Promise<HostView> {
    return server.controller.host(name);
  }

  function positions(events: readonly EventView[], kind: string): number[] {
    return events.flatMap((e, i) => (e.kind === kind ? [i] : []));
  }

  it('rolls a push out in waves, canary first; each wave starts after the previous one baked, each transition recorded once', async () => {
    const names = ['host-a', 'host-b', 'host-c', 'host-d', 'host-e'];
    const { server } = await fleetOf(names);
    const pushed = await server.controller.push(
      {
        text: POLICY_V1,
        source: 'policy.yaml',
        rollout: { canary: 1, maxUnavailable: 2, bakeMs: 300 },
      },
      'test',
    );
    if (!pushed.ok) throw new Error('push refused');
    expect(pushed.waves).toEqual([1, 2, 2]);
    await waitFor('the rollout to succeed', async () =>
      (await server.controller.rolloutView(pushed.rolloutId)).state === 'succeeded'
        ? true
        : undefined,
    );
    const hosts = await waitForConverged(server, names);
    expect(new Set(hosts.map((h) => h.desiredPushId))).toEqual(new Set([pushed.pushId]));

    // The controller's metrics tell the same story: hosts by condition, the rollout, check-ins.
    const connection = connectController(server.url, server.caPem);
    try {
      const body = (await connection.request('GET', '/metrics', { token: server.metricsToken }))
        .body;
      const metrics = typeof body === 'string' ? body : '';
      expect(metrics).toContain('egressguard_fleet_hosts{condition="Ready",status="True"} 5');
      expect(metrics).toContain(
        `egressguard_fleet_rollout_state{rollout="${pushed.rolloutId}",state="succeeded"} 1`,
      );
      expect(metrics).toContain(
        `egressguard_fleet_rollout_waves{rollout="${pushed.rolloutId}",state="succeeded"} 3`,
      );
      expect(metrics).toMatch(/^egressguard_fleet_checkins_total [1-9]\d*$/m);
      expect(metrics).toMatch(
        /^egressguard_http_request_duration_seconds_count\{method="POST",route="\/v1\/status",status="200"\} [1-9]/m,
      );
    } finally {
      connection.close();
    }
    const events = await server.controller.events({ limit: 10_000 });
    const rolloutEvents = events
      .filter((e) => e.rolloutId === pushed.rolloutId)
      .map((e) => e.message.split(':')[0]);
    expect(rolloutEvents).toEqual([
      expect.stringMatching(/^push /),
      'wave 0 started',
      'wave 0 succeeded',
      'wave 1 started',
      'wave 1 succeeded',
      'wave 2 started',
      'wave 2 succeeded',
      'every wave judged',
    ]);
    // No host of wave N+1 was given the new hash before wave N succeeded.
    const view = await server.controller.rolloutView(pushed.rolloutId);
    const succeededAt = positions(events, 'wave-succeeded');
    for (const [index, wave] of view.waves.entries()) {
      for (const host of wave.hosts) {
        const desiredAt = events.findIndex((e) => e.kind === 'desired' && e.host === host);
        expect(desiredAt).toBeGreaterThan(-1);
        if (index > 0) expect(desiredAt).toBeGreaterThan(succeededAt[index - 1] ?? Infinity);
        expect(desiredAt).toBeLessThan(succeededAt[index] ?? -1);
      }
    }
  });

  it('retries a host whose apply fails, forever, Degraded not Stalled; the others stay Ready; a fixed policy converges it with no manual step', async () => {
    const names = ['host-a', 'host-b', 'host-c'];
    const { server, agents } = await fleetOf(names);
    agents['host-b']?.engine.failApplies(
      'Cannot add ip rule: priority 5210 is taken by another rule on this host',
      'steering-priority-5210',
    );
    const bad = await server.controller.push(
      {
        text: policyVariant('steering-priority-5210'),
        source: 'policy.yaml',
        rollout: { canary: 0, maxUnavailable: 3, bakeMs: 0, maxFailures: 1 },
      },
      'test',
    );
    if (!bad.ok) throw new Error('push refused');
    await waitForConverged(server, ['host-a', 'host-c']);
    const degraded = await waitFor('host-b to fail three attempts', async () => {
      const host = await hostNamed(server, 'host-b');
      return (host.failures?.count ?? 0) >= 3 ? host : undefined;
    });
    expect(condition(degraded, 'Degraded')).toEqual({ status: 'True', reason: 'ApplyFailed' });
    expect(condition(degraded, 'Stalled').status).toBe('False');
    expect(condition(degraded, 'Ready').status).toBe('False');
    expect(degraded.conditions.find((c) => c.type === 'Degraded')?.message).toMatch(
      /priority 5210 is taken/,
    );
    // Still retrying: the attempt count keeps growing (there is no terminal state to reach).
    const before = degraded.failures?.count ?? 0;
    await waitFor('another attempt', async () =>
      ((await hostNamed(server, 'host-b')).failures?.count ?? 0) > before ? true : undefined,
    );
    for (const name of ['host-a', 'host-c'])
      expect(condition(await hostNamed(server, name), 'Ready').status).toBe('True');

    const fixed = await server.controller.push(
      {
        text: policyVariant('steering-priority-5300'),
        source: 'policy.yaml',
        rollout: { canary: 0, maxUnavailable: 3, bakeMs: 0 },
      },
      'test',
    );
    if (!fixed.ok) throw new Error('push refused');
    const converged = await waitForConverged(server, names);
    const b = converged.find((h) => h.name === 'host-b');
    expect(b?.desiredPushId).toBe(fixed.pushId);
    expect(condition(b as HostView, 'Ready').status).toBe('True');
    expect(condition(b as HostView, 'Degraded').status).toBe('False');
    expect((await server.controller.auditLog()).map((a) => a.action)).not.toContain('host.retry');
  });

  it('leaves a host Stalled with a reason when the bundle can never be valid there, pauses the rollout, and a fixed push re-arms it', async () => {
    const names = ['host-a', 'host-b'];
    const { server, agents } = await fleetOf(names);
    agents['host-b']?.engine.rejectBundlesContaining(
      'wg9',
      'class "vpn" names interface "wg9", which host-b lacks',
    );
    const bad = await server.controller.push(
      {
        text: policyVariant('interface wg9'),
        source: 'policy.yaml',
        rollout: { canary: 0, maxUnavailable: 2, bakeMs: 0 },
      },
      'test',
    );
    if (!bad.ok) throw new Error('push refused');
    const stalled = await waitFor('host-b to stall', async () => {
      const host = await hostNamed(server, 'host-b');
      return condition(host, 'Stalled').status === 'True' ? host : undefined;
    });
    expect(condition(stalled, 'Stalled').reason).toBe('BundleInvalidForHost');
    expect(stalled.conditions.find((c) => c.type === 'Stalled')?.message).toMatch(/lacks/);
    await waitFor('the rollout to pause', async () =>
      (await server.controller.rolloutView(bad.rolloutId)).state === 'paused' ? true : undefined,
    );

    const fixed = await server.controller.push(
      {
        text: policyVariant('interface wg0'),
        source: 'policy.yaml',
        rollout: { canary: 0, maxUnavailable: 2, bakeMs: 0 },
      },
      'test',
    );
    if (!fixed.ok) throw new Error('push refused');
    const hosts = await waitForConverged(server, names);
    expect(
      hosts.every(
        (h) =>
          condition(h, 'Stalled').status === 'False' && condition(h, 'Ready').status === 'True',
      ),
    ).toBe(true);
    expect((await server.controller.rolloutView(bad.rolloutId)).state).toBe('superseded');
  });

  it('pauses a rollout when its canary fails, holds the next wave back, and resume continues it', async () => {
    const names = ['host-a', 'host-b', 'host-c'];
    const { server, agents, stateDir } = await fleetOf(names);
    agents['host-a']?.engine.failApplies('nft exited with 1: Error: Could not process rule');
    const pushed = await server.controller.push(
      {
        text: POLICY_V1,
        source: 'policy.yaml',
        rollout: { canary: 1, maxUnavailable: 2, bakeMs: 0 },
      },
      'test',
    );
    if (!pushed.ok) throw new Error('push refused');
    const paused = await waitFor('the rollout to pause', async () => {
      const view = await server.controller.rolloutView(pushed.rolloutId);
      return view.state === 'paused' ? view : undefined;
    });
    expect(paused.pausedReason).toMatch(/wave 0: 1 of 1 hosts failing/);
    for (const name of ['host-b', 'host-c'])
      expect((await hostNamed(server, name)).desiredHash).toBeNull();

    const operator = createOperatorClient({ server: server.url, stateDir });
    try {
      await operator.resumeRollout('latest');
    } finally {
      operator.close();
    }
    await waitForConverged(server, ['host-b', 'host-c']);
    await waitFor('the rollout to succeed', async () =>
      (await server.controller.rolloutView(pushed.rolloutId)).state === 'succeeded'
        ? true
        : undefined,
    );
    const a = await hostNamed(server, 'host-a');
    expect(condition(a, 'Degraded').reason).toBe('ApplyFailed');
    const kinds = (await server.controller.events({ rolloutId: pushed.rolloutId })).map(
      (e) => e.kind,
    );
    expect(kinds).toEqual([
      'rollout-created',
      'wave-started',
      'wave-paused',
      'wave-accepted',
      'wave-started',
      'wave-succeeded',
      'rollout-succeeded',
    ]);
    expect((await server.controller.auditLog()).map((e) => e.action)).toContain('rollout.resume');
  });

  it(
    'carries out retry, force, suspend, resume, rollback and decommission, each in the audit log',
    { timeout: 120_000 },
    async () => {
      const names = ['host-a', 'host-b'];
      const { server, agents, stateDir } = await fleetOf(names);
      const operator = createOperatorClient({ server: server.url, stateDir });
      try {
        const first = await operator.push({
          policy: POLICY_V1,
          source: 'v1.yaml',
          rollout: { canary: 0, bakeMs: 0, maxUnavailable: 2 },
        });
        const v1 = await waitForConverged(server, names);
        const hashV1 = v1[0]?.desiredHash;

        // force: applied again although nothing changed
        const applies = agents['host-a']?.engine.applies.length ?? 0;
        await operator.steerHost('force', 'host-a');
        await waitFor('a forced apply', () =>
          (agents['host-a']?.engine.applies.length ?? 0) > applies ? true : undefined,
        );

        // retry: a failing host is tried again at once, attempt numbering restarts
        agents['host-b']?.engine.failApplies('busy', 'v2');
        await operator.push({
          policy: policyVariant('v2'),
          source: 'v2.yaml',
          rollout: { canary: 0, bakeMs: 0, maxUnavailable: 2, maxFailures: 1 },
        });
        await waitFor('host-b to fail twice', async () =>
          ((await hostNamed(server, 'host-b')).failures?.count ?? 0) >= 2 ? true : undefined,
        );
        await operator.steerHost('retry', 'host-b');
        // The retry re-armed the budget: the next attempt is number 1 again, not 3 or later.
        await waitFor('an attempt numbered 1 after the retry', async () => {
          const events = await server.controller.events({ hostName: 'host-b' });
          const retried = events.findIndex((e) => e.kind === 'host.retry');
          return retried >= 0 &&
            events
              .slice(retried)
              .some((e) => e.kind === 'apply-failed' && /^attempt 1 /.test(e.message))
            ? true
            : undefined;
        });
        agents['host-b']?.engine.failApplies(undefined);
        const v2 = await waitForConverged(server, names);
        const hashesV2 = Object.fromEntries(v2.map((h) => [h.name, h.desiredHash]));

        // suspend: a new push is not applied until resume
        await operator.steerHost('suspend', 'host-b');
        await operator.push({
          policy: policyVariant('v3'),
          source: 'v3.yaml',
          rollout: { canary: 0, bakeMs: 0, maxUnavailable: 2, maxFailures: 1 },
        });
        await waitForConverged(server, ['host-a']);
        const suspended = await hostNamed(server, 'host-b');
        expect(suspended.suspended).toBe(true);
        expect(suspended.appliedHash).not.toBe(suspended.desiredHash);
        expect(condition(suspended, 'Progressing').reason).toBe('Suspended');
        await operator.steerHost('resume', 'host-b');
        await waitForConverged(server, names);

        // rollback: back to the policy before the current one (v2), in one wave
        const rolled = await operator.rollback({});
        expect(rolled.restoredPushId).not.toBe(first.pushId);
        const back = await waitFor('the rollback to converge', async () => {
          const hosts = await waitForConverged(server, names);
          return hosts.every((h) => h.desiredHash === hashesV2[h.name]) ? hosts : undefined;
        });
        expect(back.map((h) => h.desiredHash)).not.toContain(hashV1);

        // decommission: the agent is told to stop, its credential no longer works
        await operator.steerHost('decommission', 'host-b');
        await expect(agents['host-b']?.outcome).resolves.toBe('decommissioned');
        expect((await server.controller.listHosts()).map((h) => h.name)).toEqual(['host-a']);

        const audit = (await server.controller.auditLog()).map((e) => `${e.action} ${e.target}`);
        for (const entry of [
          'host.force host-a',
          'host.retry host-b',
          'host.suspend host-b',
          'host.resume host-b',
          'host.decommission host-b',
        ]) {
          expect(audit).toContain(entry);
        }
        expect(audit.filter((a) => a.startsWith('policy.push'))).toHaveLength(3);
        expect(audit.filter((a) => a.startsWith('policy.rollback'))).toHaveLength(1);
      } finally {
        operator.close();
      }
    },
  );

  it('marks a silent host once its grace is over, and reports drift that the agent repaired', async () => {
    const names = ['host-a', 'host-b'];
    const { server, agents } = await fleetOf(names);
    const pushed = await server.controller.push(
      {
        text: POLICY_V1,
        source: 'policy.yaml',
        rollout: { canary: 0, bakeMs: 0, maxUnavailable: 2 },
      },
      'test',
    );
    if (!pushed.ok) throw new Error('push refused');
    const [a] = await waitForConverged(server, names);

    agents['host-a']?.engine.setLiveHash(null); // the table was deleted behind the agent's back
    await waitFor('the repaired drift to be reported', async () => {
      const events = await server.controller.events({ hostName: 'host-a' });
      return events.some((e) => e.kind === 'drift-repaired') ? true : undefined;
    });
    expect((await hostNamed(server, 'host-a')).liveHash).toBe(a?.desiredHash);

    await agents['host-b']?.stop();
    const silent = await waitFor(
      'host-b to be marked silent',
      async () => {
        const host = await hostNamed(server, 'host-b');
        return host.silent ? host : undefined;
      },
      20_000,
    );
    expect(condition(silent, 'Ready')).toEqual({ status: 'Unknown', reason: 'AgentSilent' });
    expect((await hostNamed(server, 'host-a')).silent).toBe(false);
  });
});
