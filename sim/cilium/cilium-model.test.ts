import { describe, expect, it } from 'vitest';
import type {
  CiliumEgressGatewayPolicy,
  CiliumClusterwideNetworkPolicy,
  CiliumNetworkPolicy,
  NetworkPolicyRule,
} from '../../src/backends/cilium/cilium-manifests.js';
import {
  CiliumModel,
  type ModelCluster,
  ModelError,
  type ModelNode,
  type ModelPacket,
  type ModelPod,
} from './cilium-model.js';
import type { ModelNodeNetwork } from './node-routing-model.js';
import { GATEWAY_LABEL, vpnEgressGatewayPolicy } from './test-manifests.js';

// The incident's shape (DESIGN.md §1B): gw-1 carries tun0 and the gateway label; vpn pods run on
// worker-1. The gateway routes its tunnel address through table "vpn" (policy routing), because
// `interface` only picks the SNAT address (NOTES, "interface selects the SNAT address").
function gatewayNetwork(
  tunnel: 'up' | 'deleted' | 'no-carrier',
  tunAddress = '10.8.0.2',
): ModelNodeNetwork {
  return {
    devices: [
      { name: 'eth0', up: true, addresses: ['192.168.1.10/24', '2001:db8:1::10/64'] },
      ...(tunnel === 'deleted'
        ? []
        : [
            {
              name: 'tun0',
              up: true,
              carrier: tunnel === 'up',
              addresses: [`${tunAddress}/24`, '2001:db8:80::2/64'],
            },
          ]),
    ],
    tables: {
      main: [
        { to: '192.168.1.0/24', dev: 'eth0' },
        { to: '0.0.0.0/0', dev: 'eth0' },
        { to: '::/0', dev: 'eth0' },
      ],
      vpn: [
        { to: '0.0.0.0/0', dev: 'tun0' },
        { to: '::/0', dev: 'tun0' },
      ],
    },
    rules: [
      { priority: 100, from: '10.8.0.2/32', table: 'vpn' },
      { priority: 100, from: '2001:db8:80::2/128', table: 'vpn' },
    ],
  };
}

function workerNetwork(address: string): ModelNodeNetwork {
  return {
    devices: [{ name: 'eth0', up: true, addresses: [`${address}/24`, '2001:db8:1::11/64'] }],
    tables: {
      main: [
        { to: '0.0.0.0/0', dev: 'eth0' },
        { to: '::/0', dev: 'eth0' },
      ],
    },
  };
}

const GATEWAY: ModelNode = {
  name: 'gw-1',
  labels: { 'kubernetes.io/hostname': 'gw-1', [GATEWAY_LABEL.key]: GATEWAY_LABEL.value },
  internalIPs: ['192.168.1.10'],
  network: gatewayNetwork('up'),
};
const WORKER: ModelNode = {
  name: 'worker-1',
  labels: { 'kubernetes.io/hostname': 'worker-1', zone: 'a' },
  internalIPs: ['192.168.1.11'],
  network: workerNetwork('192.168.1.11'),
};

const PODS: ModelPod[] = [
  {
    name: 'vpn-a',
    namespace: 'apps',
    labels: { 'egress-class': 'vpn' },
    ips: ['10.42.1.5', 'fd00:42::5'],
    node: 'worker-1',
  },
  { name: 'web', namespace: 'apps', labels: { app: 'web' }, ips: ['10.42.1.6'], node: 'worker-1' },
  {
    name: 'vpn-b',
    namespace: 'other',
    labels: { 'egress-class': 'vpn' },
    ips: ['10.42.1.7'],
    node: 'worker-1',
  },
];

function cluster(overrides: Partial<ModelCluster> = {}): ModelCluster {
  return {
    nodes: [GATEWAY, WORKER],
    namespaces: [
      { name: 'apps', labels: { team: 'payments' } },
      { name: 'other', labels: {} },
    ],
    pods: PODS,
    ...overrides,
  };
}

function packet(
  from: string,
  to: string,
  protocol: ModelPacket['protocol'] = 'tcp',
  port = 443,
): ModelPacket {
  const [namespace, name] = from.split('/') as [string, string];
  return protocol === 'icmp'
    ? { from: { namespace, name }, to, protocol, icmpType: port }
    : { from: { namespace, name }, to, protocol, port };
}

function cnp(name: string, namespace: string, spec: NetworkPolicyRule): CiliumNetworkPolicy {
  return {
    apiVersion: 'cilium.io/v2',
    kind: 'CiliumNetworkPolicy',
    metadata: { name, namespace },
    spec,
  };
}

function ccnp(name: string, spec: NetworkPolicyRule): CiliumClusterwideNetworkPolicy {
  return {
    apiVersion: 'cilium.io/v2',
    kind: 'CiliumClusterwideNetworkPolicy',
    metadata: { name },
    spec,
  };
}

const VPN = { matchLabels: { 'egress-class': 'vpn' } };

function allowed(model: CiliumModel, p: ModelPacket): boolean {
  return model.evaluate(p).networkPolicy.allowed;
}

describe('CiliumModel: network policy', () => {
  it('allows everything while no egress rule selects the endpoint', () => {
    const model = new CiliumModel(cluster());
    const verdict = model.evaluate(packet('apps/vpn-a', '203.0.113.7'));
    expect(verdict.networkPolicy).toEqual({
      allowed: true,
      reason: 'no-default-deny',
      defaultDeny: false,
      allowedBy: [],
      deniedBy: [],
    });
  });

  it('puts a selected endpoint in default deny and allows only what a rule allows', () => {
    const model = new CiliumModel(cluster());
    model.apply(
      cnp('vpn', 'apps', { endpointSelector: VPN, egress: [{ toCIDR: ['203.0.113.0/24'] }] }),
    );
    expect(model.evaluate(packet('apps/vpn-a', '203.0.113.7')).networkPolicy).toMatchObject({
      allowed: true,
      reason: 'allow-rule',
      allowedBy: [{ policy: 'CiliumNetworkPolicy/apps/vpn', rule: 'spec.egress[0]' }],
    });
    expect(model.evaluate(packet('apps/vpn-a', '198.51.100.1')).networkPolicy).toMatchObject({
      allowed: false,
      reason: 'default-deny',
      defaultDeny: true,
    });
    // The pod the policy does not select is untouched.
    expect(allowed(model, packet('apps/web', '198.51.100.1'))).toBe(true);
  });

  it('takes the union of allows across policies, rules and specs', () => {
    const model = new CiliumModel(cluster());
    model.apply(
      cnp('a', 'apps', { endpointSelector: VPN, egress: [{ toCIDR: ['203.0.113.0/25'] }] }),
    );
    model.apply({
      ...ccnp('b', { endpointSelector: VPN, egress: [{ toCIDR: ['198.51.100.0/24'] }] }),
      specs: [{ endpointSelector: VPN, egress: [{ toCIDR: ['192.0.2.0/24'] }] }],
    });
    expect(allowed(model, packet('apps/vpn-a', '203.0.113.7'))).toBe(true);
    expect(allowed(model, packet('apps/vpn-a', '198.51.100.9'))).toBe(true);
    expect(model.evaluate(packet('apps/vpn-a', '192.0.2.1')).networkPolicy.allowedBy).toEqual([
      { policy: 'CiliumClusterwideNetworkPolicy/b', rule: 'specs[0].egress[0]' },
    ]);
    expect(allowed(model, packet('apps/vpn-a', '203.0.113.200'))).toBe(false);
  });

  it('lets a deny beat any allow, in whichever policy', () => {
    const model = new CiliumModel(cluster());
    model.apply(
      cnp('allow', 'apps', { endpointSelector: VPN, egress: [{ toEntities: ['world'] }] }),
    );
    model.apply(
      ccnp('deny', { endpointSelector: VPN, egressDeny: [{ toCIDR: ['203.0.113.66/32'] }] }),
    );
    const verdict = model.evaluate(packet('apps/vpn-a', '203.0.113.66'));
    expect(verdict.networkPolicy).toMatchObject({ allowed: false, reason: 'deny-rule' });
    expect(verdict.networkPolicy.allowedBy).toHaveLength(1);
    expect(verdict.egress).toEqual({ kind: 'denied-by-network-policy' });
    expect(allowed(model, packet('apps/vpn-a', '203.0.113.67'))).toBe(true);
  });

  it('applies toCIDRSet except to its own cidr only', () => {
    const model = new CiliumModel(cluster());
    model.apply(
      cnp('vpn', 'apps', {
        endpointSelector: VPN,
        egress: [{ toCIDRSet: [{ cidr: '203.0.113.0/24', except: ['203.0.113.0/28'] }] }],
      }),
    );
    expect(allowed(model, packet('apps/vpn-a', '203.0.113.15'))).toBe(false);
    expect(allowed(model, packet('apps/vpn-a', '203.0.113.16'))).toBe(true);
    model.apply(
      cnp('more', 'apps', { endpointSelector: VPN, egress: [{ toCIDR: ['203.0.113.8/29'] }] }),
    );
    expect(allowed(model, packet('apps/vpn-a', '203.0.113.9'))).toBe(true);
    expect(allowed(model, packet('apps/vpn-a', '203.0.113.1'))).toBe(false);
  });

  it('matches toPorts by protocol (ANY, TCP, UDP, SCTP) and port ranges, and blocks ICMP then', () => {
    const model = new CiliumModel(cluster());
    model.apply(
      cnp('vpn', 'apps', {
        endpointSelector: VPN,
        egress: [
          { toEntities: ['world'], toPorts: [{ ports: [{ port: '443', protocol: 'TCP' }] }] },
          { toEntities: ['world'], toPorts: [{ ports: [{ port: '5000', endPort: 5010 }] }] },
          {
            toEntities: ['world'],
            toPorts: [
              {
                ports: [
                  { port: '9', protocol: 'ANY' },
                  { port: '7', protocol: 'SCTP' },
                ],
              },
            ],
          },
        ],
      }),
    );
    const to = (protocol: ModelPacket['protocol'], port: number) =>
      allowed(model, packet('apps/vpn-a', '203.0.113.7', protocol, port));
    expect([to('tcp', 443), to('udp', 443), to('tcp', 444)]).toEqual([true, false, false]);
    expect([to('udp', 5000), to('tcp', 5010), to('sctp', 5005), to('udp', 5011)]).toEqual([
      true,
      true,
      true,
      false,
    ]);
    expect([to('udp', 9), to('sctp', 9), to('sctp', 7), to('tcp', 7)]).toEqual([
      true,
      true,
      true,
      false,
    ]);
    // layer4.rst: "If any layer 4 policy is specified, then ICMP will be blocked".
    expect(to('icmp', 8)).toBe(false);
  });

  it('matches icmps by family and type (number or name)', () => {
    const model = new CiliumModel(cluster());
    model.apply(
      cnp('vpn', 'apps', {
        endpointSelector: VPN,
        egress: [{ icmps: [{ fields: [{ type: 8 }, { family: 'IPv6', type: 'EchoRequest' }] }] }],
      }),
    );
    expect(allowed(model, packet('apps/vpn-a', '203.0.113.7', 'icmp', 8))).toBe(true);
    expect(allowed(model, packet('apps/vpn-a', '203.0.113.7', 'icmp', 13))).toBe(false);
    expect(allowed(model, packet('apps/vpn-a', '2001:db8::7', 'icmp', 128))).toBe(true);
    // Type 8 is IPv4's echo request; for IPv6 it is nothing the rule names.
    expect(allowed(model, packet('apps/vpn-a', '2001:db8::7', 'icmp', 8))).toBe(false);
    expect(allowed(model, packet('apps/vpn-a', '203.0.113.7', 'tcp', 443))).toBe(false);
  });

  it('lets a rule without L4 allow every protocol, and an L4-only rule every destination', () => {
    const model = new CiliumModel(cluster());
    model.apply(
      cnp('vpn', 'apps', {
        endpointSelector: VPN,
        egress: [
          { toCIDR: ['198.51.100.0/24'] },
          { toPorts: [{ ports: [{ port: '53', protocol: 'UDP' }] }] },
        ],
      }),
    );
    expect(allowed(model, packet('apps/vpn-a', '198.51.100.1', 'icmp', 8))).toBe(true);
    expect(allowed(model, packet('apps/vpn-a', '203.0.113.7', 'udp', 53))).toBe(true);
    expect(allowed(model, packet('apps/vpn-a', '10.42.1.6', 'udp', 53))).toBe(true);
    expect(allowed(model, packet('apps/vpn-a', '203.0.113.7', 'udp', 54))).toBe(false);
  });

  it('tells world from cluster: CIDR rules never match pods or nodes', () => {
    const model = new CiliumModel(cluster());
    model.apply(cnp('vpn', 'apps', { endpointSelector: VPN, egress: [{ toCIDR: ['0.0.0.0/0'] }] }));
    expect(allowed(model, packet('apps/vpn-a', '203.0.113.7'))).toBe(true);
    expect(allowed(model, packet('apps/vpn-a', '10.42.1.6'))).toBe(false);
    expect(allowed(model, packet('apps/vpn-a', '192.168.1.10'))).toBe(false);
    model.apply(
      cnp('cluster', 'apps', { endpointSelector: VPN, egress: [{ toEntities: ['cluster'] }] }),
    );
    expect(allowed(model, packet('apps/vpn-a', '10.42.1.6'))).toBe(true);
    expect(allowed(model, packet('apps/vpn-a', '192.168.1.10'))).toBe(true);
  });

  it("scopes entities host and remote-node to the pod's own node and the others", () => {
    const model = new CiliumModel(cluster());
    model.apply(cnp('vpn', 'apps', { endpointSelector: VPN, egress: [{ toEntities: ['host'] }] }));
    expect(allowed(model, packet('apps/vpn-a', '192.168.1.11'))).toBe(true);
    expect(allowed(model, packet('apps/vpn-a', '192.168.1.10'))).toBe(false);
    model.apply(
      cnp('vpn', 'apps', { endpointSelector: VPN, egress: [{ toEntities: ['remote-node'] }] }),
    );
    expect(allowed(model, packet('apps/vpn-a', '192.168.1.10'))).toBe(true);
    expect(allowed(model, packet('apps/vpn-a', '192.168.1.11'))).toBe(false);
  });

  it('selects nothing with an empty list, and keeps a deny-only policy out of default deny on request', () => {
    const model = new CiliumModel(cluster());
    model.apply(cnp('vpn', 'apps', { endpointSelector: VPN, egress: [{ toEntities: [] }] }));
    // The endpoint is in default deny (a rule in egress) and nothing is allowed.
    expect(model.evaluate(packet('apps/vpn-a', '203.0.113.7')).networkPolicy).toMatchObject({
      allowed: false,
      reason: 'default-deny',
    });
    const other = new CiliumModel(cluster());
    other.apply(
      cnp('deny', 'apps', {
        endpointSelector: VPN,
        enableDefaultDeny: { egress: false },
        egressDeny: [{ toCIDR: ['203.0.113.66/32'] }],
      }),
    );
    expect(other.evaluate(packet('apps/vpn-a', '198.51.100.1')).networkPolicy).toMatchObject({
      allowed: true,
      reason: 'no-default-deny',
    });
    expect(allowed(other, packet('apps/vpn-a', '203.0.113.66'))).toBe(false);
    // Without the opt-out, the same deny-only policy turns on default deny.
    other.apply(
      cnp('deny', 'apps', { endpointSelector: VPN, egressDeny: [{ toCIDR: ['203.0.113.66/32'] }] }),
    );
    expect(allowed(other, packet('apps/vpn-a', '198.51.100.1'))).toBe(false);
  });

  it('keeps a namespaced policy to its namespace, subject and peers; a clusterwide one is not', () => {
    const model = new CiliumModel(cluster());
    model.apply(cnp('vpn', 'apps', { endpointSelector: VPN, egress: [{ toEndpoints: [{}] }] }));
    expect(allowed(model, packet('other/vpn-b', '198.51.100.1'))).toBe(true); // not selected
    expect(allowed(model, packet('apps/vpn-a', '10.42.1.6'))).toBe(true); // same namespace
    expect(allowed(model, packet('apps/vpn-a', '10.42.1.7'))).toBe(false); // pod in "other"
    model.apply(
      cnp('vpn2', 'apps', {
        endpointSelector: VPN,
        egress: [
          { toEndpoints: [{ matchLabels: { 'k8s:io.kubernetes.pod.namespace': 'other' } }] },
        ],
      }),
    );
    expect(allowed(model, packet('apps/vpn-a', '10.42.1.7'))).toBe(true);
    const wide = new CiliumModel(cluster());
    wide.apply(ccnp('vpn', { endpointSelector: VPN, egress: [{ toEntities: ['cluster'] }] }));
    expect(allowed(wide, packet('other/vpn-b', '198.51.100.1'))).toBe(false);
    expect(allowed(wide, packet('apps/vpn-a', '198.51.100.1'))).toBe(false);
  });

  it('selects by namespace labels through the io.cilium.k8s.namespace.labels prefix', () => {
    const model = new CiliumModel(cluster());
    model.apply(
      ccnp('payments', {
        endpointSelector: { matchLabels: { 'io.cilium.k8s.namespace.labels.team': 'payments' } },
        egress: [{ toCIDR: ['203.0.113.0/24'] }],
      }),
    );
    expect(allowed(model, packet('apps/web', '198.51.100.1'))).toBe(false);
    expect(allowed(model, packet('other/vpn-b', '198.51.100.1'))).toBe(true);
  });

  it('refuses what it does not model instead of guessing', () => {
    const model = new CiliumModel(cluster());
    model.apply(
      cnp('fqdn', 'apps', {
        endpointSelector: VPN,
        egress: [{ toFQDNs: [{ matchName: 'example.com' }] } as never],
      }),
    );
    expect(() => model.evaluate(packet('apps/vpn-a', '203.0.113.7'))).toThrow(ModelError);
    const named = new CiliumModel(cluster());
    named.apply(
      cnp('named', 'apps', {
        endpointSelector: VPN,
        egress: [{ toPorts: [{ ports: [{ port: 'https' }] }] }],
      }),
    );
    expect(() => named.evaluate(packet('apps/vpn-a', '203.0.113.7'))).toThrow(
      'The model does not implement port "https" (named ports, port 0)',
    );
  });
});

describe('CiliumModel: egress gateway', () => {
  function withGateway(options: { ciliumVersion?: string } = {}): CiliumModel {
    const model = new CiliumModel(cluster(), options);
    model.apply(vpnEgressGatewayPolicy());
    return model;
  }

  it("steers a selected pod through the gateway, SNATed to the interface's first address", () => {
    const verdict = withGateway().evaluate(packet('apps/vpn-a', '203.0.113.7'));
    expect(verdict.egress).toEqual({
      kind: 'leaves',
      path: 'egress-gateway',
      reason: 'steered',
      node: 'gw-1',
      device: 'tun0',
      sourceAddress: '10.8.0.2',
      egressGatewayPolicy: 'egressguard-vpn',
      staleEgressIp: false,
    });
  });

  it('lets excluded destinations, unselected pods and cluster addresses leave normally', () => {
    const model = withGateway();
    expect(model.evaluate(packet('apps/vpn-a', '192.168.7.7')).egress).toEqual({
      kind: 'leaves',
      path: 'pod-node',
      reason: 'excluded',
      node: 'worker-1',
      device: 'eth0',
      sourceAddress: '192.168.1.11',
      egressGatewayPolicy: 'egressguard-vpn',
    });
    expect(model.evaluate(packet('apps/web', '203.0.113.7')).egress).toMatchObject({
      path: 'pod-node',
      reason: 'no-matching-policy',
    });
    // The policy's podSelector names namespace "apps": vpn-b in "other" is not steered.
    expect(model.evaluate(packet('other/vpn-b', '203.0.113.7')).egress).toMatchObject({
      reason: 'no-matching-policy',
    });
    expect(model.evaluate(packet('apps/vpn-a', '10.42.1.6')).egress).toEqual({
      kind: 'in-cluster',
    });
    expect(model.evaluate(packet('apps/vpn-a', '192.168.1.10')).egress).toEqual({
      kind: 'in-cluster',
    });
  });

  it('drops with DROP_NO_EGRESS_GATEWAY once no node carries the gateway label', () => {
    const model = withGateway();
    model.setNodeLabels('gw-1', { 'kubernetes.io/hostname': 'gw-1' });
    expect(model.evaluate(packet('apps/vpn-a', '203.0.113.7')).egress).toEqual({
      kind: 'dropped',
      reason: 'DROP_NO_EGRESS_GATEWAY',
      node: 'worker-1',
      egressGatewayPolicy: 'egressguard-vpn',
      detail: 'No node matches the gateway nodeSelector of "egressguard-vpn"',
    });
    // Excluded destinations are not matched traffic: they still leave.
    expect(model.evaluate(packet('apps/vpn-a', '192.168.7.7')).egress).toMatchObject({
      kind: 'leaves',
    });
  });

  it('picks the first matching node by name', () => {
    const other: ModelNode = {
      ...GATEWAY,
      name: 'gw-0',
      internalIPs: ['192.168.1.9'],
      network: gatewayNetwork('up', '10.8.0.2'),
    };
    const model = new CiliumModel(cluster({ nodes: [GATEWAY, other, WORKER] }));
    model.apply(vpnEgressGatewayPolicy());
    expect(model.evaluate(packet('apps/vpn-a', '203.0.113.7')).egress).toMatchObject({
      node: 'gw-0',
    });
  });

  it('ignores a policy with both interface and egressIP, so the traffic leaves unsteered', () => {
    const model = new CiliumModel(cluster());
    model.apply(
      vpnEgressGatewayPolicy({
        egressGateway: {
          nodeSelector: { matchLabels: { [GATEWAY_LABEL.key]: GATEWAY_LABEL.value } },
          interface: 'tun0',
          egressIP: '10.8.0.2',
        },
      }),
    );
    const verdict = model.evaluate(packet('apps/vpn-a', '203.0.113.7'));
    expect(verdict.ignoredEgressGatewayPolicies).toEqual(['egressguard-vpn']);
    expect(verdict.egress).toEqual({
      kind: 'leaves',
      path: 'pod-node',
      reason: 'ignored-policy',
      node: 'worker-1',
      device: 'eth0',
      sourceAddress: '192.168.1.11',
      egressGatewayPolicy: 'egressguard-vpn',
    });
  });

  it('uses egressIP when a device carries it, else drops with DROP_NO_EGRESS_IP', () => {
    const selector = { matchLabels: { [GATEWAY_LABEL.key]: GATEWAY_LABEL.value } };
    const model = new CiliumModel(cluster());
    model.apply(
      vpnEgressGatewayPolicy({ egressGateway: { nodeSelector: selector, egressIP: '10.8.0.2' } }),
    );
    expect(model.evaluate(packet('apps/vpn-a', '203.0.113.7')).egress).toMatchObject({
      kind: 'leaves',
      device: 'tun0',
      sourceAddress: '10.8.0.2',
    });
    model.apply(
      vpnEgressGatewayPolicy({ egressGateway: { nodeSelector: selector, egressIP: '10.8.0.99' } }),
    );
    expect(model.evaluate(packet('apps/vpn-a', '203.0.113.7')).egress).toMatchObject({
      kind: 'dropped',
      reason: 'DROP_NO_EGRESS_IP',
      node: 'gw-1',
    });
  });

  it("without interface or egressIP uses the default-route device's first address", () => {
    const model = new CiliumModel(cluster());
    model.apply(
      vpnEgressGatewayPolicy({
        egressGateway: {
          nodeSelector: { matchLabels: { [GATEWAY_LABEL.key]: GATEWAY_LABEL.value } },
        },
      }),
    );
    expect(model.evaluate(packet('apps/vpn-a', '203.0.113.7')).egress).toMatchObject({
      node: 'gw-1',
      device: 'eth0',
      sourceAddress: '192.168.1.10',
    });
  });

  it('shows the stale-IP leak: tunnel gone, a route still resolves, the old tunnel address leaves by eth0', () => {
    const model = withGateway();
    model.setNodeNetwork('gw-1', gatewayNetwork('deleted'));
    expect(model.evaluate(packet('apps/vpn-a', '203.0.113.7')).egress).toEqual({
      kind: 'leaves',
      path: 'egress-gateway',
      reason: 'steered',
      node: 'gw-1',
      device: 'eth0',
      sourceAddress: '10.8.0.2',
      egressGatewayPolicy: 'egressguard-vpn',
      staleEgressIp: true,
    });
    expect(model.egressIpOf('egressguard-vpn')).toEqual({ 4: '10.8.0.2', 6: '2001:db8:80::2' });
  });

  it('keeps the stale IP when the tunnel returns with a new address, until the policy is re-applied', () => {
    const model = withGateway();
    model.setNodeNetwork('gw-1', gatewayNetwork('deleted'));
    const back = gatewayNetwork('up', '10.8.0.9');
    model.setNodeNetwork('gw-1', {
      ...back,
      rules: [{ priority: 100, from: '10.8.0.9/32', table: 'vpn' }],
    });
    // The label flapping on the same node does not refresh it either (the conservative reading).
    model.setNodeLabels('gw-1', { 'kubernetes.io/hostname': 'gw-1' });
    model.setNodeLabels('gw-1', GATEWAY.labels);
    expect(model.evaluate(packet('apps/vpn-a', '203.0.113.7')).egress).toMatchObject({
      device: 'eth0',
      sourceAddress: '10.8.0.2',
      staleEgressIp: true,
    });
    model.reapplyEgressGatewayPolicy('egressguard-vpn');
    expect(model.evaluate(packet('apps/vpn-a', '203.0.113.7')).egress).toMatchObject({
      device: 'tun0',
      sourceAddress: '10.8.0.9',
      staleEgressIp: false,
    });
  });

  it('turns the leak into a drop with the gateway label removed, or with a blackhole behind the tunnel', () => {
    const model = withGateway();
    model.setNodeNetwork('gw-1', gatewayNetwork('deleted'));
    model.setNodeLabels('gw-1', { 'kubernetes.io/hostname': 'gw-1' });
    expect(model.evaluate(packet('apps/vpn-a', '203.0.113.7')).egress).toMatchObject({
      kind: 'dropped',
      reason: 'DROP_NO_EGRESS_GATEWAY',
    });
    const guarded = withGateway();
    const down = gatewayNetwork('deleted');
    guarded.setNodeNetwork('gw-1', {
      ...down,
      tables: { ...down.tables, 'vpn-kill': [{ to: '0.0.0.0/0', type: 'blackhole' }] },
      rules: [...(down.rules ?? []), { priority: 101, from: '10.8.0.2/32', table: 'vpn-kill' }],
    });
    expect(guarded.evaluate(packet('apps/vpn-a', '203.0.113.7')).egress).toEqual({
      kind: 'dropped',
      reason: 'DROP_NO_FIB',
      node: 'gw-1',
      egressGatewayPolicy: 'egressguard-vpn',
      detail: 'A blackhole route 0.0.0.0/0 in table vpn-kill on gateway "gw-1"',
    });
  });

  it('loses the packet on a tunnel without carrier (the route stays)', () => {
    const model = withGateway();
    model.setNodeNetwork('gw-1', gatewayNetwork('no-carrier'));
    expect(model.evaluate(packet('apps/vpn-a', '203.0.113.7')).egress).toMatchObject({
      kind: 'dropped',
      reason: 'NO_CARRIER',
      detail: 'Device "tun0" on gateway "gw-1" has no carrier',
    });
  });

  it('lets a new pod leave unsteered until programmed; a network policy cannot tell that traffic from steered traffic', () => {
    const pending = PODS.map((p) =>
      p.name === 'vpn-a' ? { ...p, egressGatewayPending: true } : p,
    );
    const model = new CiliumModel(cluster({ pods: pending }));
    model.apply(vpnEgressGatewayPolicy());
    expect(model.evaluate(packet('apps/vpn-a', '203.0.113.7')).egress).toMatchObject({
      path: 'pod-node',
      reason: 'pod-not-yet-programmed',
      sourceAddress: '192.168.1.11',
    });
    model.apply(
      cnp('vpn', 'apps', { endpointSelector: VPN, egress: [{ toCIDR: ['192.168.0.0/16'] }] }),
    );
    expect(model.evaluate(packet('apps/vpn-a', '203.0.113.7')).egress).toEqual({
      kind: 'denied-by-network-policy',
    });
  });

  it('steers IPv6 only from Cilium 1.18', () => {
    const dual = vpnEgressGatewayPolicy({ destinationCIDRs: ['0.0.0.0/0', '::/0'] });
    const old = new CiliumModel(cluster(), { ciliumVersion: '1.17' });
    old.apply(dual);
    expect(old.evaluate(packet('apps/vpn-a', '2001:db8::7')).egress).toMatchObject({
      path: 'pod-node',
      reason: 'no-matching-policy',
      sourceAddress: '2001:db8:1::11',
    });
    const current = new CiliumModel(cluster(), { ciliumVersion: '1.18' });
    current.apply(dual);
    expect(current.evaluate(packet('apps/vpn-a', '2001:db8::7')).egress).toMatchObject({
      path: 'egress-gateway',
      device: 'tun0',
      sourceAddress: '2001:db8:80::2',
    });
  });

  it("selects source pods by namespaceSelector and restricts them by the pod's node", () => {
    const model = new CiliumModel(cluster());
    model.apply(
      vpnEgressGatewayPolicy({
        selectors: [
          {
            namespaceSelector: { matchLabels: { team: 'payments' } },
            nodeSelector: { matchLabels: { zone: 'b' } },
          },
        ],
      }),
    );
    expect(model.evaluate(packet('apps/web', '203.0.113.7')).egress).toMatchObject({
      reason: 'no-matching-policy',
    });
    model.setNodeLabels('worker-1', { ...WORKER.labels, zone: 'b' });
    expect(model.evaluate(packet('apps/web', '203.0.113.7')).egress).toMatchObject({
      reason: 'steered',
    });
    expect(model.evaluate(packet('other/vpn-b', '203.0.113.7')).egress).toMatchObject({
      reason: 'no-matching-policy',
    });
  });

  it('resolves overlapping entries by longest prefix, exclusions included', () => {
    const model = new CiliumModel(cluster());
    model.apply(
      vpnEgressGatewayPolicy({
        destinationCIDRs: ['0.0.0.0/0'],
        excludedCIDRs: ['203.0.113.0/24'],
      }),
    );
    model.apply({
      ...vpnEgressGatewayPolicy({ destinationCIDRs: ['203.0.113.128/25'], excludedCIDRs: [] }),
      metadata: { name: 'narrow' },
    });
    expect(model.evaluate(packet('apps/vpn-a', '203.0.113.200')).egress).toMatchObject({
      reason: 'steered',
      egressGatewayPolicy: 'narrow',
    });
    expect(model.evaluate(packet('apps/vpn-a', '203.0.113.5')).egress).toMatchObject({
      reason: 'excluded',
    });
    const same = new CiliumModel(cluster());
    same.apply({ ...vpnEgressGatewayPolicy({ excludedCIDRs: [] }), metadata: { name: 'z' } });
    same.apply({ ...vpnEgressGatewayPolicy({ excludedCIDRs: [] }), metadata: { name: 'a' } });
    expect(same.evaluate(packet('apps/vpn-a', '198.51.100.5')).egress).toMatchObject({
      egressGatewayPolicy: 'a',
    });
    expect(model.evaluate(packet('apps/vpn-a', '198.51.100.5')).egress).toMatchObject({
      reason: 'steered',
      egressGatewayPolicy: 'egressguard-vpn',
    });
  });
});

describe('CiliumModel: in-cluster destinations and ClusterIP services', () => {
  const DNS_POD: ModelPod = {
    name: 'coredns',
    namespace: 'kube-system',
    labels: { 'k8s-app': 'kube-dns' },
    ips: ['10.42.0.5'],
    node: 'gw-1',
  };
  const services = [
    {
      name: 'kube-dns',
      namespace: 'kube-system',
      clusterIPs: ['10.43.0.10'],
      ports: [{ protocol: 'udp' as const, port: 53, targetPort: 53 }],
      backends: ['10.42.0.5'],
    },
    {
      // The API server listens on the node: its service's backend is a node address.
      name: 'kubernetes',
      namespace: 'default',
      clusterIPs: ['10.43.0.1'],
      ports: [{ protocol: 'tcp' as const, port: 443, targetPort: 6443 }],
      backends: ['192.168.1.10'],
    },
  ];
  const withServices = (): CiliumModel =>
    new CiliumModel(
      cluster({
        pods: [...PODS, DNS_POD],
        namespaces: [...cluster().namespaces, { name: 'kube-system', labels: {} }],
        services,
      }),
    );
  // Every pod of every namespace, and the nodes, as egressguard's compiler writes them.
  const ALL_PODS = {
    matchExpressions: [{ key: 'io.kubernetes.pod.namespace', operator: 'Exists' as const }],
  };

  it('judges a ClusterIP as the backend pod, at its target port', () => {
    const model = withServices();
    model.apply(
      cnp('vpn', 'apps', { endpointSelector: VPN, egress: [{ toEndpoints: [ALL_PODS] }] }),
    );
    const verdict = model.evaluate(packet('apps/vpn-a', '10.43.0.10', 'udp', 53));
    expect(verdict.service).toEqual({
      name: 'kube-system/kube-dns',
      backend: '10.42.0.5',
      port: 53,
    });
    expect(verdict.networkPolicy.allowed).toBe(true);
    expect(verdict.egress).toEqual({ kind: 'in-cluster' });
    // A CIDR rule naming the service CIDR does not match: the packet carries the pod's address.
    const cidrOnly = withServices();
    cidrOnly.apply(
      cnp('vpn', 'apps', { endpointSelector: VPN, egress: [{ toCIDR: ['10.43.0.0/16'] }] }),
    );
    expect(
      cidrOnly.evaluate(packet('apps/vpn-a', '10.43.0.10', 'udp', 53)).networkPolicy,
    ).toMatchObject({
      allowed: false,
      reason: 'default-deny',
    });
  });

  it('judges the kubernetes service as the node behind it, not as a pod', () => {
    const model = withServices();
    model.apply(
      cnp('vpn', 'apps', { endpointSelector: VPN, egress: [{ toEndpoints: [ALL_PODS] }] }),
    );
    expect(allowed(model, packet('apps/vpn-a', '10.43.0.1', 'tcp', 443))).toBe(false);
    model.apply(
      cnp('nodes', 'apps', {
        endpointSelector: VPN,
        egress: [{ toEntities: ['host', 'remote-node'] }],
      }),
    );
    const verdict = model.evaluate(packet('apps/vpn-a', '10.43.0.1', 'tcp', 443));
    expect(verdict.service).toEqual({
      name: 'default/kubernetes',
      backend: '192.168.1.10',
      port: 6443,
    });
    expect(verdict.networkPolicy.allowed).toBe(true);
    // The port policy sees is the target port: a rule on 443 does not allow it.
    const ported = withServices();
    ported.apply(
      cnp('nodes', 'apps', {
        endpointSelector: VPN,
        egress: [
          {
            toEntities: ['remote-node'],
            toPorts: [{ ports: [{ port: '443', protocol: 'TCP' }] }],
          },
        ],
      }),
    );
    expect(allowed(ported, packet('apps/vpn-a', '10.43.0.1', 'tcp', 443))).toBe(false);
  });

  it('selects pods of every namespace with the namespace label, even from a namespaced policy', () => {
    const model = withServices();
    model.apply(
      cnp('vpn', 'apps', { endpointSelector: VPN, egress: [{ toEndpoints: [ALL_PODS] }] }),
    );
    expect(allowed(model, packet('apps/vpn-a', '10.42.0.5', 'udp', 53))).toBe(true);
    expect(allowed(model, packet('apps/vpn-a', '10.42.1.7'))).toBe(true);
    // An empty selector in a namespaced policy stays in its namespace (layer3.rst).
    const narrow = withServices();
    narrow.apply(cnp('vpn', 'apps', { endpointSelector: VPN, egress: [{ toEndpoints: [{}] }] }));
    expect(allowed(narrow, packet('apps/vpn-a', '10.42.1.6'))).toBe(true);
    expect(allowed(narrow, packet('apps/vpn-a', '10.42.0.5', 'udp', 53))).toBe(false);
    // Nodes are not endpoints, and a CIDR allow of the world does not reach them.
    expect(allowed(model, packet('apps/vpn-a', '192.168.1.10'))).toBe(false);
    model.apply(
      cnp('world', 'apps', { endpointSelector: VPN, egress: [{ toCIDR: ['0.0.0.0/0'] }] }),
    );
    expect(allowed(model, packet('apps/vpn-a', '192.168.1.10'))).toBe(false);
  });

  it('refuses a ClusterIP on a port the service does not serve rather than guess', () => {
    const model = withServices();
    expect(() => model.evaluate(packet('apps/vpn-a', '10.43.0.10', 'tcp', 80))).toThrow(ModelError);
  });

  it('drops a packet to a ClusterIP whose service has no backend before policy (DROP_NO_SERVICE)', () => {
    const model = new CiliumModel(
      cluster({
        services: [
          {
            name: 'idle',
            namespace: 'apps',
            clusterIPs: ['10.43.0.99'],
            ports: [{ protocol: 'tcp', port: 80, targetPort: 8080 }],
            backends: [],
          },
        ],
      }),
    );
    const verdict = model.evaluate(packet('apps/vpn-a', '10.43.0.99', 'tcp', 80));
    expect(verdict.networkPolicy.reason).toBe('not-reached');
    expect(verdict.egress).toEqual({
      kind: 'dropped',
      reason: 'DROP_NO_SERVICE',
      node: 'worker-1',
      detail: 'Service apps/idle has no backend',
    });
  });
});

describe('CiliumModel: two egress gateway policies for one pod (steering and backstop)', () => {
  const NO_NODE = {
    matchExpressions: [
      { key: 'egressguard.dev/no-gateway', operator: 'Exists' as const },
      { key: 'egressguard.dev/no-gateway', operator: 'DoesNotExist' as const },
    ],
  };
  const backstop = (): CiliumEgressGatewayPolicy => {
    const base = vpnEgressGatewayPolicy({
      destinationCIDRs: ['0.0.0.0/0'],
      egressGateway: { nodeSelector: NO_NODE },
    });
    return { ...base, metadata: { ...base.metadata, name: 'egressguard-vpn-backstop' } };
  };
  const steering = (): CiliumEgressGatewayPolicy =>
    vpnEgressGatewayPolicy({ destinationCIDRs: ['0.0.0.0/1', '128.0.0.0/1'] });

  it('lets the longer destination prefix win, whatever the order the policies came in', () => {
    for (const order of [
      [steering(), backstop()],
      [backstop(), steering()],
    ]) {
      const model = new CiliumModel(cluster());
      for (const policy of order) model.apply(policy);
      expect(model.evaluate(packet('apps/vpn-a', '203.0.113.7')).egress).toMatchObject({
        path: 'egress-gateway',
        egressGatewayPolicy: 'egressguard-vpn',
      });
    }
  });

  it('drops by the backstop, which no node can match, once the steering policy is gone', () => {
    const model = new CiliumModel(cluster());
    model.apply(steering());
    model.apply(backstop());
    model.delete('CiliumEgressGatewayPolicy', 'egressguard-vpn');
    expect(model.evaluate(packet('apps/vpn-a', '203.0.113.7')).egress).toMatchObject({
      kind: 'dropped',
      reason: 'DROP_NO_EGRESS_GATEWAY',
      egressGatewayPolicy: 'egressguard-vpn-backstop',
    });
  });

  it('keeps the last accepted version of a policy when Cilium refuses an update of it', () => {
    const model = new CiliumModel(cluster());
    model.apply(steering());
    const refused = steering();
    model.apply({
      ...refused,
      spec: {
        ...refused.spec,
        egressGateway: { ...refused.spec.egressGateway, egressIP: '10.8.0.2' },
      },
    });
    const verdict = model.evaluate(packet('apps/vpn-a', '203.0.113.7'));
    expect(verdict.ignoredEgressGatewayPolicies).toEqual(['egressguard-vpn']);
    expect(verdict.egress).toMatchObject({ path: 'egress-gateway', device: 'tun0' });
  });
});
