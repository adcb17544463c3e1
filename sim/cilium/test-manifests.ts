import type {
  CiliumClusterwideNetworkPolicy,
  CiliumEgressGatewayPolicy,
  CiliumNetworkPolicy,
} from '../../src/backends/cilium/cilium-manifests.js';

/**
 * Manifests shaped like the k3s-vpn-egress incident (DESIGN.md §1B), written by hand for the tests
 * of the validator and the model: pods labelled egress-class=vpn in namespace "apps" leave through
 * tun0 on the node labelled egressguard.dev/gateway=vpn; the LAN is excluded.
 */
export const GATEWAY_LABEL = { key: 'egressguard.dev/gateway', value: 'vpn' } as const;

export function vpnEgressGatewayPolicy(
  overrides: Partial<CiliumEgressGatewayPolicy['spec']> = {},
): CiliumEgressGatewayPolicy {
  return {
    apiVersion: 'cilium.io/v2',
    kind: 'CiliumEgressGatewayPolicy',
    metadata: { name: 'egressguard-vpn' },
    spec: {
      selectors: [
        {
          podSelector: {
            matchLabels: { 'egress-class': 'vpn', 'io.kubernetes.pod.namespace': 'apps' },
          },
        },
      ],
      destinationCIDRs: ['0.0.0.0/0'],
      excludedCIDRs: ['192.168.0.0/16'],
      egressGateway: {
        nodeSelector: { matchLabels: { [GATEWAY_LABEL.key]: GATEWAY_LABEL.value } },
        interface: 'tun0',
      },
      ...overrides,
    },
  };
}

export function vpnNetworkPolicy(
  overrides: Partial<NonNullable<CiliumNetworkPolicy['spec']>> = {},
): CiliumNetworkPolicy {
  return {
    apiVersion: 'cilium.io/v2',
    kind: 'CiliumNetworkPolicy',
    metadata: { name: 'egressguard-vpn', namespace: 'apps' },
    spec: {
      endpointSelector: { matchLabels: { 'egress-class': 'vpn' } },
      egress: [
        { toCIDRSet: [{ cidr: '0.0.0.0/0', except: ['10.0.0.0/8'] }] },
        {
          toEntities: ['cluster'],
          toPorts: [{ ports: [{ port: '53', protocol: 'UDP' }] }],
        },
      ],
      egressDeny: [{ toCIDR: ['203.0.113.66/32'] }],
      ...overrides,
    },
  };
}

export function denyAllClusterwidePolicy(): CiliumClusterwideNetworkPolicy {
  return {
    apiVersion: 'cilium.io/v2',
    kind: 'CiliumClusterwideNetworkPolicy',
    metadata: { name: 'egressguard-quarantine' },
    spec: {
      endpointSelector: { matchLabels: { 'egress-class': 'quarantine' } },
      egressDeny: [{ toEntities: ['world'] }],
    },
  };
}
