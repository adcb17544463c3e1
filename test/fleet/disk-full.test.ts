import { openSync, closeSync, rmSync, writeSync } from 'node:fs';
import { join } from 'node:path';
import { execa } from 'execa';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  connectController,
  type ControllerAnswer,
  type StoreHealth,
} from '../../src/fleet/index.js';
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

/**
 * The SQLite store on a disk that fills up, for real: a small tmpfs mounted for the test (never
 * the machine's disk), filled to the last byte, then emptied again.
 */
describe('the controller on SQLite when its disk is full', () => {
  const scratch = createScratch();
  let disk: string;
  let server: RunningServer;
  const agents: TestAgent[] = [];
  const log: string[] = [];

  beforeAll(async () => {
    disk = scratch.dir('disk');
    await execa('mount', ['-t', 'tmpfs', '-o', 'size=4m,mode=0700', 'egressguard-test', disk]);
    server = await startTestServer({
      store: `sqlite:${join(disk, 'fleet.db')}`,
      stateDir: scratch.dir('server'),
      log: (line) => log.push(line),
    });
  });
  afterAll(async () => {
    await Promise.all(agents.map((a) => a.stop()));
    await server.close();
    await execa('umount', ['-l', disk], { reject: false });
    scratch.cleanup();
  });

  async function call(
    method: 'GET' | 'POST',
    path: string,
    body?: unknown,
  ): Promise<ControllerAnswer> {
    const connection = connectController(server.url, server.caPem);
    try {
      return await connection.request(method, path, {
        token: server.operatorToken,
        ...(body === undefined ? {} : { body }),
      });
    } finally {
      connection.close();
    }
  }

  /** Writes until the disk refuses (ENOSPC); returns the file to remove to free it. */
  function fillDisk(): string {
    const filler = join(disk, 'filler');
    const fd = openSync(filler, 'w');
    const chunk = Buffer.alloc(16 * 1024, 1);
    try {
      for (;;) writeSync(fd, chunk);
    } catch (error) {
      if ((error as NodeJS.ErrnoException).code !== 'ENOSPC') throw error;
    } finally {
      closeSync(fd);
    }
    // The last partial page too: a byte at a time until nothing fits.
    const tail = openSync(filler, 'a');
    try {
      for (;;) writeSync(tail, Buffer.alloc(1, 1));
    } catch (error) {
      if ((error as NodeJS.ErrnoException).code !== 'ENOSPC') throw error;
    } finally {
      closeSync(tail);
    }
    return filler;
  }

  it('answers 503 naming ENOSPC, says so in the log and /healthz, keeps reads going, never makes a retried push twice, and recovers when space returns', async () => {
    const { token } = await server.controller.createBootstrapToken(
      { ttlMs: 60_000, uses: 3 },
      'test',
    );
    const root = scratch.dir('agents');
    const names = ['d1', 'd2', 'd3'];
    for (const name of names)
      agents.push(startTestAgent({ serverUrl: server.url, token, name, root }));
    await waitFor('three hosts', async () =>
      (await server.controller.listHosts()).length === 3 ? true : undefined,
    );
    const first = await call('POST', '/v1/pushes', {
      policy: POLICY_V1,
      source: 'p.yaml',
      rollout: { canary: 0, maxUnavailable: 3, bakeMs: 0 },
    });
    expect(first.status).toBe(201);
    await waitForConverged(server, names);
    // Each agent's own log says what it applied.
    for (const agent of agents) {
      expect(agent.log).toContainEqual(
        expect.stringMatching(/^applied [0-9a-f]{12} \(attempt 1, \d+ ms\)$/),
      );
    }

    const filler = fillDisk();
    // A push of a megabyte: its commit needs new pages, which a full disk refuses.
    const second = {
      policy: policyVariant(`padding ${'x'.repeat(1024 * 1024)}`),
      source: 'p.yaml',
      rollout: { canary: 0, maxUnavailable: 3, bakeMs: 0 },
      idempotencyKey: 'disk-full-push-1',
    };
    for (let attempt = 0; attempt < 3; attempt += 1) {
      const refused = await call('POST', '/v1/pushes', second);
      expect(refused.status).toBe(503);
      expect(refused.retryAfterSeconds).toBeGreaterThan(0);
      expect(refused.body).toMatchObject({
        error: { code: 'store-full', message: expect.stringMatching(/ENOSPC/) as string },
      });
    }
    const healthz = await call('GET', '/healthz');
    expect(healthz.status).toBe(503);
    expect((healthz.body as { store: StoreHealth }).store).toMatchObject({
      state: 'disk-full',
      message: expect.stringMatching(/the disk is full \(ENOSPC\)/) as string,
    });
    expect(log.filter((l) => /ENOSPC/.test(l))).toHaveLength(1);
    expect(log.join('\n')).not.toMatch(/cannot rollback/);
    // Reads go on while writes cannot.
    const hosts = await call('GET', '/v1/hosts');
    expect(hosts.status).toBe(200);

    rmSync(filler);
    await waitFor('the store to work again', async () =>
      (await call('GET', '/healthz')).status === 200 ? true : undefined,
    );
    expect(log.some((l) => /works again after/.test(l))).toBe(true);
    const taken = await call('POST', '/v1/pushes', second);
    const retaken = await call('POST', '/v1/pushes', second);
    expect([201, 200]).toContain(taken.status);
    expect(retaken.status).toBe(200);
    const pushId = (taken.body as { pushId: string }).pushId;
    expect(retaken.body).toMatchObject({ pushId, replayed: true });
    const pushes = await server.controller.store.db
      .selectFrom('pushes')
      .select(['id', 'idempotency_key'])
      .orderBy('seq')
      .execute();
    expect(pushes.map((p) => p.idempotency_key)).toEqual([null, 'disk-full-push-1']);
    const hostsNow = await waitForConverged(server, names);
    expect(new Set(hostsNow.map((h) => h.desiredPushId))).toEqual(new Set([pushId]));
  });
});
