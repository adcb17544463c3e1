import { readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import { parseAllDocuments } from 'yaml';
import { isEgressguardError } from '../../core/index.js';
import { parseHostFacts, type HostFacts } from '../../facts/index.js';
import { lowerForHost } from '../../ir/index.js';
import { parsePolicy } from '../../policy/index.js';
import type {
  CiliumClusterwideNetworkPolicy,
  CiliumEgressGatewayPolicy,
  CiliumManifest,
} from './cilium-manifests.js';
import {
  assertValidManifests,
  createCiliumCompiler,
  MANIFESTS_ARTIFACT,
} from './cilium-compiler.js';
import { validateManifests } from './validate-manifests.js';

const DIR = fileURLToPath(
  new URL('../../../testdata/policies/valid/k3s-vpn-egress/', import.meta.url),
);
const POLICY = readFileSync(`${DIR}policy.yaml`, 'utf8');
const FACTS = parseHostFacts(JSON.parse(readFileSync(`${DIR}facts.json`, 'utf8')), 'facts.json');

function compile(text: string, options: { version?: string; facts?: HostFacts } = {}) {
  const { policy, issues } = parsePolicy(text, `${DIR}policy.yaml`);
  if (policy === undefined) throw new Error(JSON.stringify(issues));
  return createCiliumCompiler().compile(lowerForHost(policy, options.facts ?? FACTS), {
    options: options.version === undefined ? {} : { ciliumVersion: options.version },
  });
}

function manifestsOf(text: string, version?: string): CiliumManifest[] {
  const artifact = compile(text, version === undefined ? {} : { version }).find(
    (a) => a.name === MANIFESTS_ARTIFACT,
  );
  if (artifact === undefined) throw new Error('no manifests');
  return parseAllDocuments(artifact.content).map((d) => d.toJS() as CiliumManifest);
}

function refusal(run: () => unknown): { code: string; message: string; hint?: string } {
  try {
    run();
  } catch (error) {
    if (isEgressguardError(error)) {
      return {
        code: error.code,
        message: error.message,
        ...(error.hint === undefined ? {} : { hint: error.hint }),
      };
    }
    throw error;
  }
  throw new Error('expected a refusal');
}

describe('the cilium compiler', () => {
  it.each(['1.17', '1.18'])(
    'compiles k3s-vpn-egress to manifests that validate on Cilium %s',
    (version) => {
      const manifests = manifestsOf(POLICY, version);
      expect(manifests.map((m) => m.kind)).toEqual([
        'CiliumEgressGatewayPolicy',
        'CiliumEgressGatewayPolicy',
        'CiliumClusterwideNetworkPolicy',
      ]);
      expect(validateManifests(manifests, { ciliumVersion: version })).toEqual([]);
      const gateway = manifests[0] as CiliumEgressGatewayPolicy;
      // interface, never egressIP; the node label the resident sets; exclusions inside destinations.
      expect(gateway.spec.egressGateway).toEqual({
        nodeSelector: { matchLabels: { 'egressguard.dev/gateway-vpn': 'up' } },
        interface: 'tun0',
      });
      // The two halves of the space: longer than the backstop's /0, so they win while they hold.
      expect(gateway.spec.destinationCIDRs).toEqual(['0.0.0.0/1', '128.0.0.0/1']);
      expect(gateway.spec.excludedCIDRs).toEqual(['10.42.0.0/15', '192.168.1.0/24']);
      const backstop = manifests[1] as CiliumEgressGatewayPolicy;
      expect(backstop.metadata.name).toBe(`${gateway.metadata.name}-backstop`);
      expect(backstop.spec.selectors).toEqual(gateway.spec.selectors);
      expect(backstop.spec.destinationCIDRs).toEqual(['0.0.0.0/0']);
      expect(backstop.spec.excludedCIDRs).toEqual(gateway.spec.excludedCIDRs);
      // No node can carry a label that both exists and does not.
      expect(backstop.spec.egressGateway).toEqual({
        nodeSelector: {
          matchExpressions: [
            { key: 'egressguard.dev/no-gateway', operator: 'Exists' },
            { key: 'egressguard.dev/no-gateway', operator: 'DoesNotExist' },
          ],
        },
      });
    },
  );

  it('refuses a tunnel class when the facts do not say how a pod sees the tunnel exit', () => {
    const cluster = FACTS.cluster;
    if (cluster === undefined) throw new Error('no cluster in the facts');
    const facts: HostFacts = { ...FACTS, cluster: { ...cluster, tunnelExits: {} } };
    const refused = refusal(() => compile(POLICY, { facts }));
    expect(refused.code).toBe('unsupported');
    expect(refused.message).toContain('no gate can hold a new pod until Cilium steers it');
    expect(refused.hint).toContain('"tunnelExits": { "tun0":');
  });

  it("compiles the gateway node's own table through the nftables backend, labelled as such", () => {
    const names = compile(POLICY).map((a) => a.name);
    expect(names).toEqual([
      'manifests.yaml',
      'admission.yaml',
      'tunnel-gate.yaml',
      'gateway-node.ruleset.nft',
      'gateway-node.steering.json',
      'gateway-node.lockdown.nft',
    ]);
    const ruleset = compile(POLICY).find((a) => a.name === 'gateway-node.ruleset.nft');
    expect(ruleset?.content.split('\n')[0]).toBe(
      "# The gateway node's own nftables table: node-originated traffic and the node's tunnel only.",
    );
  });

  it('steers IPv6 through the gateway on 1.18 when the tunnel carries it, and refuses it on 1.17', () => {
    const facts: HostFacts = {
      ...FACTS,
      interfaces: FACTS.interfaces.map((i) =>
        i.name === 'tun0'
          ? { name: 'tun0', up: true, addresses: ['10.200.0.2/32', '2001:db8:200::2/128'] }
          : i,
      ),
    };
    const artifact = compile(POLICY, { version: '1.18', facts })[0];
    expect(artifact?.content).toContain('- ::/0');
    expect(refusal(() => compile(POLICY, { version: '1.17', facts }))).toEqual({
      code: 'unsupported',
      message:
        'Cannot compile Kubernetes class "vpn" for Cilium 1.17: tunnel "tun0" carries IPv6 on the gateway node, and Cilium has no IPv6 egress gateway before 1.18, so the class\'s IPv6 would leave unsteered',
      hint: 'pass --cilium-version 1.18, or disable IPv6 on the tunnel (the facts then say "ipv6": false and the class\'s IPv6 is denied)',
    });
  });

  it('refuses manifests that would need interface and egressIP both, or exclusions outside the destinations', () => {
    const [gateway, ...rest] = manifestsOf(POLICY) as [
      CiliumEgressGatewayPolicy,
      ...CiliumManifest[],
    ];
    const both: CiliumEgressGatewayPolicy = {
      ...gateway,
      spec: {
        ...gateway.spec,
        egressGateway: { ...gateway.spec.egressGateway, egressIP: '10.200.0.2' },
      },
    };
    const both_ = refusal(() => {
      assertValidManifests([both, ...rest], '1.18');
    });
    expect(both_.code).toBe('unsupported');
    expect(both_.message).toBe(
      'Cannot compile for Cilium 1.18: CiliumEgressGatewayPolicy/egressguard-k3s-vpn-egress-vpn: egressGateway sets both interface "tun0" and egressIP "10.200.0.2": Cilium ignores such a policy and the traffic leaves unsteered; set only one of them',
    );
    const outside: CiliumEgressGatewayPolicy = {
      ...gateway,
      spec: { ...gateway.spec, destinationCIDRs: ['198.51.100.0/24'] },
    };
    expect(
      refusal(() => {
        assertValidManifests([outside, ...rest], '1.18');
      }).message,
    ).toContain(
      'excludedCIDRs entry "10.42.0.0/15" is not inside destinationCIDRs (198.51.100.0/24): Cilium ignores it; exclude only parts of the destinations',
    );
  });

  it('refuses a tunnel class without a kill switch: the egress gateway alone is no kill switch', () => {
    const text = POLICY.replace('    killSwitch:\n      except: [lan, cluster]\n', '');
    expect(text).not.toBe(POLICY);
    const { code, message } = refusal(() => compile(text));
    expect(code).toBe('unsupported');
    expect(message).toContain(
      'Cannot compile Kubernetes class "vpn" for Cilium: it leaves by tunnel "tun0" without a kill switch',
    );
  });

  it("generates the gateway node's policy routing and kill switch from the class and the facts", () => {
    const steering = JSON.parse(
      compile(POLICY).find((a) => a.name === 'gateway-node.steering.json')?.content ?? '{}',
    ) as { rules: { from: string }[]; routes: { type: string; destination: string }[] };
    // tun0's address (Cilium's SNAT address) is routed into tun0, blackholed behind it, and the
    // class's exceptions are thrown back to the main table.
    expect(steering.rules.map((r) => r.from)).toEqual(['10.200.0.2/32']);
    expect(steering.routes.map((r) => `${r.type} ${r.destination}`)).toEqual([
      'unicast 0.0.0.0/0',
      'blackhole 0.0.0.0/0',
      'throw 10.42.0.0/15',
      'throw 192.168.1.0/24',
    ]);
    const ruleset = compile(POLICY).find((a) => a.name === 'gateway-node.ruleset.nft');
    expect(ruleset?.content).toContain(
      '# Class "vpn.gateway" is generated for the egress gateway of Kubernetes class "vpn"',
    );
    expect(ruleset?.content).toContain('counter name n_vpn.gateway/kill-switch drop');
    // The tunnel's address moved: the generated routing follows the facts.
    const moved: HostFacts = {
      ...FACTS,
      interfaces: FACTS.interfaces.map((i) =>
        i.name === 'tun0' ? { ...i, addresses: ['10.200.7.9/24'] } : i,
      ),
    };
    const again = compile(POLICY, { facts: moved }).find(
      (a) => a.name === 'gateway-node.steering.json',
    );
    expect(again?.content).toContain('"from": "10.200.7.9/32"');
  });

  it('uses a host class of the policy that already routes the tunnel address, and generates none', () => {
    const text = POLICY.replace(
      '\nrequirements:',
      '  node-own:\n    origin: host\n    sources: [10.200.0.2]\n    via: tun0\n    killSwitch:\n      except: [lan]\n    default: allow\n\nrequirements:',
    );
    expect(text).not.toBe(POLICY);
    const ruleset = compile(text).find((a) => a.name === 'gateway-node.ruleset.nft');
    expect(ruleset?.content).toContain('class node-own');
    expect(ruleset?.content).not.toContain('vpn.gateway');
  });

  it('refuses a tunnel class when the facts give the tunnel no address to route', () => {
    const down: HostFacts = {
      ...FACTS,
      interfaces: FACTS.interfaces.filter((i) => i.name !== 'tun0'),
    };
    const { code, message, hint } = refusal(() => compile(POLICY, { facts: down }));
    expect(code).toBe('unsupported');
    expect(message).toBe(
      'Cannot compile Kubernetes class "vpn" for Cilium: the gateway node\'s facts give tunnel "tun0" no address, so no policy routing can be generated for Cilium\'s SNAT address (`interface` picks the address; the node\'s routing picks the device, so its packets would leave by the uplink)',
    );
    expect(hint).toContain('while tun0 is up');
  });

  it('refuses a rule Cilium cannot express, naming it', () => {
    const gre = POLICY.replace('proto: tcp, ports: [25]', 'proto: gre');
    expect(refusal(() => compile(gre)).message).toBe(
      'Cannot compile rule "vpn-no-smtp" of Kubernetes class "vpn" for Cilium: protocol 47 cannot be matched (Cilium\'s toPorts names TCP, UDP and SCTP, its icmps ICMP)',
    );
    const audit = POLICY.replace('id: vpn-no-smtp, action: deny', 'id: vpn-no-smtp, action: audit');
    expect(refusal(() => compile(audit)).message).toContain('Cilium has no per-rule audit');
  });

  it('refuses a Cilium release the pinned schemas do not cover, and a policy without pods', () => {
    expect(refusal(() => compile(POLICY, { version: '1.16' }))).toMatchObject({
      code: 'usage',
      message: 'Cannot compile for Cilium "1.16"',
    });
    const hostOnly = readFileSync(
      fileURLToPath(
        new URL('../../../testdata/policies/valid/linux-vpn-gateway/policy.yaml', import.meta.url),
      ),
      'utf8',
    );
    expect(refusal(() => compile(hostOnly)).code).toBe('unsupported');
  });

  it('writes ICMP as every type of the family, in icmps rules of at most 40 fields', () => {
    const text = POLICY.replace(
      '      - { id: vpn-no-lan, action: deny, to: lan }\n    default: allow',
      '      - { id: vpn-no-lan, action: deny, to: lan }\n      - { id: vpn-ping, action: allow, to: [198.51.100.0/24], proto: icmp }\n    default: deny',
    );
    expect(text).not.toBe(POLICY);
    const manifests = manifestsOf(text);
    expect(validateManifests(manifests)).toEqual([]);
    const peers = JSON.stringify(
      manifests.find((m) => m.kind === 'CiliumClusterwideNetworkPolicy'),
    );
    expect(peers).toContain('"icmps"');
    expect(peers).toContain('{"family":"IPv4","type":255}');
  });

  describe('in-cluster destinations, judged by the rules and written as identities', () => {
    const rulesOf = (text: string) => {
      const network = manifestsOf(text).find(
        (m): m is CiliumClusterwideNetworkPolicy => m.kind === 'CiliumClusterwideNetworkPolicy',
      );
      if (network === undefined) throw new Error('no network policy');
      return network.specs ?? [];
    };
    const pods = { matchExpressions: [{ key: 'io.kubernetes.pod.namespace', operator: 'Exists' }] };

    it("writes the pods' verdict as toEndpoints of every namespace, and nothing for nodes the rules deny", () => {
      const specs = rulesOf(POLICY);
      const identity = specs.filter((r) =>
        [...(r.egress ?? []), ...(r.egressDeny ?? [])].some(
          (e) => e.toEndpoints !== undefined || e.toEntities?.includes('host') === true,
        ),
      );
      // Pods (and the services in front of them): all but mail. Nodes are in the LAN: denied.
      expect(identity).toHaveLength(1);
      expect(identity[0]?.egress).toEqual([{ toEndpoints: [pods] }]);
      expect(identity[0]?.egressDeny).toEqual([
        { toEndpoints: [pods], toPorts: [{ ports: [{ port: '25', protocol: 'TCP' }] }] },
      ]);
      // Nothing allows the whole cluster any more.
      expect(JSON.stringify(specs)).not.toContain('"cluster"');
    });

    it('writes an allow of the nodes as the host and remote-node entities, with its ports', () => {
      const text = POLICY.replace(
        '      - { id: vpn-no-lan, action: deny, to: lan }',
        '      - { id: vpn-kubelet, action: allow, to: [192.168.1.21, 192.168.1.22], proto: tcp, ports: [10250] }\n      - { id: vpn-no-lan, action: deny, to: lan }',
      );
      expect(text).not.toBe(POLICY);
      const nodes = rulesOf(text).filter((r) =>
        (r.egress ?? []).some((e) => e.toEntities?.includes('host') === true),
      );
      expect(nodes.map((r) => r.egress)).toEqual([
        [
          {
            toEntities: ['host', 'remote-node'],
            toPorts: [{ ports: [{ port: '10250', protocol: 'TCP' }] }],
          },
        ],
      ]);
      expect(nodes[0]?.description).toContain('vpn-kubelet');
    });

    it('refuses rules that judge part of the pods apart from the rest: Cilium has no pod addresses', () => {
      const text = POLICY.replace(
        '      - { id: vpn-no-lan, action: deny, to: lan }',
        '      - { id: vpn-no-lan, action: deny, to: lan }\n      - { id: vpn-some-pods, action: deny, to: [10.42.5.0/24] }',
      );
      expect(refusal(() => compile(text))).toEqual({
        code: 'unsupported',
        message:
          'Cannot compile Kubernetes class "vpn" for Cilium: its rules judge the cluster\'s pod addresses in parts (10.42.0.0/22, 10.42.4.0/24, … (8 prefixes) by "vpn-no-smtp", "vpn/default"; 10.42.5.0/24 by "vpn-no-smtp", "vpn-some-pods"), and Cilium matches pods by identity, never by address',
        hint: "let each rule name all of the cluster's pod addresses or none of them (the facts' \"cluster\" says where they are), or leave those destinations to the cluster's own network policies",
      });
    });

    it('refuses rules that judge the services apart from the pods behind them, and nodes in parts', () => {
      const services = POLICY.replace(
        '      - { id: vpn-no-lan, action: deny, to: lan }',
        '      - { id: vpn-no-lan, action: deny, to: lan }\n      - { id: vpn-no-services, action: deny, to: [10.43.0.0/16], proto: udp }',
      );
      expect(refusal(() => compile(services)).message).toBe(
        'Cannot compile Kubernetes class "vpn" for Cilium: its rules judge the service addresses (by "vpn-no-services", "vpn-no-smtp", "vpn/default") differently from the pods (by "vpn-no-smtp", "vpn/default"), and Cilium translates a ClusterIP to a pod behind it before policy and judges that pod',
      );
      const oneNode = POLICY.replace(
        '      - { id: vpn-no-lan, action: deny, to: lan }',
        '      - { id: vpn-one-node, action: allow, to: [192.168.1.21] }\n      - { id: vpn-no-lan, action: deny, to: lan }',
      );
      expect(refusal(() => compile(oneNode)).message).toContain(
        "its rules judge the cluster's node addresses in parts",
      );
    });

    it("refuses without the cluster in the gateway node's facts, and says what to add", () => {
      const facts: HostFacts = { ...FACTS };
      delete facts.cluster;
      const { code, message, hint } = refusal(() => compile(POLICY, { facts }));
      expect(code).toBe('unsupported');
      expect(message).toBe(
        'Cannot compile policy "k3s-vpn-egress" for Cilium: the gateway node\'s facts do not say where the cluster\'s pods, services and nodes are, and Cilium judges those by identity, never by address',
      );
      expect(hint).toContain('"cluster": { "podCidrs"');
    });

    it('excludes the cluster from the egress gateway even when the kill switch does not except it', () => {
      const text = POLICY.replace('except: [lan, cluster]', 'except: [lan]');
      expect(text).not.toBe(POLICY);
      const gateway = manifestsOf(text)[0] as CiliumEgressGatewayPolicy;
      expect(gateway.spec.excludedCIDRs).toEqual(['10.42.0.0/15', '192.168.1.0/24']);
    });
  });
});
