import { stringify } from 'yaml';
import { AddressSet, EgressguardError, type Family } from '../../core/index.js';
import { carries, type ClusterIR, type HostIR, type HostPodClassIR } from '../../ir/index.js';
import type { Artifact, CompileOptions, Compiler } from '../backend.js';
import { nftablesBackend } from '../nftables/index.js';
import {
  CILIUM_API_VERSION,
  type CidrRule,
  type CiliumEgressGatewayPolicy,
  type CiliumManifest,
  type CiliumNetworkPolicyManifest,
  type EgressPeerRule,
  type IcmpRule,
  type LabelSelector,
  type NetworkPolicyRule,
  type ObjectMeta,
  type PortProtocol,
  type PortRule,
} from './cilium-manifests.js';
import {
  DEFAULT_CILIUM_VERSION,
  SUPPORTED_CILIUM_VERSIONS,
  isSupportedCiliumVersion,
  parseCiliumVersion,
  supportsIpv6EgressGateway,
} from './cilium-version.js';
import {
  computePodVerdicts,
  type IdentityVerdict,
  type L4Piece,
  type VerdictGroup,
} from './pod-verdicts.js';
import { gateAdmission, gateContainer } from './tunnel-gate.js';
import { validateManifests } from './validate-manifests.js';

/** The manifests artifact; the gateway node's own nftables artifacts are prefixed with this. */
export const MANIFESTS_ARTIFACT = 'manifests.yaml';
/** The admission policies that make every pod of a tunnel class start with the tunnel gate. */
export const ADMISSION_ARTIFACT = 'admission.yaml';
/** The tunnel gate's init container, per tunnel class, to list first in the class's pods. */
export const GATE_ARTIFACT = 'tunnel-gate.yaml';
export const NODE_ARTIFACT_PREFIX = 'gateway-node.';

// Cilium's label for a pod's namespace (k8sConst.PodNamespaceLabel).
const NAMESPACE_LABEL = 'io.kubernetes.pod.namespace';
// CNP schema: at most 40 ports per PortRule and 40 fields per ICMPRule.
const MAX_ITEMS = 40;

/** The Cilium release a compile targets, from the `ciliumVersion` option. */
export function resolveCiliumVersion(text: string | undefined): string {
  const wanted = text ?? DEFAULT_CILIUM_VERSION;
  const version = parseCiliumVersion(wanted);
  if (version === undefined || !isSupportedCiliumVersion(version)) {
    throw new EgressguardError('usage', `Cannot compile for Cilium "${wanted}"`, {
      hint: `the pinned CRD schemas cover ${SUPPORTED_CILIUM_VERSIONS.join(' and ')}; pass --cilium-version with one of them`,
    });
  }
  return `${version.major}.${version.minor}`;
}

/**
 * Pure: the Kubernetes classes of a policy → Cilium manifests (a CiliumEgressGatewayPolicy per
 * tunnel class, a network policy per class), every one validated against the pinned CRD schemas
 * and the checks no schema expresses before it is returned; and, when the policy has host
 * classes, the gateway node's own nftables artifacts, compiled by the nftables backend.
 */
export function createCiliumCompiler(): Compiler {
  return {
    compile(ir: HostIR, options: CompileOptions = {}): readonly Artifact[] {
      const version = resolveCiliumVersion(options.options?.['ciliumVersion']);
      if (ir.podClasses.length === 0) {
        throw new EgressguardError(
          'unsupported',
          `Cannot compile policy "${ir.name}" for Cilium: it has no Kubernetes class (a class with "pods"); Cilium enforces pod traffic only`,
          { hint: 'select pods with a class\'s "pods" field, or compile for the host\'s firewall' },
        );
      }
      const cluster = ir.cluster;
      if (cluster === null) {
        // language.rst, "IP/CIDR based": CIDR rules never match pods or nodes, so without
        // knowing where they are the class's rules cannot be written for them.
        throw new EgressguardError(
          'unsupported',
          `Cannot compile policy "${ir.name}" for Cilium: the gateway node's facts do not say where the cluster's pods, services and nodes are, and Cilium judges those by identity, never by address`,
          {
            hint: 'add "cluster": { "podCidrs": [...], "serviceCidrs": [...], "nodeAddresses": [...] } to the gateway node\'s facts (k3s: 10.42.0.0/16, 10.43.0.0/16 and `kubectl get nodes -o wide`)',
          },
        );
      }
      const stamp = options.stamp ?? '';
      const manifests = ir.podClasses.flatMap((cls) =>
        compileClass(ir, cls, { version, stamp, cluster }),
      );
      assertValidManifests(manifests, version);
      const artifacts: Artifact[] = [
        { name: MANIFESTS_ARTIFACT, content: renderManifests(ir, manifests, version) },
        ...gateArtifacts(ir, cluster),
      ];
      if (ir.classes.length > 0) {
        const header = nodeHeader(ir);
        for (const a of nftablesBackend.createCompiler().compile(ir, options)) {
          artifacts.push({
            name: `${NODE_ARTIFACT_PREFIX}${a.name}`,
            content: a.name.endsWith('.nft') ? `${header}${a.content}` : a.content,
          });
        }
      }
      return artifacts;
    },
  };
}

function nodeHeader(ir: HostIR): string {
  const generated = ir.classes.flatMap((c) =>
    c.gatewayFor === null || c.selector.kind !== 'host' || c.via.kind !== 'tunnel'
      ? []
      : [
          `# Class "${c.name}" is generated for the egress gateway of Kubernetes class "${c.gatewayFor}": traffic
# from ${c.selector.sources.describe()} (${c.via.interface}'s address, Cilium's SNAT address) is routed into ${c.via.interface}, blackholed
# when it is down; its kill switch here covers what the node itself sends from that address.
`,
        ],
  );
  return `# The gateway node's own nftables table: node-originated traffic and the node's tunnel only.
# It never sees pod traffic, which Cilium's eBPF host routing redirects past netfilter.
${generated.join('')}`;
}

/**
 * Refuses manifests that fail the pinned schemas or the semantic checks (interface with egressIP,
 * exclusions outside the destinations, an IPv6 gateway before 1.18, …): nothing invalid is output.
 */
export function assertValidManifests(manifests: readonly CiliumManifest[], version: string): void {
  const problems = validateManifests(manifests, { ciliumVersion: version });
  if (problems.length === 0) return;
  throw new EgressguardError(
    'unsupported',
    `Cannot compile for Cilium ${version}: ${problems.map((p) => `${p.object}: ${p.message}`).join('; ')}`,
    {
      hint: 'the generated manifests would not hold on the cluster; change the policy as the message says',
    },
  );
}

/** The name of a class's egress gateway policy (and of its network policy). */
export function egressGatewayPolicyName(
  ir: Pick<HostIR, 'name'>,
  cls: Pick<HostPodClassIR, 'name'>,
): string {
  return `egressguard-${ir.name}-${cls.name}`;
}

/** The name of a class's backstop policy (its egress gateway policy without a gateway). */
export function backstopPolicyName(
  ir: Pick<HostIR, 'name'>,
  cls: Pick<HostPodClassIR, 'name'>,
): string {
  return `${egressGatewayPolicyName(ir, cls)}${BACKSTOP_SUFFIX}`;
}

export const BACKSTOP_SUFFIX = '-backstop';

/** The label egressguard's egress gateway policies carry to say which role they play. */
export const ROLE_LABEL = 'egressguard.dev/role';

function compileClass(
  ir: HostIR,
  cls: HostPodClassIR,
  context: { version: string; stamp: string; cluster: ClusterIR },
): CiliumManifest[] {
  const name = egressGatewayPolicyName(ir, cls);
  const metadata: ObjectMeta = {
    name,
    labels: {
      'app.kubernetes.io/managed-by': 'egressguard',
      'egressguard.dev/policy': ir.name,
      'egressguard.dev/class': cls.name,
    },
    annotations: { 'egressguard.dev/config-hash': context.stamp },
  };
  const out: CiliumManifest[] = [];
  if (cls.via.kind === 'tunnel') {
    out.push(...egressGatewayPolicies(ir, cls, metadata, context));
  }
  out.push(networkPolicy(cls, metadata, context.cluster));
  return out;
}

function podLabels(cls: HostPodClassIR): Record<string, string> {
  return {
    ...cls.selector.labels,
    ...(cls.selector.namespace === null ? {} : { [NAMESPACE_LABEL]: cls.selector.namespace }),
  };
}

/**
 * A tunnel class's two egress gateway policies. The steering policy sends the class through the
 * gateway node that carries the label; its destinations are the two halves of the address space
 * (0.0.0.0/1 and 128.0.0.0/1). The backstop selects the same pods for the whole space (0.0.0.0/0)
 * with a gateway nodeSelector no node can match, so Cilium writes its entries with "no gateway"
 * and drops (DROP_NO_EGRESS_GATEWAY). The egress policy map is one LPM trie keyed by (pod address,
 * destination prefix) (bpf/lib/egress_gateway.h, EGRESS_PREFIX_LEN and
 * lookup_ip4_egress_gw_policy; manager.go addMissingEgressRules writes one entry per policy,
 * endpoint and CIDR): while the steering policy holds, its /1 entries are longer and win; with
 * it deleted, or refused by Cilium (manager.go onAddEgressPolicy: a policy ParseCEGP rejects is
 * never added), the backstop's /0 entry is what the pods meet, and they are dropped as with the
 * tunnel down instead of leaving unsteered. The exclusions are the same in both, so excepted
 * destinations behave alike either way.
 */
function egressGatewayPolicies(
  ir: HostIR,
  cls: HostPodClassIR,
  metadata: ObjectMeta,
  context: { version: string; cluster: ClusterIR },
): CiliumEgressGatewayPolicy[] {
  const { version, cluster } = context;
  const via = cls.via;
  if (via.kind !== 'tunnel') throw new Error('egressGatewayPolicy: not a tunnel class');
  const killSwitch = cls.killSwitch;
  if (killSwitch === null) {
    // Without the label, nothing drops while the tunnel is down: the gateway keeps its cached
    // egress IP and can leak by another device (NOTES, "Interface goes down or changes later").
    throw new EgressguardError(
      'unsupported',
      `Cannot compile Kubernetes class "${cls.name}" for Cilium: it leaves by tunnel "${via.interface}" without a kill switch, and Cilium's egress gateway is no kill switch by itself (after the tunnel goes down it keeps the cached egress IP and can leave by another device)`,
      { hint: 'add "killSwitch: {}" (with the LAN and the cluster under "except")' },
    );
  }
  if (
    !ir.classes.some(
      (c) =>
        c.selector.kind === 'host' && c.via.kind === 'tunnel' && c.via.interface === via.interface,
    )
  ) {
    // NOTES, "interface selects the SNAT address, not the egress device": the gateway routes by
    // `ip route get <dst> from <egress IP>`, so without a rule for the tunnel's address the
    // steered packets leave by the default route, source-NATed to the tunnel address. Binding
    // derives that routing from the tunnel's address in the facts (class "<name>.gateway").
    throw new EgressguardError(
      'unsupported',
      `Cannot compile Kubernetes class "${cls.name}" for Cilium: the gateway node's facts give tunnel "${via.interface}" no address, so no policy routing can be generated for Cilium's SNAT address (\`interface\` picks the address; the node's routing picks the device, so its packets would leave by the uplink)`,
      {
        hint: `compile with the facts of the gateway node while ${via.interface} is up (\`egressguard facts --json\` there), or give the policy a host class with the tunnel's address as its source, via: ${via.interface}`,
      },
    );
  }
  const parsed = parseCiliumVersion(version);
  const families: Family[] = [4];
  if (carries(via, 6)) {
    if (parsed === undefined || !supportsIpv6EgressGateway(parsed)) {
      throw new EgressguardError(
        'unsupported',
        `Cannot compile Kubernetes class "${cls.name}" for Cilium ${version}: tunnel "${via.interface}" carries IPv6 on the gateway node, and Cilium has no IPv6 egress gateway before 1.18, so the class's IPv6 would leave unsteered`,
        {
          hint: 'pass --cilium-version 1.18, or disable IPv6 on the tunnel (the facts then say "ipv6": false and the class\'s IPv6 is denied)',
        },
      );
    }
    families.push(6);
  }
  const all: Readonly<Record<Family, string>> = { 4: '0.0.0.0/0', 6: '::/0' };
  const halves: Readonly<Record<Family, readonly string[]>> = {
    4: ['0.0.0.0/1', '128.0.0.0/1'],
    6: ['::/1', '8000::/1'],
  };
  // Exclusions of the families steered only: always inside destinationCIDRs (schema: "Should be
  // a subset of destinationCIDRs otherwise it will not have any effect"). The cluster's own
  // addresses too: Cilium never steers a pod or a node (EGW doc, "Selecting the destination"),
  // and an address of the pod or service CIDR that no pod or service holds is not steered either.
  const exempt = killSwitch.except.union(cluster.pods).union(cluster.services).union(cluster.nodes);
  const excluded = families.flatMap((f) => exempt.toCidrs(f));
  // A half the exclusions cover whole is left out: one policy must not write one key twice.
  const steered = families.flatMap((f) =>
    halves[f].filter((half) => !exempt.covers(AddressSet.parse([half]))),
  );
  const selectors = [{ podSelector: { matchLabels: podLabels(cls) } }];
  const exclusions = excluded.length === 0 ? {} : { excludedCIDRs: excluded };
  const withRole = (role: string, name: string): ObjectMeta => ({
    ...metadata,
    name,
    labels: { ...metadata.labels, [ROLE_LABEL]: role },
  });
  const out: CiliumEgressGatewayPolicy[] = [];
  if (steered.length > 0) {
    // `interface`, never `egressIP` with it: Cilium ignores a policy with both (EGW doc, warning).
    out.push({
      apiVersion: CILIUM_API_VERSION,
      kind: 'CiliumEgressGatewayPolicy',
      metadata: withRole('steering', metadata.name),
      spec: {
        selectors,
        destinationCIDRs: steered,
        ...exclusions,
        egressGateway: {
          nodeSelector: {
            matchLabels: { [killSwitch.nodeLabel.key]: killSwitch.nodeLabel.value },
          },
          interface: via.interface,
        },
      },
    });
  }
  out.push({
    apiVersion: CILIUM_API_VERSION,
    kind: 'CiliumEgressGatewayPolicy',
    metadata: withRole('backstop', `${metadata.name}${BACKSTOP_SUFFIX}`),
    spec: {
      selectors,
      destinationCIDRs: families.map((f) => all[f]),
      ...exclusions,
      // A label that exists and does not exist: no node can ever match, whatever its labels.
      egressGateway: { nodeSelector: NO_NODE },
    },
  });
  return out;
}

const NO_NODE: LabelSelector = {
  matchExpressions: [
    { key: 'egressguard.dev/no-gateway', operator: 'Exists' },
    { key: 'egressguard.dev/no-gateway', operator: 'DoesNotExist' },
  ],
};

function networkPolicy(
  cls: HostPodClassIR,
  metadata: ObjectMeta,
  cluster: ClusterIR,
): CiliumNetworkPolicyManifest {
  const endpointSelector: LabelSelector = { matchLabels: { ...cls.selector.labels } };
  const describe = (what: string): string => `egressguard class "${cls.name}": ${what}`;
  const verdicts = computePodVerdicts(cls, cluster);
  const specs: NetworkPolicyRule[] = [
    {
      description: describe(
        'default deny made explicit: what no rule below allows is dropped (the "none" entity selects nothing)',
      ),
      endpointSelector,
      enableDefaultDeny: { egress: true },
      egress: [{ toEntities: ['none'] }],
    },
  ];
  // In-cluster destinations by identity: Cilium's CIDR rules never match pods or nodes.
  for (const identity of verdicts.identities) {
    const rule = l3l4Rule({ ...IDENTITY_PEERS[identity.part] }, identity, identity.families);
    if (rule === undefined) continue;
    specs.push({
      description: describe(
        `${identity.part === 'pods' ? 'the pods (and the services in front of them)' : 'the nodes'} of the cluster: ${identity.decidedBy.join(', ')}`,
      ),
      endpointSelector,
      enableDefaultDeny: { egress: true },
      ...rule,
    });
  }
  for (const group of sortGroups(verdicts.cidrGroups)) {
    // Cilium translates every ClusterIP a service holds before policy (cilium/cilium#21251), so a
    // service-CIDR destination that reaches policy is one no service holds: an address by which
    // nothing in the cluster answers, which the egress gateway does not steer (it is excluded).
    // Left out of every CIDR rule, the default deny drops it instead of the pod's node routing it.
    const addresses = group.addresses.subtract(cluster.services);
    const families = ([4, 6] as const).filter((f) => addresses.has(f));
    if (families.length === 0) continue;
    const rule = l3l4Rule({ toCIDRSet: cidrRules(addresses) }, group, families);
    if (rule === undefined) continue;
    specs.push({
      description: describe(group.decidedBy.join(', ')),
      endpointSelector,
      enableDefaultDeny: { egress: true },
      ...rule,
    });
  }
  const { namespace } = cls.selector;
  return namespace === null
    ? { apiVersion: CILIUM_API_VERSION, kind: 'CiliumClusterwideNetworkPolicy', metadata, specs }
    : {
        apiVersion: CILIUM_API_VERSION,
        kind: 'CiliumNetworkPolicy',
        metadata: { ...metadata, namespace },
        specs,
      };
}

// Every pod of every namespace: a selector on the namespace label, which only pods carry, also
// reaches past a namespaced policy's own namespace (layer3.rst, "Egress Allow All Endpoints";
// utils.go getEndpointSelector). Nodes: the host and remote-node entities (layer3.rst,
// "Entities based").
const IDENTITY_PEERS: Readonly<Record<IdentityVerdict['part'], EgressPeerRule>> = {
  pods: {
    toEndpoints: [{ matchExpressions: [{ key: NAMESPACE_LABEL, operator: 'Exists' }] }],
  },
  nodes: { toEntities: ['host', 'remote-node'] },
};

function sortGroups(groups: readonly VerdictGroup[]): VerdictGroup[] {
  const key = (g: VerdictGroup): string =>
    [...g.addresses.toCidrs(4), ...g.addresses.toCidrs(6)][0] ?? '';
  return [...groups].sort(
    (a, b) => key(a).localeCompare(key(b)) || a.decidedBy.join().localeCompare(b.decidedBy.join()),
  );
}

/**
 * A verdict in the form Cilium can express, for one peer (CIDRs or an identity): nothing allowed
 * → nothing (default deny); everything → an L3 allow; no unnameable protocol allowed → an allow
 * listing ports and ICMP; otherwise an L3 allow and a deny of the ports and ICMP that are not
 * allowed (deny beats allow).
 */
function l3l4Rule(
  peer: EgressPeerRule,
  verdict: Pick<VerdictGroup, 'allowed' | 'denied'>,
  families: readonly Family[],
): Pick<NetworkPolicyRule, 'egress' | 'egressDeny'> | undefined {
  if (verdict.allowed.length === 0) return undefined;
  if (verdict.denied.length === 0) return { egress: [peer] };
  if (!verdict.allowed.some((p) => p.kind === 'other')) {
    return { egress: [{ ...peer, ...l4Fields(verdict.allowed, families) }] };
  }
  return {
    egress: [peer],
    egressDeny: [{ ...peer, ...l4Fields(verdict.denied, families) }],
  };
}

function l4Fields(
  pieces: readonly L4Piece[],
  families: readonly Family[],
): Pick<EgressPeerRule, 'toPorts' | 'icmps'> {
  const ports: PortProtocol[] = [];
  for (const piece of mergePorts(pieces)) {
    ports.push({
      port: String(piece.from),
      ...(piece.to === piece.from ? {} : { endPort: piece.to }),
      protocol: piece.protocol,
    });
  }
  const toPorts: PortRule[] = chunk(ports).map((p) => ({ ports: p }));
  // "icmp" means every ICMP type: Cilium matches ICMP by type only, so each type is listed.
  const icmps: IcmpRule[] = pieces.some((p) => p.kind === 'icmp')
    ? families.flatMap((f) =>
        chunk(
          Array.from({ length: 256 }, (_, type) => ({
            family: f === 4 ? ('IPv4' as const) : ('IPv6' as const),
            type,
          })),
        ).map((fields) => ({ fields })),
      )
    : [];
  return {
    ...(toPorts.length === 0 ? {} : { toPorts }),
    ...(icmps.length === 0 ? {} : { icmps }),
  };
}

function mergePorts(
  pieces: readonly L4Piece[],
): { protocol: 'TCP' | 'UDP' | 'SCTP'; from: number; to: number }[] {
  const out: { protocol: 'TCP' | 'UDP' | 'SCTP'; from: number; to: number }[] = [];
  for (const piece of pieces) {
    if (piece.kind !== 'ports') continue;
    const last = out[out.length - 1];
    if (last !== undefined && last.protocol === piece.protocol && last.to + 1 === piece.from) {
      last.to = piece.to;
    } else {
      out.push({ protocol: piece.protocol, from: piece.from, to: piece.to });
    }
  }
  return out;
}

function chunk<T>(items: readonly T[]): T[][] {
  const out: T[][] = [];
  for (let i = 0; i < items.length; i += MAX_ITEMS) out.push(items.slice(i, i + MAX_ITEMS));
  return out;
}

/**
 * An address set as toCIDRSet entries: its prefixes, or the whole family with `except` holes when
 * that is shorter (the internet but the LAN: 0.0.0.0/0 except 192.168.1.0/24).
 */
function cidrRules(set: AddressSet): CidrRule[] {
  const out: CidrRule[] = [];
  for (const family of [4, 6] as const) {
    if (!set.has(family)) continue;
    const plain = set.toCidrs(family);
    const whole = family === 4 ? '0.0.0.0/0' : '::/0';
    const holes = AddressSet.parse([whole]).only(family).subtract(set).toCidrs(family);
    if (holes.length + 1 < plain.length) out.push({ cidr: whole, except: holes });
    else out.push(...plain.map((cidr) => ({ cidr })));
  }
  return out;
}

/**
 * The tunnel gate of every tunnel class (tunnel-gate.ts): the init container its pods start with,
 * and the admission policy that refuses a pod of the class without it. The gate needs to know
 * what leaving by the tunnel looks like from outside, which only the facts can say.
 */
function gateArtifacts(ir: HostIR, cluster: ClusterIR): Artifact[] {
  const gated = ir.podClasses.flatMap((cls) => {
    if (cls.via.kind !== 'tunnel' || cls.killSwitch === null) return [];
    const tunnel = cls.via.interface;
    const exit = cluster.tunnelExits[tunnel];
    if (exit === undefined) {
      throw new EgressguardError(
        'unsupported',
        `Cannot compile Kubernetes class "${cls.name}" for Cilium: the gateway node's facts do not say how a pod sees that it leaves by tunnel "${tunnel}", so no gate can hold a new pod until Cilium steers it (Cilium programs a new pod's egress gateway entry after a delay, and the pod's traffic leaves unsteered meanwhile)`,
        {
          hint: `add "tunnelExits": { "${tunnel}": { "echoUrl": "http://ECHO:PORT/", "addresses": ["EXIT"] } } to "cluster" in the gateway node's facts: an HTTP service beyond the tunnel that answers with the client address it sees, and the address(es) it sees through the tunnel`,
        },
      );
    }
    return [{ cls, exit }];
  });
  if (gated.length === 0) return [];
  const admission = gated.flatMap(({ cls, exit }) =>
    gateAdmission({
      name: `${egressGatewayPolicyName(ir, cls)}-tunnel-gate`,
      className: cls.name,
      podLabels: cls.selector.labels,
      namespace: cls.selector.namespace,
      exit,
      labels: {
        'app.kubernetes.io/managed-by': 'egressguard',
        'egressguard.dev/policy': ir.name,
        'egressguard.dev/class': cls.name,
      },
    }),
  );
  const yaml = (o: object): string =>
    `---\n${stringify(o, { lineWidth: 0, aliasDuplicateObjects: false })}`;
  return [
    {
      name: ADMISSION_ARTIFACT,
      content: `# egressguard: policy "${ir.name}". Generated; do not edit. Kubernetes 1.30 or newer.
# Refuses a pod of a tunnel class that does not start with the tunnel gate (${GATE_ARTIFACT}), and
# a pod relabelled into such a class: Cilium steers a new pod only after a delay, and the gate holds
# the pod's containers until its own traffic is seen leaving by the tunnel's exit.
${admission.map(yaml).join('')}`,
    },
    {
      name: GATE_ARTIFACT,
      content: `# egressguard: policy "${ir.name}". Generated; do not edit.
# The init container every pod of a tunnel class lists FIRST under spec.initContainers (admission.yaml
# refuses the pod otherwise). It asks the echo service beyond the tunnel which address it sees and
# exits once that is the tunnel's exit, so the pod's own containers start only once Cilium steers it.
${gated
  .map(
    ({ cls, exit }) =>
      `# Class "${cls.name}" (tunnel ${cls.via.kind === 'tunnel' ? cls.via.interface : ''}, exit ${exit.addresses.join(', ')}):\n${yaml(gateContainer(exit))}`,
  )
  .join('')}`,
    },
  ];
}

function renderManifests(
  ir: HostIR,
  manifests: readonly CiliumManifest[],
  version: string,
): string {
  const header = `# egressguard: policy "${ir.name}" for Cilium ${version}. Generated; do not edit.
# Apply with kubectl apply -f; the gateway node carries the egress gateway's node label only while
# its tunnel is up (egressguard run --k8s on that node), so Cilium drops instead of leaking.
`;
  return (
    header +
    manifests
      .map((m) => `---\n${stringify(m, { lineWidth: 0, aliasDuplicateObjects: false })}`)
      .join('')
  );
}
