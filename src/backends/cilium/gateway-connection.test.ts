import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import type { ClusterConnection, ClusterDuty } from '../backend.js';
import { createGatewayConnection } from './gateway-connection.js';
import {
  startKubeApiModel,
  type AccessRule,
  type KubeApiModel,
} from '../../../sim/cilium/kube-api-model.js';
import { createKubeClient } from './kube-client.js';
import { testCiliumEndpoint, testPod } from '../../../sim/cilium/test-pods.js';

// The resident's end-to-end tunnel signal: a request to the echo service beyond the tunnel must
// come back from the tunnel's exit. Here the echo service is a real HTTP server on loopback that
// answers what we tell it (the exit, the WAN, or nothing at all), and the cluster is the API model.

const tls = (file: string) =>
  readFileSync(new URL(`testdata/kube-api-tls/${file}`, import.meta.url), 'utf8');
const DUTY: ClusterDuty = {
  id: 'vpn',
  tunnel: 'tun0',
  nodeLabel: { key: 'egressguard.dev/gateway-vpn', value: 'up' },
  what: 'node label egressguard.dev/gateway-vpn=up',
  objects: ['egressguard-k3s-vpn-egress-vpn', 'egressguard-k3s-vpn-egress-vpn-backstop'],
};
const steering = (egressGateway: Record<string, unknown>) => ({
  apiVersion: 'cilium.io/v2',
  kind: 'CiliumEgressGatewayPolicy',
  metadata: { name: 'egressguard-k3s-vpn-egress-vpn' },
  spec: {
    selectors: [{ podSelector: { matchLabels: { 'egress-class': 'vpn' } } }],
    destinationCIDRs: ['0.0.0.0/1', '128.0.0.0/1'],
    egressGateway: {
      nodeSelector: { matchLabels: { 'egressguard.dev/gateway-vpn': 'up' } },
      ...egressGateway,
    },
  },
});
const EXIT = '203.0.113.50';

let model: KubeApiModel;
let dir: string;
let echo: Server;
let answer: string | undefined;
let connection: ClusterConnection;

beforeEach(async () => {
  dir = mkdtempSync(join(tmpdir(), 'gateway-connection-'));
  model = await startKubeApiModel({
    users: [
      {
        name: 'gateway',
        token: 'gateway-token',
        rules: [
          { verbs: ['get', 'patch'], resource: 'nodes', resourceNames: ['gw-1'] },
          { verbs: ['list', 'patch'], resource: 'ciliumegressgatewaypolicies' },
        ],
      },
    ],
    nodes: [{ name: 'gw-1' }],
    egressGatewayPolicies: [steering({ interface: 'tun0', egressIP: '10.200.0.2' })],
    tls: { key: tls('server.key'), cert: tls('server.crt'), ca: tls('ca.crt') },
  });
  writeFileSync(join(dir, 'kubeconfig'), model.kubeconfig('gateway'));
  answer = EXIT;
  echo = createServer((request, response) => {
    // Nothing answers: a dead peer swallows the request.
    if (answer === undefined) return;
    response.writeHead(200, { 'content-type': 'text/plain' }).end(`${answer}\n`);
  });
  await new Promise<void>((resolve) => echo.listen(0, '127.0.0.1', resolve));
  const port = (echo.address() as AddressInfo).port;
  connection = createGatewayConnection({
    client: createKubeClient({ kubeconfig: join(dir, 'kubeconfig') }),
    node: 'gw-1',
    exits: {
      tun0: { echoUrl: `http://127.0.0.1:${port}/`, addresses: [EXIT], source: '127.0.0.1' },
    },
    probeEveryMs: 0,
  });
});
afterEach(async () => {
  await connection.close();
  echo.closeAllConnections();
  await new Promise<void>((resolve) =>
    echo.close(() => {
      resolve();
    }),
  );
  await model.close();
  rmSync(dir, { recursive: true, force: true });
});

/** The exit gauge after converges until it reads `want` (each converge starts a probe). */
async function exitSeenBecomes(want: 0 | 1): Promise<string> {
  for (;;) {
    await connection.converge(DUTY, true);
    const text = (await connection.metrics()).text;
    if (text.includes(`egressguard_tunnel_exit_seen{node="gw-1",tunnel="tun0"} ${want}`)) {
      return text;
    }
    await new Promise((resolve) => setTimeout(resolve, 20));
  }
}

describe('the gateway connection: the tunnel exit, end to end', () => {
  it('reports the exit seen while the echo service answers with it, and its time', async () => {
    const text = await exitSeenBecomes(1);
    expect(text).toMatch(
      /egressguard_tunnel_exit_last_seen_timestamp_seconds\{node="gw-1",tunnel="tun0"\} [1-9]/,
    );
    expect(text).toContain('egressguard_tunnel_up{node="gw-1",tunnel="tun0"} 1');
  });

  it('reports 0 when the answer is another address (the request left by the WAN)', async () => {
    await exitSeenBecomes(1);
    answer = '198.51.100.7';
    await exitSeenBecomes(0);
  });

  it('reports 0 when the peer is dead and nothing answers, while the link is up', async () => {
    await exitSeenBecomes(1);
    answer = undefined;
    const text = await exitSeenBecomes(0);
    // The link-level gauge cannot see it: that is why the end-to-end one exists.
    expect(text).toContain('egressguard_tunnel_up{node="gw-1",tunnel="tun0"} 1');
  });
});

describe('the gateway connection: the policies a class relies on', () => {
  it('reports a policy Cilium refuses and one that is missing as 0', async () => {
    const text = await exitSeenBecomes(1);
    // The seeded steering policy sets interface and egressIP: Cilium ignores it. No backstop.
    expect(text).toContain(
      'egressguard_egress_gateway_policy_present{node="gw-1",policy="egressguard-k3s-vpn-egress-vpn"} 0',
    );
    expect(text).toContain(
      'egressguard_egress_gateway_policy_present{node="gw-1",policy="egressguard-k3s-vpn-egress-vpn-backstop"} 0',
    );
    // Only accepted policies are re-applied.
    expect(model.requests.filter((r) => r.method === 'PATCH' && r.path.includes('cilium'))).toEqual(
      [],
    );
  });
});

describe("the gateway connection: the class's pods Cilium cannot steer", () => {
  const VPN = { 'egress-class': 'vpn' };
  const accepted = {
    ...steering({ interface: 'tun0' }),
    metadata: {
      name: 'egressguard-k3s-vpn-egress-vpn',
      labels: { 'app.kubernetes.io/managed-by': 'egressguard', 'egressguard.dev/role': 'steering' },
    },
  };

  /** The resident against a cluster with these pods, granted `rules`; its metrics once counted. */
  async function unsteered(rules: AccessRule[]): Promise<string> {
    const cluster = await startKubeApiModel({
      users: [{ name: 'gateway', token: 'gateway-token', rules }],
      nodes: [{ name: 'gw-1' }],
      egressGatewayPolicies: [accepted],
      pods: [
        testPod('held', VPN),
        testPod('agentless', VPN),
        testPod('filtered', VPN),
        testPod('ungated', VPN, { gate: false }),
        testPod('starting', VPN, { phase: 'Pending' }),
        testPod('web', { app: 'web' }, { gate: false }),
      ],
      ciliumEndpoints: [
        testCiliumEndpoint('held'),
        testCiliumEndpoint('filtered', { labels: ['k8s:io.kubernetes.pod.namespace=apps'] }),
        testCiliumEndpoint('ungated'),
      ],
      tls: { key: tls('server.key'), cert: tls('server.crt'), ca: tls('ca.crt') },
    });
    const file = join(dir, 'unsteered.kubeconfig');
    writeFileSync(file, cluster.kubeconfig('gateway'));
    const resident = createGatewayConnection({
      client: createKubeClient({ kubeconfig: file }),
      node: 'gw-1',
    });
    try {
      // The pods are read beside the converge: converge until the gauge has been set.
      for (;;) {
        await resident.converge(DUTY, true);
        const text = (await resident.metrics()).text;
        if (text.includes('reason="unreadable"')) return text;
        await new Promise((resolve) => setTimeout(resolve, 20));
      }
    } finally {
      await resident.close();
      await cluster.close();
    }
  }
  const series = (reason: string, value: number) =>
    `egressguard_class_pods_unsteered{node="gw-1",policy="egressguard-k3s-vpn-egress-vpn",reason="${reason}"} ${value}`;
  const GATEWAY_RULES: AccessRule[] = [
    { verbs: ['get', 'patch'], resource: 'nodes', resourceNames: ['gw-1'] },
    { verbs: ['list', 'patch'], resource: 'ciliumegressgatewaypolicies' },
  ];

  it('counts them per reason, as doctor --k8s judges them', async () => {
    const text = await unsteered([
      ...GATEWAY_RULES,
      { verbs: ['list'], resource: 'pods' },
      { verbs: ['list'], resource: 'ciliumendpoints' },
    ]);
    expect(text).toContain(series('no-cilium-endpoint', 1));
    expect(text).toContain(series('identity-lacks-class-labels', 1));
    expect(text).toContain(series('no-tunnel-gate', 1));
    expect(text).toContain(series('host-network', 0));
    expect(text).toContain(series('unreadable', 0));
  });

  it('says so when it cannot read the pods, and still keeps the label', async () => {
    const text = await unsteered(GATEWAY_RULES);
    expect(text).toContain(series('unreadable', 1));
    expect(text).toContain(
      'egressguard_gateway_label_present{node="gw-1",gateway_label="egressguard.dev/gateway-vpn=up"} 1',
    );
  });
});

describe('the gateway connection: the CiliumNode Cilium selects the gateway by', () => {
  /** The label's and the CiliumNode's gauges once the CiliumNode was first read, after `up`. */
  async function afterConverge(
    up: boolean,
    ciliumNodes?: { name: string; labels: Record<string, string> }[],
  ): Promise<string> {
    const cluster = await startKubeApiModel({
      users: [
        {
          name: 'gateway',
          token: 'gateway-token',
          rules: [
            { verbs: ['get', 'patch'], resource: 'nodes', resourceNames: ['gw-1'] },
            { verbs: ['get'], resource: 'ciliumnodes', resourceNames: ['gw-1'] },
            { verbs: ['list', 'patch'], resource: 'ciliumegressgatewaypolicies' },
          ],
        },
      ],
      nodes: [{ name: 'gw-1', labels: { 'egressguard.dev/gateway-vpn': 'up' } }],
      ...(ciliumNodes === undefined ? {} : { ciliumNodes }),
      tls: { key: tls('server.key'), cert: tls('server.crt'), ca: tls('ca.crt') },
    });
    const file = join(dir, 'ciliumnode.kubeconfig');
    writeFileSync(file, cluster.kubeconfig('gateway'));
    const resident = createGatewayConnection({
      client: createKubeClient({ kubeconfig: file }),
      node: 'gw-1',
      auditEveryMs: 0,
    });
    try {
      // The node starts with the label: the first converge down takes it off, then reads the
      // CiliumNode (the gauge's first value comes from that read).
      for (;;) {
        await resident.converge(DUTY, up);
        const text = (await resident.metrics()).text;
        if (text.includes('egressguard_ciliumnode_label_present{')) return text;
        await new Promise((resolve) => setTimeout(resolve, 20));
      }
    } finally {
      await resident.close();
      await cluster.close();
    }
  }
  const gauge = (name: string, value: number) =>
    `${name}{node="gw-1",gateway_label="egressguard.dev/gateway-vpn=up"} ${value}`;

  it("follows the label through the node's agent", async () => {
    const down = await afterConverge(false);
    expect(down).toContain(gauge('egressguard_gateway_label_present', 0));
    expect(down).toContain(gauge('egressguard_ciliumnode_label_present', 0));
    const up = await afterConverge(true);
    expect(up).toContain(gauge('egressguard_ciliumnode_label_present', 1));
  });

  it('shows a CiliumNode that kept the label the Node lost (a stale agent)', async () => {
    const text = await afterConverge(false, [
      { name: 'gw-1', labels: { 'egressguard.dev/gateway-vpn': 'up' } },
    ]);
    expect(text).toContain(gauge('egressguard_gateway_label_present', 0));
    expect(text).toContain(gauge('egressguard_ciliumnode_label_present', 1));
  });
});
