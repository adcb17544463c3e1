import { chmodSync, closeSync, openSync, statSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, afterEach, describe, expect, it } from 'vitest';
import { runAgent, createBundleHasher, createRecordingEngine } from '../../src/agent/index.js';
import {
  MAX_HOST_LABELS,
  connectController,
  createHostIrBinder,
  type BundleBinder,
  type ControllerAnswer,
  type HostBundle,
} from '../../src/fleet/index.js';
import type { RunningServer, ServerOptions } from '../../src/server/index.js';
import { StateDir } from '../../src/state/index.js';
import {
  POLICY_V1,
  condition,
  createScratch,
  factsFor,
  startTestAgent,
  startTestServer,
  waitFor,
  type TestAgent,
} from './support/fleet-lab.js';

/** What an enrolled host, or a stray client, can no longer do to the controller or other hosts. */
describe('fleet hardening: what one host or a stray client can do', () => {
  const scratch = createScratch();
  const servers: RunningServer[] = [];
  const agents: TestAgent[] = [];
  afterEach(async () => {
    await Promise.all(agents.splice(0).map((a) => a.stop()));
    await Promise.all(servers.splice(0).map((s) => s.close()));
  });
  afterAll(() => {
    scratch.cleanup();
  });

  async function server(options: Partial<ServerOptions> = {}): Promise<RunningServer> {
    const started = await startTestServer({
      store: `sqlite:${join(scratch.dir('db'), 'fleet.db')}`,
      stateDir: scratch.dir('server'),
      ...options,
    });
    servers.push(started);
    return started;
  }

  async function call(
    target: RunningServer,
    method: 'GET' | 'POST',
    path: string,
    options: { token?: string; body?: unknown } = {},
  ): Promise<ControllerAnswer> {
    const connection = connectController(target.url, target.caPem);
    try {
      return await connection.request(method, path, options);
    } finally {
      connection.close();
    }
  }

  async function token(target: RunningServer, uses: number, labels = {}): Promise<string> {
    const answer = await call(target, 'POST', '/v1/tokens', {
      token: target.operatorToken,
      body: { uses, labels },
    });
    expect(answer.status).toBe(200);
    return (answer.body as { token: string }).token;
  }

  /** Enrolls through the API with these labels in the host's facts; the credential. */
  async function enroll(
    target: RunningServer,
    bootstrap: string,
    name: string,
    labels: Record<string, string>,
  ): Promise<ControllerAnswer> {
    return call(target, 'POST', '/v1/enroll', {
      body: {
        token: bootstrap,
        hostname: name,
        agentVersion: 'test',
        facts: { ...factsFor(name), labels },
      },
    });
  }

  const credentialOf = (answer: ControllerAnswer): string =>
    (answer.body as { credential: string }).credential;

  const manyLabels = (n: number, prefix = 'k'): Record<string, string> =>
    Object.fromEntries(Array.from({ length: n }, (_, i) => [`${prefix}${i}`, 'v']));

  it('gives each host a bundle bound to its own labels, even when hosts share a desired hash', async () => {
    const fleet = await server({ binder: createHostIrBinder() });
    const bootstrap = await token(fleet, 2);
    const a = credentialOf(await enroll(fleet, bootstrap, 'a', { role: 'vpn-gateway', team: 'a' }));
    const b = credentialOf(await enroll(fleet, bootstrap, 'b', { role: 'vpn-gateway', team: 'b' }));
    const pushed = await fleet.controller.push(
      { text: POLICY_V1, source: 'p.yaml', rollout: { canary: 0, maxUnavailable: 2, bakeMs: 0 } },
      'test',
    );
    if (!pushed.ok) throw new Error('push refused');
    const hosts = await fleet.controller.listHosts();
    // The labels select no class here: both hosts have the same desired hash.
    expect(new Set(hosts.map((h) => h.desiredHash)).size).toBe(1);
    for (const [credential, team] of [
      [a, 'a'],
      [b, 'b'],
    ] as const) {
      const answer = await call(fleet, 'GET', '/v1/bundle', { token: credential });
      expect(answer.status).toBe(200);
      const bundle = (answer.body as { bundle: HostBundle }).bundle;
      expect(bundle.format === 'egressguard/bundle/host-ir-v1' ? bundle.labels : null).toEqual({
        role: 'vpn-gateway',
        team,
      });
    }
  });

  it(`caps a host's labels at ${MAX_HOST_LABELS}: when a token is minted, at enrollment (its own and its token's) and when it reports facts`, async () => {
    const fleet = await server();
    const mint = await call(fleet, 'POST', '/v1/tokens', {
      token: fleet.operatorToken,
      body: { uses: 1, labels: manyLabels(65) },
    });
    expect(mint.status).toBe(400);
    expect(mint.body).toMatchObject({ error: { message: /at most 64 labels/ } });

    const bootstrap = await token(fleet, 3, manyLabels(40, 'token-'));
    const own = await enroll(fleet, bootstrap, 'own', manyLabels(65));
    expect(own.status).toBe(400);
    expect(own.body).toMatchObject({
      error: { message: /labels of host "own".*: 105 labels, at most 64/ },
    });
    const merged = await enroll(fleet, bootstrap, 'merged', manyLabels(30));
    expect(merged.status).toBe(400);
    expect(merged.body).toMatchObject({ error: { message: /70 labels, at most 64/ } });
    expect(await fleet.controller.listHosts()).toEqual([]);

    const fine = credentialOf(await enroll(fleet, bootstrap, 'fine', manyLabels(20)));
    const report = await call(fleet, 'POST', '/v1/status', {
      token: fine,
      body: {
        agentVersion: 'test',
        desiredHash: null,
        appliedHash: null,
        liveHash: null,
        facts: { ...factsFor('fine'), labels: manyLabels(30, 'more-') },
      },
    });
    expect(report.status).toBe(400);
    expect(report.body).toMatchObject({ error: { message: /90 labels, at most 64/ } });
    expect(Object.keys((await fleet.controller.host('fine')).labels)).toHaveLength(60);
  });

  it('shows a host Degraded with the reason when its agent refuses the bundle, and the rollout pauses instead of waiting for ever', async () => {
    // A controller that sends a bundle the agent's checks refuse (more labels than a bundle may
    // carry), as the old shared cache did with one host's 65 labels.
    const base = createHostIrBinder();
    const binder: BundleBinder = {
      preparePolicy: (push) => base.preparePolicy(push),
      bindHost: (prepared, target) => {
        const bound = base.bindHost(prepared as never, target);
        if (!bound.ok || bound.bundle.format !== 'egressguard/bundle/host-ir-v1') return bound;
        return { ...bound, bundle: { ...bound.bundle, labels: manyLabels(70) } };
      },
    };
    const fleet = await server({ binder });
    const { token: bootstrap } = await fleet.controller.createBootstrapToken(
      { ttlMs: 60_000, uses: 1 },
      'test',
    );
    const agent = startTestAgent({
      serverUrl: fleet.url,
      token: bootstrap,
      name: 'r1',
      root: scratch.dir('agent'),
    });
    agents.push(agent);
    await waitFor('the host', async () =>
      (await fleet.controller.listHosts()).length === 1 ? true : undefined,
    );
    const pushed = await fleet.controller.push(
      { text: POLICY_V1, source: 'p.yaml', rollout: { canary: 1, maxUnavailable: 1, bakeMs: 0 } },
      'test',
    );
    if (!pushed.ok) throw new Error('push refused');
    const host = await waitFor('the host to be Degraded', async () => {
      const view = await fleet.controller.host('r1');
      return condition(view, 'Degraded').status === 'True' ? view : undefined;
    });
    expect(host.conditions.find((c) => c.type === 'Degraded')).toMatchObject({
      reason: 'BundleRefused',
      message: expect.stringMatching(/refused the bundle .*labels: at most 64 labels/) as string,
    });
    expect(agent.engine.applies).toEqual([]);
    await waitFor('the rollout to pause', async () =>
      (await fleet.controller.rolloutView(pushed.rolloutId)).state === 'paused' ? true : undefined,
    );
  });

  it('stops an agent whose credential was revoked after the first refusal, instead of asking again every second', async () => {
    const fleet = await server();
    const { token: bootstrap } = await fleet.controller.createBootstrapToken(
      { ttlMs: 60_000, uses: 1 },
      'test',
    );
    const agent = startTestAgent({
      serverUrl: fleet.url,
      token: bootstrap,
      name: 'gone',
      root: scratch.dir('agent'),
    });
    agents.push(agent);
    await waitFor('the agent to enroll', async () =>
      (await fleet.controller.listHosts()).length === 1 ? true : undefined,
    );
    await fleet.controller.revokeCredentials('gone', 'test');
    expect(await agent.outcome).toBe('revoked');
    expect(agent.log.at(-1)).toMatch(/HTTP 401.*no longer valid \(revoked\); stopping/);
    const metrics = String(
      (await call(fleet, 'GET', '/metrics', { token: fleet.metricsToken })).body,
    );
    const refusals = [
      ...metrics.matchAll(/_count\{method="\w+",route="[^"]+",status="401"\} (\d+)/g),
    ];
    expect(refusals.reduce((sum, m) => sum + Number(m[1]), 0)).toBe(1);
  });

  it('backs off on every refusal, never starting over while the controller refuses, and waits at least its Retry-After and at most a poll interval more', async () => {
    // One request, then a new one every 20 s: the agent's second request is refused (429).
    const fleet = await server({ hostRateLimit: { burst: 1, perSecond: 0.05 } });
    const { token: bootstrap } = await fleet.controller.createBootstrapToken(
      { ttlMs: 60_000, uses: 1 },
      'test',
    );
    const root = scratch.dir('agent');
    const tokenFile = join(root, 'bootstrap.token');
    writeFileSync(tokenFile, bootstrap);
    const stop = new AbortController();
    const waits: number[] = [];
    // The agent's own clock: each wait is recorded and ends at once (no test waits 20 s).
    const clock = {
      now: () => Date.now(),
      sleep: (ms: number) => {
        if (ms > 0) waits.push(ms);
        if (waits.length >= 8) stop.abort();
        return Promise.resolve();
      },
    };
    const end = await runAgent({
      serverUrl: fleet.url,
      tokenFile,
      stateDir: new StateDir({ root: join(root, 'host') }),
      engine: createRecordingEngine({ facts: factsFor('busy'), hashBundle: createBundleHasher() }),
      hostname: 'busy',
      agentVersion: 'test',
      signal: stop.signal,
      clock,
      random: () => 0.999,
      startJitterMs: 0,
      pollJitterMs: 0,
      connectBackoff: { baseMs: 1_000, capMs: 60_000 },
    });
    expect(end).toBe('stopped');
    expect(waits).toHaveLength(8);
    // Retry-After (19–20 s) plus a backoff that doubles: 1, 2, 4, 8, 16 s, then no more than a
    // poll interval (30 s before the controller said otherwise): a controller that answers is
    // asked again no less often than it would be polled, so it hears from every host soon once
    // it works again.
    for (const [i, wait] of waits.entries()) {
      const backoff = Math.min(30_000, 1_000 * 2 ** i);
      expect(wait).toBeGreaterThanOrEqual(19_000 + backoff - 1);
      expect(wait).toBeLessThanOrEqual(20_000 + backoff);
    }
  });

  it('keeps at most the current and one pending credential: 20 rotations with one credential leave two valid, and using the newest retires the other', async () => {
    const fleet = await server({ hostRateLimit: { burst: 1_000, perSecond: 100 } });
    const first = credentialOf(
      await enroll(fleet, await token(fleet, 1), 'rot', { role: 'vpn-gateway' }),
    );
    const rotated: string[] = [];
    for (let i = 0; i < 20; i += 1) {
      const answer = await call(fleet, 'POST', '/v1/credential/rotate', { token: first });
      expect(answer.status).toBe(200);
      rotated.push(credentialOf(answer));
    }
    const works = async (credential: string): Promise<boolean> =>
      (await call(fleet, 'GET', '/v1/bundle?wait=0', { token: credential })).status !== 401;
    expect(await works(first)).toBe(true);
    // Checked before the newest is used (its first use retires the one it replaced).
    const older = await Promise.all(rotated.slice(0, -1).map(works));
    expect(older.filter(Boolean)).toEqual([]);
    expect(await works(rotated.at(-1) ?? '')).toBe(true);
    expect(await works(first)).toBe(false);
  });

  it('lets an agent whose enrollment answer was lost enroll again with the same token, until its credential is used', async () => {
    const fleet = await server();
    const bootstrap = await token(fleet, 1);
    const lost = credentialOf(await enroll(fleet, bootstrap, 'late', { role: 'vpn-gateway' }));
    const again = await enroll(fleet, bootstrap, 'late', { role: 'vpn-gateway' });
    expect(again.status).toBe(200);
    const kept = credentialOf(again);
    expect((await call(fleet, 'GET', '/v1/bundle?wait=0', { token: lost })).status).toBe(401);
    expect((await call(fleet, 'GET', '/v1/bundle?wait=0', { token: kept })).status).not.toBe(401);
    expect((await fleet.controller.listHosts()).map((h) => h.name)).toEqual(['late']);
    // Once its credential was used, the name is taken, by any token.
    const taken = await enroll(fleet, bootstrap, 'late', { role: 'vpn-gateway' });
    expect(taken.status).toBe(409);
    const other = await enroll(fleet, await token(fleet, 1), 'late', { role: 'vpn-gateway' });
    expect(other.status).toBe(409);
  });

  it('rate-limits one host credential, refuses oversized reports, and counts drift repairs only within sane bounds', async () => {
    const fleet = await server({ hostRateLimit: { burst: 10, perSecond: 0.001 } });
    const bootstrap = await token(fleet, 2);
    const flood = credentialOf(await enroll(fleet, bootstrap, 'flood', { role: 'vpn-gateway' }));
    const big = credentialOf(await enroll(fleet, bootstrap, 'big', { role: 'vpn-gateway' }));
    const report = (extra: object) => ({
      agentVersion: 'test',
      desiredHash: null,
      appliedHash: null,
      liveHash: null,
      ...extra,
    });

    const counters = Object.fromEntries(Array.from({ length: 40_000 }, (_, i) => [`c${i}`, i]));
    const oversized = await call(fleet, 'POST', '/v1/status', {
      token: big,
      body: report({ counters }),
    });
    expect(oversized.status).toBe(400);
    expect(oversized.body).toMatchObject({ error: { message: /at most 4096 counters/ } });

    const started = Date.now();
    const answers = await Promise.all(
      Array.from({ length: 200 }, () =>
        call(fleet, 'POST', '/v1/status', {
          token: flood,
          body: report({
            drift: { detectedHash: null, repaired: true, message: 'x', repairs: 100_000 },
          }),
        }),
      ),
    );
    const elapsedSeconds = Math.ceil((Date.now() - started) / 1000);
    const statuses = answers.map((a) => a.status);
    expect(statuses.filter((s) => s === 200)).toHaveLength(10);
    expect(statuses.filter((s) => s === 429)).toHaveLength(190);
    expect(answers.find((a) => a.status === 429)?.retryAfterSeconds).toBeGreaterThan(0);
    const events = await fleet.controller.events({ hostName: 'flood', limit: 1_000 });
    expect(events.filter((e) => e.kind === 'drift-repaired')).toHaveLength(10);
    // 100,000 claimed by each: at most one a second since the previous check-in is counted.
    const metrics = String(
      (await call(fleet, 'GET', '/metrics', { token: fleet.metricsToken })).body,
    );
    const total = Number(/^egressguard_fleet_drift_repairs_total (\d+)$/m.exec(metrics)?.[1]);
    expect(total).toBeGreaterThanOrEqual(10);
    expect(total).toBeLessThanOrEqual(10 * (1 + elapsedSeconds));
  });

  it('serves /metrics only with the scrape credential (or the operator token), never to a host or a stranger', async () => {
    const fleet = await server();
    const host = credentialOf(await enroll(fleet, await token(fleet, 1), 'm1', { role: 'x' }));
    const status = async (credential?: string): Promise<number> =>
      (await call(fleet, 'GET', '/metrics', credential === undefined ? {} : { token: credential }))
        .status;
    expect(await status()).toBe(401);
    expect(await status(host)).toBe(401);
    expect(await status('egm1.guessed-but-wrong-token')).toBe(401);
    expect(await status(fleet.metricsToken)).toBe(200);
    expect(await status(fleet.operatorToken)).toBe(200);
    const text = String((await call(fleet, 'GET', '/metrics', { token: fleet.metricsToken })).body);
    expect(text).toContain('egressguard_fleet_host_condition{host="m1"');
  });

  it('creates fleet.db and its -wal and -shm 0600, and takes an older 0644 database down to 0600', async () => {
    const dir = scratch.dir('modes');
    const fleet = await server({ store: `sqlite:${join(dir, 'fleet.db')}` });
    await fleet.controller.createBootstrapToken({ ttlMs: 60_000, uses: 1 }, 'test');
    const modes = () =>
      ['fleet.db', 'fleet.db-wal', 'fleet.db-shm'].map((f) => [
        f,
        (statSync(join(dir, f)).mode & 0o777).toString(8),
      ]);
    expect(modes()).toEqual([
      ['fleet.db', '600'],
      ['fleet.db-wal', '600'],
      ['fleet.db-shm', '600'],
    ]);
    await fleet.close();
    servers.splice(servers.indexOf(fleet), 1);

    const older = scratch.dir('older');
    closeSync(openSync(join(older, 'fleet.db'), 'w'));
    chmodSync(join(older, 'fleet.db'), 0o644);
    await server({ store: `sqlite:${join(older, 'fleet.db')}` });
    expect((statSync(join(older, 'fleet.db')).mode & 0o777).toString(8)).toBe('600');
  });

  it('refuses at push the options only a host sets (pfctl, pfConf, pfTokenFile) and options no backend has, recording nothing', async () => {
    const fleet = await server();
    for (const [options, message] of [
      [{ pfctl: '/tmp/not-pfctl' }, /"pfctl" \(--pfctl\): only a host sets it/],
      [{ pfConf: '/etc/shadow' }, /"pfConf" \(--pf-conf\): only a host sets it/],
      [{ pfTokenFile: '/etc/passwd' }, /"pfTokenFile" \(--pf-token-file\): only a host sets it/],
      [{ notAnOption: '1' }, /"notAnOption": no backend has it/],
    ] as const) {
      const answer = await call(fleet, 'POST', '/v1/pushes', {
        token: fleet.operatorToken,
        body: { policy: POLICY_V1, source: 'p.yaml', options },
      });
      expect(answer.status).toBe(400);
      expect(answer.body).toMatchObject({ error: { code: 'invalid-request', message } });
    }
    expect(await fleet.controller.listRollouts()).toEqual([]);
    expect((await fleet.controller.auditLog()).filter((e) => e.action === 'policy.push')).toEqual(
      [],
    );
  });
});
