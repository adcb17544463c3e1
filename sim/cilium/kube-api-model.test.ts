import https from 'node:https';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import {
  ApiException,
  CoreV1Api,
  CustomObjectsApi,
  KubeConfig,
  PatchStrategy,
  setHeaderOptions,
} from '@kubernetes/client-node';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { type KubeApiModel, type ModelUser, startKubeApiModel } from './kube-api-model.js';
import { GATEWAY_LABEL, vpnEgressGatewayPolicy } from './test-manifests.js';

// The API model tested through the front door: a real, well-kept client (@kubernetes/client-node
// 1.4.0) over HTTPS on loopback, configured from a kubeconfig file that trusts the model's test CA.

const tls = (file: string) =>
  readFileSync(
    new URL(`../../src/backends/cilium/testdata/kube-api-tls/${file}`, import.meta.url),
    'utf8',
  );

const GATEWAY_USER: ModelUser = {
  name: 'system:serviceaccount:egressguard:gateway',
  token: 'gateway-token',
  rules: [
    { verbs: ['get', 'patch'], resource: 'nodes', resourceNames: ['gw-1'] },
    {
      verbs: ['get', 'list', 'create', 'update', 'patch', 'delete'],
      resource: 'ciliumegressgatewaypolicies',
    },
  ],
};
const READER: ModelUser = {
  name: 'reader',
  token: 'reader-token',
  rules: [{ verbs: ['get', 'list'], resource: 'nodes' }],
};

const group = 'cilium.io';
const version = 'v2';
const plural = 'ciliumegressgatewaypolicies';
const merge = setHeaderOptions('Content-Type', PatchStrategy.MergePatch);
const strategic = setHeaderOptions('Content-Type', PatchStrategy.StrategicMergePatch);

let model: KubeApiModel;
let dir: string;

function clientsFor(user: string): { core: CoreV1Api; custom: CustomObjectsApi } {
  const file = join(dir, `${user.replace(/\W/g, '-')}.kubeconfig`);
  writeFileSync(file, model.kubeconfig(user));
  const config = new KubeConfig();
  config.loadFromFile(file);
  return { core: config.makeApiClient(CoreV1Api), custom: config.makeApiClient(CustomObjectsApi) };
}

/** The Status object of a failed call, and its HTTP code. */
async function failure(
  call: Promise<unknown>,
): Promise<{ code: number; reason: string; message: string }> {
  try {
    await call;
  } catch (error) {
    if (!(error instanceof ApiException)) throw error;
    // The generated client drops the body of a 401 (it throws "Unauthorized" without one).
    if (error.body === undefined) return { code: error.code, reason: '', message: '' };
    const body = JSON.parse(String(error.body)) as {
      reason: string;
      message: string;
      code: number;
    };
    expect(body.code).toBe(error.code);
    return { code: error.code, reason: body.reason, message: body.message };
  }
  throw new Error('Expected the call to fail');
}

function labels(node: unknown): Record<string, string> {
  return (node as { metadata?: { labels?: Record<string, string> } }).metadata?.labels ?? {};
}

function resourceVersion(object: unknown): string {
  return (object as { metadata: { resourceVersion: string } }).metadata.resourceVersion;
}

beforeAll(() => {
  dir = mkdtempSync(join(tmpdir(), 'kube-api-model-'));
});
afterAll(() => {
  rmSync(dir, { recursive: true, force: true });
});

beforeEach(async () => {
  model = await startKubeApiModel({
    users: [GATEWAY_USER, READER],
    nodes: [
      {
        name: 'gw-1',
        labels: { [GATEWAY_LABEL.key]: GATEWAY_LABEL.value },
        internalIP: '192.168.1.10',
      },
      { name: 'worker-1', internalIP: '192.168.1.11' },
    ],
    tls: { key: tls('server.key'), cert: tls('server.crt'), ca: tls('ca.crt') },
  });
  return () => model.close();
});

describe('Kubernetes API model: nodes', () => {
  it('serves GET and LIST with label selectors over HTTPS to a client using a kubeconfig', async () => {
    const { core } = clientsFor(READER.name);
    const node = await core.readNode({ name: 'gw-1' });
    expect(node.metadata?.name).toBe('gw-1');
    expect(labels(node)).toEqual({ 'kubernetes.io/hostname': 'gw-1', [GATEWAY_LABEL.key]: 'vpn' });
    expect(node.status?.addresses).toContainEqual({ type: 'InternalIP', address: '192.168.1.10' });
    const gateways = await core.listNode({ labelSelector: `${GATEWAY_LABEL.key}=vpn` });
    expect(gateways.items.map((n) => n.metadata?.name)).toEqual(['gw-1']);
    const others = await core.listNode({ labelSelector: `!${GATEWAY_LABEL.key}` });
    expect(others.items.map((n) => n.metadata?.name)).toEqual(['worker-1']);
    const both = await core.listNode({
      labelSelector: 'kubernetes.io/hostname in (gw-1, worker-1)',
    });
    expect(both.items).toHaveLength(2);
  });

  it('patches labels with a JSON patch (the client default), a merge patch and a strategic merge patch', async () => {
    const { core } = clientsFor(GATEWAY_USER.name);
    const before = resourceVersion(await core.readNode({ name: 'gw-1' }));
    const removed = await core.patchNode({
      name: 'gw-1',
      body: [{ op: 'remove', path: `/metadata/labels/${GATEWAY_LABEL.key.replace('/', '~1')}` }],
    });
    expect(labels(removed)).toEqual({ 'kubernetes.io/hostname': 'gw-1' });
    expect(Number(resourceVersion(removed))).toBeGreaterThan(Number(before));
    const added = await core.patchNode(
      { name: 'gw-1', body: { metadata: { labels: { [GATEWAY_LABEL.key]: 'vpn' } } } },
      merge,
    );
    expect(labels(added)[GATEWAY_LABEL.key]).toBe('vpn');
    const again = await core.patchNode(
      { name: 'gw-1', body: { metadata: { labels: { [GATEWAY_LABEL.key]: null } } } },
      strategic,
    );
    expect(labels(again)).not.toHaveProperty(GATEWAY_LABEL.key);
    expect(labels(model.node('gw-1') ?? null)).toEqual({ 'kubernetes.io/hostname': 'gw-1' });
    expect(model.requests.map((r) => [r.method, r.verb, r.contentType, r.status])).toEqual([
      ['GET', 'get', undefined, 200],
      ['PATCH', 'patch', 'application/json-patch+json', 200],
      ['PATCH', 'patch', 'application/merge-patch+json', 200],
      ['PATCH', 'patch', 'application/strategic-merge-patch+json', 200],
    ]);
    expect(model.requests[1]?.user).toBe(GATEWAY_USER.name);
  });

  it('leaves resourceVersion alone for a patch that changes nothing', async () => {
    const { core } = clientsFor(GATEWAY_USER.name);
    const before = resourceVersion(await core.readNode({ name: 'gw-1' }));
    const same = await core.patchNode(
      { name: 'gw-1', body: { metadata: { labels: { [GATEWAY_LABEL.key]: 'vpn' } } } },
      merge,
    );
    expect(resourceVersion(same)).toBe(before);
  });

  it('answers a patch conditional on a stale resourceVersion with 409 Conflict', async () => {
    const { core } = clientsFor(GATEWAY_USER.name);
    const seen = resourceVersion(await core.readNode({ name: 'gw-1' }));
    model.setNodeLabels('gw-1', { 'kubernetes.io/hostname': 'gw-1', maintenance: 'true' });
    const stale = await failure(
      core.patchNode(
        {
          name: 'gw-1',
          body: { metadata: { resourceVersion: seen, labels: { [GATEWAY_LABEL.key]: null } } },
        },
        merge,
      ),
    );
    expect(stale).toEqual({
      code: 409,
      reason: 'Conflict',
      message:
        'Operation cannot be fulfilled on nodes "gw-1": the object has been modified; please apply your changes to the latest version and try again',
    });
    expect(labels(model.node('gw-1') ?? null)).toHaveProperty('maintenance', 'true');
  });

  it('rejects a failed JSON patch test, an invalid label and a list in a strategic merge patch with 422', async () => {
    const { core } = clientsFor(GATEWAY_USER.name);
    const test = await failure(
      core.patchNode({
        name: 'gw-1',
        body: [
          { op: 'test', path: '/metadata/resourceVersion', value: '0' },
          { op: 'remove', path: '/metadata/labels/kubernetes.io~1hostname' },
        ],
      }),
    );
    expect(test).toMatchObject({
      code: 422,
      reason: 'Invalid',
      message: 'Test of "/metadata/resourceVersion" failed',
    });
    const bad = await failure(
      core.patchNode(
        { name: 'gw-1', body: { metadata: { labels: { [GATEWAY_LABEL.key]: 'up & running' } } } },
        merge,
      ),
    );
    expect(bad.code).toBe(422);
    expect(bad.message).toContain(
      'Node "gw-1" is invalid: metadata.labels: Invalid value: "up & running"',
    );
    const list = await failure(
      core.patchNode({ name: 'gw-1', body: { spec: { taints: [] } } }, strategic),
    );
    expect(list).toMatchObject({ code: 422 });
    expect(labels(model.node('gw-1') ?? null)).toHaveProperty('kubernetes.io/hostname', 'gw-1');
  });

  it('answers 404 for a missing node and for a path it does not serve', async () => {
    const { core } = clientsFor(READER.name);
    expect(await failure(core.readNode({ name: 'gw-9' }))).toEqual({
      code: 404,
      reason: 'NotFound',
      message: 'nodes "gw-9" not found',
    });
    expect(await failure(core.listNamespace())).toEqual({
      code: 404,
      reason: 'NotFound',
      message: 'the server could not find the requested resource',
    });
  });

  it('answers 401 to a bad bearer token and 403 to a user without the permission', async () => {
    const config = new KubeConfig();
    config.loadFromString(model.kubeconfig(READER.name).replace('reader-token', 'stolen-token'));
    const anonymous = config.makeApiClient(CoreV1Api);
    expect((await failure(anonymous.readNode({ name: 'gw-1' }))).code).toBe(401);
    // The Status body the client does not show, read with plain HTTPS and no token at all.
    const raw = await new Promise<{ status: number | undefined; body: string }>(
      (resolve, reject) => {
        const request = https.get(
          `${model.url}/api/v1/nodes/gw-1`,
          { ca: tls('ca.crt') },
          (response) => {
            let body = '';
            response.on('data', (chunk: Buffer) => (body += chunk.toString()));
            response.on('end', () => {
              resolve({ status: response.statusCode, body });
            });
          },
        );
        request.on('error', reject);
      },
    );
    expect(raw.status).toBe(401);
    expect(JSON.parse(raw.body)).toMatchObject({
      kind: 'Status',
      reason: 'Unauthorized',
      code: 401,
    });
    const { core } = clientsFor(READER.name);
    expect(
      await failure(
        core.patchNode({ name: 'gw-1', body: { metadata: { labels: { x: 'y' } } } }, merge),
      ),
    ).toEqual({
      code: 403,
      reason: 'Forbidden',
      message:
        'nodes "gw-1" is forbidden: User "reader" cannot patch resource "nodes" in API group "" at the cluster scope',
    });
    // RBAC resourceNames: the gateway may patch only its own node.
    const gateway = clientsFor(GATEWAY_USER.name).core;
    expect(
      (
        await failure(
          gateway.patchNode(
            { name: 'worker-1', body: { metadata: { labels: { x: 'y' } } } },
            merge,
          ),
        )
      ).code,
    ).toBe(403);
    expect(model.requests.map((r) => [r.status, r.user])).toEqual([
      [401, undefined],
      [401, undefined],
      [403, 'reader'],
      [403, GATEWAY_USER.name],
    ]);
    expect(labels(model.node('worker-1') ?? null)).not.toHaveProperty('x');
  });

  it('injects server failures on request', async () => {
    const { core } = clientsFor(READER.name);
    model.failNext(1, 503, 'ServiceUnavailable');
    expect((await failure(core.readNode({ name: 'gw-1' }))).code).toBe(503);
    expect((await core.readNode({ name: 'gw-1' })).metadata?.name).toBe('gw-1');
  });
});

describe('Kubernetes API model: CiliumEgressGatewayPolicy custom objects', () => {
  const policy = vpnEgressGatewayPolicy();
  const name = policy.metadata.name;

  it('creates, gets, lists, replaces, patches and deletes, bumping resourceVersion and generation', async () => {
    const { custom } = clientsFor(GATEWAY_USER.name);
    const created = (await custom.createClusterCustomObject({
      group,
      version,
      plural,
      body: policy,
    })) as {
      metadata: { resourceVersion: string; generation: number; uid: string };
    };
    expect(created.metadata.generation).toBe(1);
    expect(created.metadata.uid).toMatch(/^[0-9a-f-]{36}$/);
    const got: unknown = await custom.getClusterCustomObject({ group, version, plural, name });
    expect(got).toEqual(created);
    const listed = (await custom.listClusterCustomObject({ group, version, plural })) as {
      kind: string;
      items: unknown[];
    };
    expect(listed.kind).toBe('CiliumEgressGatewayPolicyList');
    expect(listed.items).toEqual([created]);

    const changed = {
      ...created,
      spec: { ...policy.spec, excludedCIDRs: ['192.168.0.0/16', '10.0.0.0/8'] },
    };
    const replaced = (await custom.replaceClusterCustomObject({
      group,
      version,
      plural,
      name,
      body: changed,
    })) as {
      metadata: { resourceVersion: string; generation: number; uid: string };
    };
    expect(Number(replaced.metadata.resourceVersion)).toBeGreaterThan(
      Number(created.metadata.resourceVersion),
    );
    expect(replaced.metadata.generation).toBe(2);
    expect(replaced.metadata.uid).toBe(created.metadata.uid);

    // Re-applying after a tunnel restart: an annotation bump is a new resourceVersion, same spec.
    const reapplied = (await custom.patchClusterCustomObject(
      {
        group,
        version,
        plural,
        name,
        body: { metadata: { annotations: { 'egressguard.dev/reapplied-at': '1' } } },
      },
      merge,
    )) as { metadata: { resourceVersion: string; generation: number } };
    expect(Number(reapplied.metadata.resourceVersion)).toBeGreaterThan(
      Number(replaced.metadata.resourceVersion),
    );
    expect(reapplied.metadata.generation).toBe(2);

    await custom.deleteClusterCustomObject({ group, version, plural, name });
    expect(
      (await failure(custom.getClusterCustomObject({ group, version, plural, name }))).message,
    ).toBe('ciliumegressgatewaypolicies.cilium.io "egressguard-vpn" not found');
    expect(model.requests.map((r) => `${r.verb ?? '-'} ${r.status}`)).toEqual([
      'create 201',
      'get 200',
      'list 200',
      'update 200',
      'patch 200',
      'delete 200',
      'get 404',
    ]);
  });

  it('refuses a stale replace (409), an unconditional one (422) and a duplicate create (409)', async () => {
    const { custom } = clientsFor(GATEWAY_USER.name);
    const created = (await custom.createClusterCustomObject({
      group,
      version,
      plural,
      body: policy,
    })) as {
      metadata: Record<string, unknown>;
    };
    await custom.patchClusterCustomObject(
      { group, version, plural, name, body: { metadata: { labels: { owner: 'someone-else' } } } },
      merge,
    );
    const stale = await failure(
      custom.replaceClusterCustomObject({ group, version, plural, name, body: created }),
    );
    expect(stale).toEqual({
      code: 409,
      reason: 'Conflict',
      message:
        'Operation cannot be fulfilled on ciliumegressgatewaypolicies.cilium.io "egressguard-vpn": the object has been modified; please apply your changes to the latest version and try again',
    });
    const unconditional = await failure(
      custom.replaceClusterCustomObject({ group, version, plural, name, body: policy }),
    );
    expect(unconditional).toMatchObject({ code: 422, reason: 'Invalid' });
    expect(unconditional.message).toContain('metadata.resourceVersion');
    const duplicate = await failure(
      custom.createClusterCustomObject({ group, version, plural, body: policy }),
    );
    expect(duplicate).toEqual({
      code: 409,
      reason: 'AlreadyExists',
      message: 'ciliumegressgatewaypolicies.cilium.io "egressguard-vpn" already exists',
    });
  });

  it('refuses a strategic merge patch on a custom resource with 415, as the API server does', async () => {
    const { custom } = clientsFor(GATEWAY_USER.name);
    await custom.createClusterCustomObject({ group, version, plural, body: policy });
    const refused = await failure(
      custom.patchClusterCustomObject(
        { group, version, plural, name, body: { metadata: { annotations: { a: 'b' } } } },
        strategic,
      ),
    );
    expect(refused.code).toBe(415);
    expect(refused.reason).toBe('UnsupportedMediaType');
    expect(refused.message).toContain(
      'accepted media types include: application/json-patch+json, application/merge-patch+json',
    );
  });

  it('lists by label selector, does not persist dry runs, and 404s a missing object', async () => {
    const { custom } = clientsFor(GATEWAY_USER.name);
    const labelled = {
      ...policy,
      metadata: { name: 'mine', labels: { 'app.kubernetes.io/managed-by': 'egressguard' } },
    };
    await custom.createClusterCustomObject({ group, version, plural, body: policy });
    await custom.createClusterCustomObject({ group, version, plural, body: labelled });
    await custom.createClusterCustomObject({
      group,
      version,
      plural,
      body: { ...policy, metadata: { name: 'dry' } },
      dryRun: 'All',
    });
    const mine = (await custom.listClusterCustomObject({
      group,
      version,
      plural,
      labelSelector: 'app.kubernetes.io/managed-by=egressguard',
    })) as { items: { metadata: { name: string } }[] };
    expect(mine.items.map((i) => i.metadata.name)).toEqual(['mine']);
    expect(model.egressGatewayPolicy('dry')).toBeUndefined();
    expect(
      (await failure(custom.deleteClusterCustomObject({ group, version, plural, name: 'nope' })))
        .code,
    ).toBe(404);
  });
});
