import { join } from 'node:path';
import { execa } from 'execa';
import { afterAll, describe, expect, it } from 'vitest';
import type { RunningServer } from '../../src/server/index.js';
import {
  POLICY_V1,
  createScratch,
  startTestAgent,
  startTestServer,
  waitForConverged,
  type TestAgent,
} from './support/fleet-lab.js';

/** A controller serving a certificate the operator gave (here: self-signed by Debian's openssl). */
describe('controller with a given certificate and key', () => {
  const scratch = createScratch();
  let server: RunningServer | undefined;
  let agent: TestAgent | undefined;
  afterAll(async () => {
    await agent?.stop();
    await server?.close();
    scratch.cleanup();
  });

  it('pins the given certificate in bootstrap tokens, and agents enroll and converge through it', async () => {
    const dir = scratch.dir('tls');
    const cert = join(dir, 'server.pem');
    const key = join(dir, 'server.key');
    await execa('/usr/bin/openssl', [
      'req',
      '-x509',
      '-newkey',
      'ec',
      '-pkeyopt',
      'ec_paramgen_curve:P-256',
      '-nodes',
      '-keyout',
      key,
      '-out',
      cert,
      '-days',
      '2',
      '-subj',
      '/CN=egressguard test',
      '-addext',
      'subjectAltName=IP:127.0.0.1',
    ]);
    const fingerprint = (
      await execa('/usr/bin/openssl', ['x509', '-in', cert, '-noout', '-fingerprint', '-sha256'])
    ).stdout;
    server = await startTestServer({
      store: `sqlite:${join(dir, 'fleet.db')}`,
      stateDir: scratch.dir('server'),
      tlsCertFile: cert,
      tlsKeyFile: key,
    });
    expect(server.caPin).toBe(fingerprint.split('=')[1]?.replaceAll(':', '').toLowerCase());
    const { token } = await server.controller.createBootstrapToken(
      { ttlMs: 60_000, uses: 1 },
      'test',
    );
    expect(token.endsWith(`.${server.caPin ?? ''}`)).toBe(true);
    agent = startTestAgent({
      serverUrl: server.url,
      token,
      name: 'given-1',
      root: scratch.dir('agent'),
    });
    const pushed = await server.controller.push(
      {
        text: POLICY_V1,
        source: 'policy.yaml',
        rollout: { canary: 0, bakeMs: 0, maxUnavailable: 1 },
      },
      'test',
    );
    expect(pushed.ok).toBe(true);
    await waitForConverged(server, ['given-1']);
  });
});
