import { describe, expect, it } from 'vitest';
import {
  denyAllClusterwidePolicy,
  vpnEgressGatewayPolicy,
  vpnNetworkPolicy,
} from '../../../sim/cilium/test-manifests.js';
import { type ManifestProblemCode, validateManifests } from './validate-manifests.js';

function codes(objects: readonly unknown[], ciliumVersion?: string): ManifestProblemCode[] {
  return validateManifests(objects, ciliumVersion === undefined ? {} : { ciliumVersion }).map(
    (p) => p.code,
  );
}

describe('validateManifests', () => {
  it('accepts the incident-shaped egress gateway policy and network policies on 1.17 and 1.18', () => {
    const objects = [vpnEgressGatewayPolicy(), vpnNetworkPolicy(), denyAllClusterwidePolicy()];
    expect(validateManifests(objects, { ciliumVersion: '1.17' })).toEqual([]);
    expect(validateManifests(objects, { ciliumVersion: '1.18.2' })).toEqual([]);
    expect(validateManifests(objects)).toEqual([]);
  });

  it('refuses a Cilium release the pinned schemas do not cover', () => {
    const [problem, ...rest] = validateManifests([vpnEgressGatewayPolicy()], {
      ciliumVersion: '1.20',
    });
    expect(rest).toEqual([]);
    expect(problem?.code).toBe('unsupported-cilium-version');
    expect(problem?.message).toBe(
      'Cannot validate for Cilium "1.20": the pinned schemas cover 1.17 and 1.18; pass one of those',
    );
    expect(codes([], 'one.eighteen')).toEqual(['unsupported-cilium-version']);
  });

  it('refuses objects that are not a pinned Cilium CRD', () => {
    const problems = validateManifests([
      { apiVersion: 'v1', kind: 'ConfigMap', metadata: { name: 'x' } },
      { ...vpnEgressGatewayPolicy(), apiVersion: 'cilium.io/v2alpha1' },
      'not an object',
    ]);
    expect(problems.map((p) => [p.code, p.index, p.object])).toEqual([
      ['unknown-kind', 0, 'ConfigMap/x'],
      ['unknown-kind', 1, 'CiliumEgressGatewayPolicy/egressguard-vpn'],
      ['unknown-kind', 2, 'object #3'],
    ]);
    expect(problems[1]?.message).toContain('apiVersion "cilium.io/v2alpha1"');
  });

  describe('the pinned CRD schemas', () => {
    it('reject an unknown field, with its path', () => {
      const policy = vpnEgressGatewayPolicy();
      const bad = { ...policy, spec: { ...policy.spec, egressGateways: [] } };
      const problems = validateManifests([bad]);
      expect(problems).toEqual([
        {
          code: 'schema',
          index: 0,
          object: 'CiliumEgressGatewayPolicy/egressguard-vpn',
          path: 'spec',
          message: 'Unknown field "egressGateways" (CiliumEgressGatewayPolicy schema, Cilium 1.18)',
        },
      ]);
    });

    it('reject a missing required field and a wrong enum value', () => {
      const policy = vpnEgressGatewayPolicy();
      const spec: Record<string, unknown> = { ...policy.spec };
      delete spec['destinationCIDRs'];
      const network = vpnNetworkPolicy({
        egress: [{ toPorts: [{ ports: [{ port: '443', protocol: 'ICMP' as 'TCP' }] }] }],
      });
      const problems = validateManifests([{ ...policy, spec }, network]);
      expect(problems.map((p) => [p.code, p.path, p.message])).toEqual([
        [
          'schema',
          'spec',
          "Must have required property 'destinationCIDRs' (CiliumEgressGatewayPolicy schema, Cilium 1.18)",
        ],
        [
          'schema',
          'spec.egress[0].toPorts[0].ports[0].protocol',
          'Must be one of "TCP", "UDP", "SCTP", "ANY" (CiliumNetworkPolicy schema, Cilium 1.18)',
        ],
      ]);
    });

    it('check the cidr format for real (a malformed prefix fails, host bits pass)', () => {
      const bad = vpnNetworkPolicy({ egress: [{ toCIDR: ['10.0.0.0/33', '10.1.2.3/8'] }] });
      const problems = validateManifests([bad]);
      expect(problems.map((p) => p.path)).toEqual(['spec.egress[0].toCIDR[0]']);
      expect(problems[0]?.message).toBe(
        'Must match format "cidr" (CiliumNetworkPolicy schema, Cilium 1.18)',
      );
    });

    it('compile the RE2 pattern \\PC of the log field', () => {
      const ok = {
        ...vpnNetworkPolicy(),
        spec: { ...vpnNetworkPolicy().spec, log: { value: 'vpn' } },
      };
      const bad = {
        ...vpnNetworkPolicy(),
        spec: { ...vpnNetworkPolicy().spec, log: { value: 'a\u0007bell' } },
      };
      expect(codes([ok])).toEqual([]);
      expect(validateManifests([bad]).map((p) => p.path)).toEqual(['spec.log.value']);
    });

    it('take IPv6 egress gateway destinations only from 1.18 (the 1.17 schema is IPv4-only)', () => {
      const dual = vpnEgressGatewayPolicy({ destinationCIDRs: ['0.0.0.0/0', '::/0'] });
      expect(codes([dual], '1.18')).toEqual([]);
      expect(codes([dual], '1.17')).toEqual(['schema', 'ipv6-egress-gateway-unsupported']);
    });
  });

  describe('the checks no schema expresses', () => {
    it('interface-and-egress-ip: both set means Cilium ignores the policy', () => {
      const policy = vpnEgressGatewayPolicy();
      const both = vpnEgressGatewayPolicy({
        egressGateway: { ...policy.spec.egressGateway, egressIP: '10.8.0.2' },
      });
      const problems = validateManifests([both]);
      expect(problems).toEqual([
        {
          code: 'interface-and-egress-ip',
          index: 0,
          object: 'CiliumEgressGatewayPolicy/egressguard-vpn',
          path: 'spec.egressGateway',
          message:
            'egressGateway sets both interface "tun0" and egressIP "10.8.0.2": Cilium ignores such a policy and the traffic leaves unsteered; set only one of them',
        },
      ]);
    });

    it('excluded-outside-destinations: each stray exclusion, by index', () => {
      const stray = vpnEgressGatewayPolicy({
        destinationCIDRs: ['198.51.100.0/24', '203.0.113.0/24'],
        excludedCIDRs: ['203.0.113.128/25', '192.168.0.0/16', '198.51.100.0/23'],
      });
      const problems = validateManifests([stray]);
      expect(problems.map((p) => [p.code, p.path])).toEqual([
        ['excluded-outside-destinations', 'spec.excludedCIDRs[1]'],
        ['excluded-outside-destinations', 'spec.excludedCIDRs[2]'],
      ]);
      expect(problems[0]?.message).toBe(
        'excludedCIDRs entry "192.168.0.0/16" is not inside destinationCIDRs (198.51.100.0/24, 203.0.113.0/24): Cilium ignores it; exclude only parts of the destinations',
      );
    });

    it('an exclusion covered by two adjacent destinations together is inside them', () => {
      const split = vpnEgressGatewayPolicy({
        destinationCIDRs: ['10.0.0.0/9', '10.128.0.0/9'],
        excludedCIDRs: ['10.0.0.0/8'],
      });
      expect(codes([split])).toEqual([]);
    });

    it('egress-ip-family: an egressIP of one family with destinations of another', () => {
      const mixed = vpnEgressGatewayPolicy({
        destinationCIDRs: ['0.0.0.0/0', '::/0'],
        excludedCIDRs: [],
        egressGateway: {
          nodeSelector: { matchLabels: { 'egressguard.dev/gateway': 'vpn' } },
          egressIP: '10.8.0.2',
        },
      });
      const problems = validateManifests([mixed], { ciliumVersion: '1.18' });
      expect(problems.map((p) => [p.code, p.path])).toEqual([
        ['egress-ip-family', 'spec.egressGateway.egressIP'],
      ]);
      expect(problems[0]?.message).toBe(
        'egressIP "10.8.0.2" is IPv4 but destinationCIDRs has IPv6 "::/0": one family per egressIP; use interface for dual-stack, or one policy per family',
      );
    });

    it('ipv6-egress-gateway-unsupported names the entry and the release', () => {
      const v6 = vpnEgressGatewayPolicy({ destinationCIDRs: ['::/0'], excludedCIDRs: [] });
      const problems = validateManifests([v6], { ciliumVersion: '1.17.1' });
      const semantic = problems.filter((p) => p.code !== 'schema');
      expect(semantic).toEqual([
        expect.objectContaining({
          code: 'ipv6-egress-gateway-unsupported',
          path: 'spec.destinationCIDRs[0]',
          message:
            'destinationCIDRs entry "::/0" is IPv6, but Cilium 1.17.1 has no IPv6 egress gateway (from 1.18): target Cilium 1.18 or block IPv6 for this class by other means',
        }),
      ]);
    });

    it('no-selectors, empty-selector and selects-all-pods', () => {
      expect(codes([vpnEgressGatewayPolicy({ selectors: [] })])).toEqual(['no-selectors']);
      const nodeOnly = vpnEgressGatewayPolicy({
        selectors: [{ nodeSelector: { matchLabels: { 'kubernetes.io/os': 'linux' } } }],
      });
      expect(codes([nodeOnly])).toEqual(['empty-selector']);
      const everything = vpnEgressGatewayPolicy({
        selectors: [{ podSelector: {}, namespaceSelector: { matchLabels: {} } }],
      });
      const problems = validateManifests([everything]);
      expect(problems.map((p) => [p.code, p.path])).toEqual([
        ['selects-all-pods', 'spec.selectors[0]'],
      ]);
      const namespaced = vpnEgressGatewayPolicy({
        selectors: [{ namespaceSelector: { matchLabels: { team: 'vpn' } } }],
      });
      expect(codes([namespaced])).toEqual([]);
    });

    it('empty-node-selector: every node would qualify as the gateway', () => {
      const policy = vpnEgressGatewayPolicy();
      const any = vpnEgressGatewayPolicy({
        egressGateway: { ...policy.spec.egressGateway, nodeSelector: {} },
      });
      expect(codes([any])).toEqual(['empty-node-selector']);
    });

    it('except-outside-cidr: a toCIDRSet exception outside its cidr', () => {
      const stray = vpnNetworkPolicy({
        egressDeny: [
          { toCIDRSet: [{ cidr: '10.0.0.0/8', except: ['10.1.0.0/16', '172.16.0.0/12'] }] },
        ],
      });
      const problems = validateManifests([stray]);
      expect(problems.map((p) => [p.code, p.path])).toEqual([
        ['except-outside-cidr', 'spec.egressDeny[0].toCIDRSet[0].except[1]'],
      ]);
    });

    it('missing-namespace and duplicate-name', () => {
      const policy = vpnNetworkPolicy();
      const meta: Record<string, unknown> = { ...policy.metadata };
      delete meta['namespace'];
      expect(codes([{ ...policy, metadata: meta }])).toEqual(['missing-namespace']);
      const problems = validateManifests([vpnEgressGatewayPolicy(), vpnEgressGatewayPolicy()]);
      expect(problems.map((p) => [p.code, p.index])).toEqual([['duplicate-name', 1]]);
      // The same name in two kinds or two namespaces is no clash.
      const other = { ...policy, metadata: { ...policy.metadata, namespace: 'other' } };
      expect(codes([policy, other, vpnEgressGatewayPolicy()])).toEqual([]);
    });
  });
});
