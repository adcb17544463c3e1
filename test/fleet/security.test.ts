import { readFileSync, statSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createRecordingEngine, runAgent } from '../../src/agent/index.js';
import {
  connectController,
  hashPolicyBundle,
  type ControllerConnection,
  type HostView,
} from '../../src/fleet/index.js';
import type { RunningServer } from '../../src/server/index.js';
import { StateDir } from '../../src/state/index.js';
import {
  POLICY_V1,
  createScratch,
  factsFor,
  startTestAgent,
  startTestServer,
  waitFor,
  waitForConverged,
  type TestAgent,
} from './support/fleet-lab.js';

interface Enrollment {
  hostId: string;
  credential: string;
  caPem: string;
}

/** What an attacker on the network, another host, or an unauthenticated caller can do: nothing. */
describe('fleet security', () => {
  const scratch = createScratch();
  let server: RunningServer;
  let other: RunningServer | undefined;
  let api: ControllerConnection;
  const agents: TestAgent[] = [];
  let alpha: Enrollment;
  let beta: Enrollment;
  let root: string;

  beforeAll(async () => {
    server = await startTestServer({
      store: `sqlite:${join(scratch.dir('db'), 'fleet.db')}`,
      stateDir: scratch.dir('server'),
      // Silence is not what these tests look at: a loaded machine must not make a host silent.
      graceMs: 600_000,
    });
    const { token } = await server.controller.createBootstrapToken(
      { ttlMs: 60_000, uses: 2 },
      'test',
    );
    root = scratch.dir('agents');
    for (const name of ['alpha', 'beta'])
      agents.push(startTestAgent({ serverUrl: server.url, token, name, root }));
    const pushed = await server.controller.push(
      {
        text: POLICY_V1,
        source: 'policy.yaml',
        rollout: { canary: 0, bakeMs: 0, maxUnavailable: 2 },
      },
      'test',
    );
    if (!pushed.ok) throw new Error('push refused');
    await waitForConverged(server, ['alpha', 'beta']);
    const read = (name: string) =>
      JSON.parse(
        readFileSync(join(root, name, 'host', 'agent-enrollment.json'), 'utf8'),
      ) as Enrollment;
    alpha = read('alpha');
    beta = read('beta');
    api = connectController(server.url, server.caPem);
  });
  afterAll(async () => {
    api.close();
    await Promise.all(agents.map((a) => a.stop()));
    await server.close();
    await other?.close();
    scratch.cleanup();
  });

  const snapshot = async (): Promise<string> =>
    JSON.stringify({
      hosts: (await server.controller.listHosts()).map((h: HostView) => ({
        ...h,
        lastCheckinAt: 0,
        silent: false,
      })),
      audit: await server.controller.auditLog(),
      rollouts: await server.controller.listRollouts(),
    });

  it('keeps the agent credential file private (0600)', () => {
    expect(statSync(join(root, 'alpha', 'host', 'agent-enrollment.json')).mode & 0o777).toBe(0o600);
  });

  it('stores credentials and tokens hashed: no secret appears in the database files', () => {
    const dbDir = server.controller.store.description.replace(/^sqlite:/, '');
    const bytes = ['', '-wal'].map((suffix) => {
      try {
        return readFileSync(`${dbDir}${suffix}`).toString('latin1');
      } catch {
        return '';
      }
    });
    for (const secret of [alpha.credential, beta.credential].map(
      (c) => c.split('.')[2] ?? 'missing',
    )) {
      expect(secret.length).toBeGreaterThan(20);
      for (const content of bytes) expect(content.includes(secret)).toBe(false);
    }
    expect(bytes.join('').length).toBeGreaterThan(0);
  });

  it('gives a host credential its own bundle only, and no way to name another host', async () => {
    const own = await api.request('GET', '/v1/bundle', { token: alpha.credential });
    expect(own.status).toBe(200);
    expect((own.body as { hostId: string }).hostId).toBe(alpha.hostId);
    const named = await api.request('GET', `/v1/bundle?host=${beta.hostId}`, {
      token: alpha.credential,
    });
    expect(named.status).toBe(400);
    expect(named.body).toMatchObject({ error: { code: 'invalid-request' } });
  });

  it("refuses a status that names another host, and a host's status changes only its own row", async () => {
    const betaBefore = await server.controller.host('beta');
    const refused = await api.request('POST', '/v1/status', {
      token: alpha.credential,
      body: {
        agentVersion: 'x',
        desiredHash: null,
        appliedHash: null,
        liveHash: null,
        hostId: beta.hostId,
      },
    });
    expect(refused.status).toBe(400);
    const ok = await api.request('POST', '/v1/status', {
      token: alpha.credential,
      body: { agentVersion: 'spoof', desiredHash: null, appliedHash: null, liveHash: null },
    });
    expect(ok.status).toBe(200);
    const betaAfter = await server.controller.host('beta');
    expect({ ...betaAfter, lastCheckinAt: 0, silent: false }).toEqual({
      ...betaBefore,
      lastCheckinAt: 0,
      silent: false,
    });
    expect((await server.controller.host('alpha')).agentVersion).toBe('spoof');
  });

  it('refuses unauthenticated, wrongly authenticated, malformed and oversized requests with a 4xx JSON error, changing nothing', async () => {
    const before = await snapshot();
    const cases: [string, Promise<{ status: number; body: unknown }>, number, string][] = [
      ['no operator token', api.request('GET', '/v1/hosts'), 401, 'unauthenticated'],
      [
        'a host credential on an operator route',
        api.request('POST', '/v1/pushes', {
          token: alpha.credential,
          body: { policy: POLICY_V1, source: 'x' },
        }),
        401,
        'unauthenticated',
      ],
      [
        'a wrong operator token',
        api.request('POST', '/v1/hosts/beta/decommission', { token: 'ego1.not-the-token-at-all' }),
        401,
        'unauthenticated',
      ],
      ['no host credential', api.request('GET', '/v1/bundle'), 401, 'unauthenticated'],
      [
        'a forged credential',
        api.request('GET', '/v1/bundle', {
          token: `egc1.${alpha.credential.split('.')[1] ?? ''}.forged`,
        }),
        401,
        'unauthenticated',
      ],
      [
        'a bad bootstrap token',
        api.request('POST', '/v1/enroll', {
          body: {
            token: 'egb1.t0.nope.none',
            hostname: 'mallory',
            agentVersion: 'x',
            facts: factsFor('mallory'),
          },
        }),
        401,
        'unauthenticated',
      ],
      [
        'an invalid status body',
        api.request('POST', '/v1/status', {
          token: alpha.credential,
          body: { appliedHash: 'not-a-hash' },
        }),
        400,
        'invalid-request',
      ],
      [
        'a 2 MiB status',
        api.request('POST', '/v1/status', {
          token: alpha.credential,
          body: {
            agentVersion: 'x',
            desiredHash: null,
            appliedHash: null,
            liveHash: null,
            facts: 'x'.repeat(2 * 1024 * 1024),
          },
        }),
        413,
        'payload-too-large',
      ],
      [
        'an invalid policy',
        api.request('POST', '/v1/pushes', {
          token: server.operatorToken,
          body: { policy: 'apiVersion: nope\n', source: 'bad.yaml' },
        }),
        422,
        'policy-invalid',
      ],
      [
        'a 17 MiB push',
        api.request('POST', '/v1/pushes', {
          token: server.operatorToken,
          body: { policy: 'x'.repeat(17 * 1024 * 1024), source: 'big.yaml' },
        }),
        413,
        'payload-too-large',
      ],
      [
        'an unknown host',
        api.request('POST', '/v1/hosts/nobody/retry', { token: server.operatorToken }),
        404,
        'not-found',
      ],
    ];
    for (const [what, pending, status, code] of cases) {
      const answer = await pending;
      expect({
        what,
        status: answer.status,
        code: (answer.body as { error?: { code?: string } }).error?.code,
      }).toEqual({ what, status, code });
      expect((answer.body as { error: { message: string } }).error.message).toMatch(/^[A-Z]/);
    }
    expect(await snapshot()).toBe(before);
  });

  it('refuses malformed JSON and a wrong content type', async () => {
    const raw = async (body: string, type: string): Promise<number> => {
      const https = await import('node:https');
      return new Promise((resolve, reject) => {
        const request = https.request(
          `${server.url}/v1/status`,
          {
            method: 'POST',
            ca: server.caPem ?? undefined,
            headers: { 'content-type': type, authorization: `Bearer ${alpha.credential}` },
          },
          (response) => {
            response.resume();
            resolve(response.statusCode ?? 0);
          },
        );
        request.on('error', reject);
        request.end(body);
      });
    };
    expect(await raw('{"agentVersion": ', 'application/json')).toBe(400);
    expect(await raw('agentVersion=x', 'application/x-www-form-urlencoded')).toBe(415);
  });

  it('refuses an enrollment with a used-up token, and leaves no host behind', async () => {
    const { token } = await server.controller.createBootstrapToken(
      { ttlMs: 60_000, uses: 1 },
      'test',
    );
    const enroll = (name: string) =>
      api.request('POST', '/v1/enroll', {
        body: { token, hostname: name, agentVersion: 'x', facts: factsFor(name) },
      });
    expect((await enroll('gamma')).status).toBe(200);
    const again = await enroll('delta');
    expect(again.status).toBe(401);
    expect((again.body as { error: { message: string } }).error.message).toMatch(/no uses left/);
    expect((await server.controller.listHosts()).map((h) => h.name)).not.toContain('delta');
  });

  it('rotates a credential: the old one works until the new one is used, then is refused', async () => {
    const rotated = await api.request('POST', '/v1/credential/rotate', { token: beta.credential });
    const fresh = (rotated.body as { credential: string }).credential;
    expect((await api.request('GET', '/v1/bundle', { token: beta.credential })).status).toBe(200);
    expect((await api.request('GET', '/v1/bundle', { token: fresh })).status).toBe(200);
    expect((await api.request('GET', '/v1/bundle', { token: beta.credential })).status).toBe(401);
    beta = { ...beta, credential: fresh };
  });

  it('refuses a revoked credential, and audits the revocation', async () => {
    const revoked = await api.request('POST', '/v1/hosts/alpha/credentials/revoke', {
      token: server.operatorToken,
    });
    expect(revoked.status).toBe(200);
    const poll = await api.request('GET', '/v1/bundle', { token: alpha.credential });
    expect(poll.status).toBe(401);
    expect((poll.body as { error: { message: string } }).error.message).toMatch(/was revoked/);
    const report = await api.request('POST', '/v1/status', {
      token: alpha.credential,
      body: { agentVersion: 'x', desiredHash: null, appliedHash: null, liveHash: null },
    });
    expect(report.status).toBe(401);
    expect((await server.controller.auditLog()).map((e) => `${e.action} ${e.target}`)).toContain(
      'credential.revoke alpha',
    );
  });

  it('refuses to enroll with a controller whose certificate does not match the pinned CA', async () => {
    const { token } = await server.controller.createBootstrapToken(
      { ttlMs: 60_000, uses: 1 },
      'test',
    );
    const wrongPin = token.replace(/\.[0-9a-f]{64}$/, `.${'0'.repeat(64)}`);
    const tokenFile = join(scratch.dir('token'), 'wrong-pin.token');
    writeFileSync(tokenFile, wrongPin);
    const attempt = runAgent({
      serverUrl: server.url,
      tokenFile,
      stateDir: new StateDir({ root: scratch.dir('mallory') }),
      engine: createRecordingEngine({ facts: factsFor('epsilon'), hashBundle: hashPolicyBundle }),
      hostname: 'epsilon',
      agentVersion: 'test',
      signal: new AbortController().signal,
      startJitterMs: 0,
    });
    await expect(attempt).rejects.toThrow(/no certificate in its chain matches the pinned CA/);
    expect((await server.controller.listHosts()).map((h) => h.name)).not.toContain('epsilon');
  });

  it('refuses, once enrolled, a controller at the same address that another CA signed', async () => {
    other = await startTestServer({
      store: `sqlite:${join(scratch.dir('db2'), 'fleet.db')}`,
      stateDir: scratch.dir('server2'),
    });
    expect(other.caPin).not.toBe(server.caPin);
    const pinned = connectController(other.url, beta.caPem);
    try {
      await expect(pinned.request('GET', '/v1/bundle', { token: beta.credential })).rejects.toThrow(
        /Cannot reach controller .*(certificate|self.signed)/i,
      );
    } finally {
      pinned.close();
    }
  });

  it('reports to the agent a decommission as the end, not an error to retry', async () => {
    // A host of its own: the tests above took alpha's and beta's agents' credentials away.
    const { token } = await server.controller.createBootstrapToken(
      { ttlMs: 60_000, uses: 1 },
      'test',
    );
    const zeta = startTestAgent({ serverUrl: server.url, token, name: 'zeta', root });
    agents.push(zeta);
    await waitForConverged(server, ['zeta']);
    const credential = (
      JSON.parse(
        readFileSync(join(root, 'zeta', 'host', 'agent-enrollment.json'), 'utf8'),
      ) as Enrollment
    ).credential;
    await api.request('POST', '/v1/hosts/zeta/decommission', { token: server.operatorToken });
    await expect(zeta.outcome).resolves.toBe('decommissioned');
    expect((await api.request('GET', '/v1/bundle', { token: credential })).status).toBe(410);
    await waitFor('zeta gone from the fleet', async () =>
      (await server.controller.listHosts()).some((h) => h.name === 'zeta') ? undefined : true,
    );
  });

  it('stops the agent whose credential another rotation retired (it is refused: 401), instead of retrying', async () => {
    // The rotation test above used beta's credential for a new one: beta's agent holds a
    // credential that is no longer valid, and stops at its first refusal.
    await expect(agents[1]?.outcome).resolves.toBe('revoked');
    expect(agents[1]?.log.at(-1)).toMatch(/HTTP 401.*stopping/);
  });
});
