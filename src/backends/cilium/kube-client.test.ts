import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { CoreV1Api, KubeConfig } from '@kubernetes/client-node';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { startKubeApiModel, type KubeApiModel } from '../../../sim/cilium/kube-api-model.js';
import { createKubeClient } from './kube-client.js';

// The client through the front door, against the MODEL of the API server over HTTPS.

const tls = (file: string) =>
  readFileSync(new URL(`testdata/kube-api-tls/${file}`, import.meta.url), 'utf8');

let model: KubeApiModel;
let dir: string;
let kubeconfig: string;

beforeEach(async () => {
  dir = mkdtempSync(join(tmpdir(), 'kube-client-'));
  model = await startKubeApiModel({
    users: [
      {
        name: 'gateway',
        token: 'gateway-token',
        rules: [{ verbs: ['get', 'patch'], resource: 'nodes', resourceNames: ['gw-1'] }],
      },
    ],
    nodes: [{ name: 'gw-1' }],
    tls: { key: tls('server.key'), cert: tls('server.crt'), ca: tls('ca.crt') },
  });
  kubeconfig = join(dir, 'gateway.kubeconfig');
  writeFileSync(kubeconfig, model.kubeconfig('gateway'));
});
afterEach(async () => {
  await model.close();
  rmSync(dir, { recursive: true, force: true });
});

describe('createKubeClient', () => {
  it('keeps its connection alive: the label PATCH after a tunnel went down needs no handshake', async () => {
    const client = createKubeClient({ kubeconfig });
    await client.readNodeLabels('gw-1');
    for (const value of ['up', null, 'up', null]) {
      await client.patchNodeLabels('gw-1', { 'egressguard.dev/gateway-vpn': value });
    }
    expect(Object.keys(await client.readNodeLabels('gw-1'))).not.toContain(
      'egressguard.dev/gateway-vpn',
    );
    expect(model.requests.filter((r) => r.method === 'PATCH')).toHaveLength(4);
    expect(model.connections).toBe(1);
  });

  it('(the library alone opens a connection per request, which is what it replaces)', async () => {
    const config = new KubeConfig();
    config.loadFromFile(kubeconfig);
    const core = config.makeApiClient(CoreV1Api);
    for (let i = 0; i < 3; i++) await core.readNode({ name: 'gw-1' });
    expect(model.connections).toBe(3);
  });
});
