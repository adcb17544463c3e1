import {
  AddressSet,
  type Family,
  type ParsedAddress,
  formatAddress,
  parseAddress,
  parsePrefix,
} from '../../src/core/index.js';
import {
  type CiliumEgressGatewayPolicy,
  type CiliumManifest,
  type CiliumNetworkPolicyManifest,
  type EgressPeerRule,
  type IcmpField,
  type LabelSelector,
  type NetworkPolicyRule,
  type PortProtocol,
  listPolicyRules,
} from '../../src/backends/cilium/cilium-manifests.js';
import {
  type CiliumVersion,
  DEFAULT_CILIUM_VERSION,
  parseCiliumVersion,
  supportsIpv6EgressGateway,
} from '../../src/backends/cilium/cilium-version.js';
import {
  mapSelectorKeys,
  matchesLabelSelector,
  selectorHasKey,
} from '../../src/backends/cilium/label-selector.js';
import {
  type ModelNodeNetwork,
  deviceWithAddress,
  firstAddress,
  lookupRoute,
  nodeAddresses,
} from './node-routing-model.js';

/*
 * A MODEL of Cilium's semantics for pod egress: network policy (CNP/CCNP) and the egress gateway
 * (CEGP). It stands in for a cluster, which cannot run here, and is written from Cilium's
 * documentation and code, not from egressguard's compiler, so that a differential test between
 * the two means something. Each behaviour cites its source: "NOTES" is the team's line-cited
 * reference, shared/reference/cilium/NOTES.md; "EGW doc" is Cilium's
 * Documentation/network/egress-gateway/egress-gateway.rst; "layer3.rst"/"layer4.rst" are
 * Documentation/security/policy/; "utils.go" is pkg/k8s/apis/cilium.io/utils/utils.go; "policy.go"
 * is pkg/egressgateway/policy.go; "CNP schema" is schema/cilium/ciliumnetworkpolicy_v2.json.
 *
 * A packet to a ClusterIP is judged as the packet to its backend (kube-proxy replacement
 * translates it first; ModelService). What it does not model (an input that uses it is refused
 * with a ModelError): a ClusterIP on a port it does not serve, toFQDNs,
 * toServices, toNodes, toGroups, toRequires, cidrGroupRef/cidrGroupSelector, named ports and
 * port "0", L7 rules, the entities kube-apiserver/ingress/init/health/unmanaged, egressGateways[]
 * (several gateways), Cluster Mesh.
 */

/** An input the model does not implement: refused rather than guessed. */
export class ModelError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'ModelError';
  }
}

export interface ModelNode {
  readonly name: string;
  readonly labels: Readonly<Record<string, string>>;
  /** The node's InternalIPs: what other nodes know it by (remote-node identity). */
  readonly internalIPs: readonly string[];
  readonly network: ModelNodeNetwork;
}

export interface ModelNamespace {
  readonly name: string;
  readonly labels: Readonly<Record<string, string>>;
}

export interface ModelPod {
  readonly name: string;
  readonly namespace: string;
  readonly labels: Readonly<Record<string, string>>;
  readonly ips: readonly string[];
  readonly node: string;
  /**
   * A new pod the egress gateway has not picked up yet: "There is a delay before egress gateway
   * policies are applied for those pods" (EGW doc; NOTES, "New pods").
   */
  readonly egressGatewayPending?: boolean;
}

/**
 * A ClusterIP service. With kube-proxy replacement (which the egress gateway requires) Cilium
 * translates a ClusterIP to one backend "as early as possible (even on the socket level if
 * SockLB is enabled). Therefore, the actual traffic on the wire will always contain the podIP"
 * (cilium/cilium#21251, maintainer gandro): network policy and the egress gateway see the
 * backend, never the ClusterIP.
 */
export interface ModelService {
  readonly name: string;
  readonly namespace: string;
  readonly clusterIPs: readonly string[];
  readonly ports: readonly {
    readonly protocol: 'tcp' | 'udp' | 'sctp';
    readonly port: number;
    readonly targetPort: number;
  }[];
  /** The backends' addresses (its EndpointSlices): pods, or a node for the kubernetes service. */
  readonly backends: readonly string[];
}

export interface ModelCluster {
  readonly nodes: readonly ModelNode[];
  readonly namespaces: readonly ModelNamespace[];
  readonly pods: readonly ModelPod[];
  readonly services?: readonly ModelService[];
}

export type ModelProtocol = 'tcp' | 'udp' | 'sctp' | 'icmp';

export interface ModelPacket {
  readonly from: { readonly namespace: string; readonly name: string };
  readonly to: string;
  /** "icmp" means ICMPv6 for an IPv6 destination. */
  readonly protocol: ModelProtocol;
  readonly port?: number;
  readonly icmpType?: number;
}

export interface RuleRef {
  /** "CiliumNetworkPolicy/apps/name" or "CiliumClusterwideNetworkPolicy/name". */
  readonly policy: string;
  /** e.g. "spec.egressDeny[0]" or "specs[1].egress[2]". */
  readonly rule: string;
}

export interface NetworkPolicyVerdict {
  readonly allowed: boolean;
  /**
   * - no-default-deny: no selecting rule puts egress in default deny, nothing denies: allowed;
   * - allow-rule: an egress rule allows it; deny-rule: an egressDeny rule matches (beats allows);
   * - default-deny: the endpoint is in default deny and nothing allows it;
   * - not-reached: the packet was refused before policy (a ClusterIP without backends).
   */
  readonly reason: 'no-default-deny' | 'allow-rule' | 'deny-rule' | 'default-deny' | 'not-reached';
  readonly defaultDeny: boolean;
  readonly allowedBy: readonly RuleRef[];
  readonly deniedBy: readonly RuleRef[];
}

export type DropReason =
  /** No node matches the gateway nodeSelector (bpf/lib/egress_gateway.h). */
  | 'DROP_NO_EGRESS_GATEWAY'
  /** The gateway could not select an egress IP when the policy was applied. */
  | 'DROP_NO_EGRESS_IP'
  /** The FIB lookup failed: no route, or a blackhole/unreachable/prohibit route. */
  | 'DROP_NO_FIB'
  /** The route's device has no carrier: the packet is lost there. Not a Cilium drop reason. */
  | 'NO_CARRIER'
  /**
   * A ClusterIP whose service has no backend: Cilium's socket load balancer fails the connect
   * (bpf/bpf_sock.c __sock4_xlate_fwd: `svc->count == 0` → -EHOSTUNREACH), and its per-packet one
   * drops it ("Service backend not found", bpf/lib/lb.h lb4_local → DROP_NO_SERVICE).
   */
  | 'DROP_NO_SERVICE';

export type EgressOutcome =
  | { readonly kind: 'denied-by-network-policy' }
  /** To a pod or a node: not masqueraded, not steered (EGW doc, "Selecting the destination"). */
  | { readonly kind: 'in-cluster' }
  | {
      readonly kind: 'leaves';
      /** Left from the pod's own node, or from the egress gateway node. */
      readonly path: 'pod-node' | 'egress-gateway';
      /** Why it took that path. */
      readonly reason:
        'steered' | 'no-matching-policy' | 'excluded' | 'ignored-policy' | 'pod-not-yet-programmed';
      readonly node: string;
      readonly device: string;
      readonly sourceAddress: string;
      readonly egressGatewayPolicy?: string;
      /**
       * The egress IP was picked earlier and no longer matches the gateway (not on the
       * interface the policy names, or on no device at all): the stale-IP leak when the packet
       * still leaves by another device.
       */
      readonly staleEgressIp?: boolean;
    }
  | {
      readonly kind: 'dropped';
      readonly reason: DropReason;
      readonly node: string | undefined;
      readonly egressGatewayPolicy?: string;
      readonly detail: string;
    };

export interface ModelVerdict {
  /** The backend a ClusterIP was translated to, before policy; absent for other destinations. */
  readonly service?: { readonly name: string; readonly backend: string; readonly port: number };
  readonly networkPolicy: NetworkPolicyVerdict;
  readonly egress: EgressOutcome;
  /** Egress gateway policies Cilium ignores (both interface and egressIP, or no source selector). */
  readonly ignoredEgressGatewayPolicies: readonly string[];
}

/** What the gateway derived when a policy was applied, kept until the policy is re-applied. */
interface GatewayConfig {
  readonly node: string;
  readonly egressIp: Readonly<Record<Family, string | undefined>>;
}

// Cilium's label for a pod's namespace, and the prefix of namespace labels on the pod's
// identity (k8sConst.PodNamespaceLabel, k8sConst.PodNamespaceMetaLabels; policy.go).
const NAMESPACE_LABEL = 'io.kubernetes.pod.namespace';
const NAMESPACE_META_PREFIX = 'io.cilium.k8s.namespace.labels.';

/** Selector keys may carry a label source ("k8s:app", "any:app"); the model's labels are k8s ones. */
function stripSource(key: string): string {
  return key.replace(/^(k8s|any):/, '');
}

function inPrefix(prefixText: string, address: ParsedAddress): boolean {
  const prefix = parsePrefix(prefixText);
  if (prefix === undefined) throw new ModelError(`Cannot model malformed prefix "${prefixText}"`);
  return AddressSet.fromPrefixes([prefix]).contains(address.family, address.value);
}

function sameAddress(text: string, address: ParsedAddress): boolean {
  const parsed = parseAddress(text.split('/')[0] as string);
  return parsed?.family === address.family && parsed.value === address.value;
}

// ICMP type names the CNP schema accepts, by family (layer4.rst, "Limit ICMP/ICMPv6 types";
// numbers from RFC 792 and RFC 4443).
const ICMP_TYPES: Readonly<Record<Family, Readonly<Record<string, number>>>> = {
  4: {
    EchoReply: 0,
    DestinationUnreachable: 3,
    Redirect: 5,
    Echo: 8,
    EchoRequest: 8,
    RouterAdvertisement: 9,
    RouterSelection: 10,
    TimeExceeded: 11,
    ParameterProblem: 12,
    Timestamp: 13,
    TimestampReply: 14,
  },
  6: {
    DestinationUnreachable: 1,
    PacketTooBig: 2,
    TimeExceeded: 3,
    ParameterProblem: 4,
    EchoRequest: 128,
    EchoReply: 129,
    RouterSolicitation: 133,
    RouterAdvertisement: 134,
    NeighborSolicitation: 135,
    NeighborAdvertisement: 136,
    RedirectMessage: 137,
  },
};

function icmpTypeNumber(field: IcmpField, family: Family): number {
  if (typeof field.type === 'number') return field.type;
  if (/^\d+$/.test(field.type)) return Number(field.type);
  const value = ICMP_TYPES[family][field.type];
  if (value === undefined) {
    throw new ModelError(`The model does not know ICMP type "${field.type}" for IPv${family}`);
  }
  return value;
}

const UNMODELLED_PEER_FIELDS = [
  'toFQDNs',
  'toServices',
  'toNodes',
  'toGroups',
  'toRequires',
  'authentication',
] as const;

export interface CiliumModelOptions {
  /** The Cilium release to model ("1.18"); default DEFAULT_CILIUM_VERSION. */
  readonly ciliumVersion?: string;
}

/**
 * A stateful model of one cluster: manifests are applied, nodes change labels and links, and
 * packets are evaluated against the state at that moment, including what the egress gateway
 * derived when each policy was last applied.
 */
export class CiliumModel {
  private readonly version: CiliumVersion;
  private nodes = new Map<string, ModelNode>();
  private namespaces = new Map<string, ModelNamespace>();
  private pods: ModelPod[] = [];
  private services: ModelService[] = [];
  private readonly networkPolicies = new Map<string, CiliumNetworkPolicyManifest>();
  private readonly egressPolicies = new Map<string, CiliumEgressGatewayPolicy>();
  private readonly gatewayConfigs = new Map<string, GatewayConfig | null>();
  /** Updates Cilium refused while an earlier version of the policy stays in force. */
  private readonly refusedUpdates = new Set<string>();

  constructor(cluster: ModelCluster, options: CiliumModelOptions = {}) {
    const text = options.ciliumVersion ?? DEFAULT_CILIUM_VERSION;
    const version = parseCiliumVersion(text);
    if (version === undefined) throw new ModelError(`Cannot model Cilium "${text}": not a version`);
    this.version = version;
    for (const node of cluster.nodes) this.nodes.set(node.name, node);
    for (const namespace of cluster.namespaces) this.namespaces.set(namespace.name, namespace);
    this.pods = [...cluster.pods];
    this.services = [...(cluster.services ?? [])];
  }

  /**
   * Creates or replaces a manifest, as `kubectl apply` of a changed object does. For an egress
   * gateway policy this is when the gateway (re)selects its egress IP (EGW doc: "You can force
   * a fresh selection by re-applying the Egress Gateway policy").
   */
  apply(manifest: CiliumManifest): void {
    if (manifest.kind === 'CiliumEgressGatewayPolicy') {
      const name = manifest.metadata.name;
      const previous = this.egressPolicies.get(name);
      // manager.go onAddEgressPolicy: when ParseCEGP rejects a policy, the handler returns before
      // the manager's state is touched, so an update Cilium refuses leaves the last version it
      // accepted in force; a new policy it refuses is never added at all.
      if (
        ignoredBecause(manifest) !== undefined &&
        previous !== undefined &&
        ignoredBecause(previous) === undefined
      ) {
        this.refusedUpdates.add(name);
        return;
      }
      this.refusedUpdates.delete(name);
      this.egressPolicies.set(manifest.metadata.name, manifest);
      this.gatewayConfigs.delete(manifest.metadata.name);
      this.deriveGatewayConfig(manifest);
    } else {
      this.networkPolicies.set(policyId(manifest), manifest);
    }
  }

  /** Re-applies an egress gateway policy unchanged (a new resourceVersion), refreshing its egress IP. */
  reapplyEgressGatewayPolicy(name: string): void {
    const policy = this.egressPolicies.get(name);
    if (policy === undefined)
      throw new ModelError(`No egress gateway policy "${name}" to re-apply`);
    this.apply(policy);
  }

  delete(kind: CiliumManifest['kind'], name: string, namespace?: string): void {
    if (kind === 'CiliumEgressGatewayPolicy') {
      this.egressPolicies.delete(name);
      this.gatewayConfigs.delete(name);
      this.refusedUpdates.delete(name);
    } else {
      const id =
        kind === 'CiliumNetworkPolicy' ? `${kind}/${namespace ?? ''}/${name}` : `${kind}/${name}`;
      this.networkPolicies.delete(id);
    }
  }

  /**
   * Replaces a node's labels as the egress gateway sees them: those of its CiliumNode. The manager
   * selects gateways from CiliumNode objects (manager.go handleNodeEvent), whose labels the node's
   * own agent copies from its Node (daemon/cmd/local_node_sync.go SyncLocalNode,
   * pkg/nodediscovery mutateNodeResource); a Node label that never reached the CiliumNode changes
   * nothing here. Selection follows them at once: with no node left matching, Cilium drops (EGW
   * doc: "If there is no match for the given set of labels, Cilium drops the traffic that matches
   * the destination CIDR(s)").
   */
  setNodeLabels(name: string, labels: Readonly<Record<string, string>>): void {
    const node = this.requireNode(name);
    this.nodes.set(name, { ...node, labels });
  }

  /**
   * Replaces a node's links, addresses and routes. The gateway does NOT re-derive its egress IP:
   * "After Cilium has selected the Egress IP ... it does not automatically respond to a change in
   * the gateway node's network configuration" (EGW doc; NOTES, "Interface goes down or changes
   * later").
   */
  setNodeNetwork(name: string, network: ModelNodeNetwork): void {
    const node = this.requireNode(name);
    this.nodes.set(name, { ...node, network });
  }

  setPods(pods: readonly ModelPod[]): void {
    this.pods = [...pods];
  }

  /** The egress IPs the gateway holds for a policy, as derived at its last apply. */
  egressIpOf(policy: string): Readonly<Record<Family, string | undefined>> | undefined {
    return this.gatewayConfigs.get(policy)?.egressIp;
  }

  evaluate(packet: ModelPacket): ModelVerdict {
    const pod = this.pods.find(
      (p) => p.namespace === packet.from.namespace && p.name === packet.from.name,
    );
    if (pod === undefined) {
      throw new ModelError(`No pod ${packet.from.namespace}/${packet.from.name} in the model`);
    }
    const ignored = [
      ...[...this.egressPolicies.values()]
        .filter((p) => ignoredBecause(p) !== undefined)
        .map((p) => p.metadata.name),
      ...this.refusedUpdates,
    ].sort();
    const translated = this.translateService(packet);
    if (translated !== undefined && 'unbacked' in translated) {
      return {
        networkPolicy: {
          allowed: false,
          reason: 'not-reached',
          defaultDeny: false,
          allowedBy: [],
          deniedBy: [],
        },
        egress: {
          kind: 'dropped',
          reason: 'DROP_NO_SERVICE',
          node: pod.node,
          detail: `Service ${translated.unbacked} has no backend`,
        },
        ignoredEgressGatewayPolicies: ignored,
      };
    }
    const sent = translated?.packet ?? packet;
    const dst = parseAddress(sent.to);
    if (dst === undefined) throw new ModelError(`Cannot model a packet to "${packet.to}"`);
    const networkPolicy = this.evaluateNetworkPolicy(pod, dst, sent);
    const egress = networkPolicy.allowed
      ? this.evaluateEgress(pod, dst)
      : ({ kind: 'denied-by-network-policy' } as const);
    return {
      ...(translated === undefined ? {} : { service: translated.service }),
      networkPolicy,
      egress,
      ignoredEgressGatewayPolicies: ignored,
    };
  }

  /**
   * A packet to a ClusterIP, as policy sees it: to the first backend at the target port. Which
   * backend the load balancer picks is not the model's to say; the first keeps answers stable,
   * and tests give a service backends that policy judges alike (or one backend).
   */
  private translateService(
    packet: ModelPacket,
  ):
    | { packet: ModelPacket; service: NonNullable<ModelVerdict['service']> }
    | { unbacked: string }
    | undefined {
    const dst = parseAddress(packet.to);
    if (dst === undefined) return undefined;
    const service = this.services.find((s) => s.clusterIPs.some((ip) => sameAddress(ip, dst)));
    if (service === undefined) return undefined;
    const id = `${service.namespace}/${service.name}`;
    const port = service.ports.find(
      (p) => p.protocol === packet.protocol && p.port === packet.port,
    );
    if (port === undefined) {
      throw new ModelError(
        `The model does not implement a packet to ClusterIP ${packet.to} of service ${id} on a port it does not serve (${packet.protocol}/${String(packet.port)})`,
      );
    }
    if (service.backends.length === 0) return { unbacked: id };
    const backend = service.backends.find((b) => parseAddress(b)?.family === dst.family);
    if (backend === undefined) {
      throw new ModelError(
        `The model does not implement service ${id} without IPv${dst.family} backends`,
      );
    }
    return {
      packet: { ...packet, to: backend, port: port.targetPort },
      service: { name: id, backend, port: port.targetPort },
    };
  }

  // --- network policy --------------------------------------------------------------------------

  private identityLabels(pod: ModelPod): Record<string, string> {
    const labels: Record<string, string> = { ...pod.labels, [NAMESPACE_LABEL]: pod.namespace };
    for (const [key, value] of Object.entries(this.namespaces.get(pod.namespace)?.labels ?? {})) {
      labels[`${NAMESPACE_META_PREFIX}${key}`] = value;
    }
    return labels;
  }

  /**
   * A namespaced policy only selects pods of its own namespace, and its peer selectors are limited
   * to that namespace unless they name the namespace label; a clusterwide peer selector requires
   * a namespace label, i.e. a Cilium-managed pod, which every model pod is (utils.go,
   * getEndpointSelector; layer3.rst, "Egress Allow All Endpoints").
   */
  private selects(
    selector: LabelSelector,
    pod: ModelPod,
    policyNamespace: string | undefined,
  ): boolean {
    const selector2 = mapSelectorKeys(selector, stripSource);
    const namesNamespace = selectorHasKey(
      selector2,
      (k) => k === NAMESPACE_LABEL || k.startsWith(NAMESPACE_META_PREFIX),
    );
    if (policyNamespace !== undefined && !namesNamespace && pod.namespace !== policyNamespace) {
      return false;
    }
    return matchesLabelSelector(selector2, this.identityLabels(pod));
  }

  private evaluateNetworkPolicy(
    pod: ModelPod,
    dst: ParsedAddress,
    packet: ModelPacket,
  ): NetworkPolicyVerdict {
    const allowedBy: RuleRef[] = [];
    const deniedBy: RuleRef[] = [];
    let defaultDeny = false;
    for (const [id, manifest] of [...this.networkPolicies].sort(([a], [b]) => a.localeCompare(b))) {
      const namespace =
        manifest.kind === 'CiliumNetworkPolicy' ? manifest.metadata.namespace : undefined;
      const rules = listPolicyRules(manifest);
      for (const [r, rule] of rules.entries()) {
        const rulePath =
          manifest.spec !== undefined && r === 0
            ? 'spec'
            : `specs[${manifest.spec === undefined ? r : r - 1}]`;
        // A CNP's subject is its own namespace's pods whatever the selector says (utils.go).
        if (namespace !== undefined && pod.namespace !== namespace) continue;
        if (!this.selects(rule.endpointSelector, pod, undefined)) continue;
        // CNP schema, enableDefaultDeny: "If not specified, the default is true for each traffic
        // direction that has rules ... that endpoint's default deny will be enabled if any policy
        // requests it"; utils.go evaluateDefaultDenyForRule counts egress and egressDeny rules.
        const wantsDefaultDeny =
          rule.enableDefaultDeny?.egress ??
          ((rule.egress?.length ?? 0) > 0 || (rule.egressDeny?.length ?? 0) > 0);
        if (wantsDefaultDeny) defaultDeny = true;
        this.matchingPeers(rule, 'egress', pod, namespace, dst, packet).forEach((i) =>
          allowedBy.push({ policy: id, rule: `${rulePath}.egress[${i}]` }),
        );
        this.matchingPeers(rule, 'egressDeny', pod, namespace, dst, packet).forEach((i) =>
          deniedBy.push({ policy: id, rule: `${rulePath}.egressDeny[${i}]` }),
        );
      }
    }
    // deny.rst: "Deny policies take precedence over allow policies"; intro.rst: allows are a union.
    if (deniedBy.length > 0) {
      return { allowed: false, reason: 'deny-rule', defaultDeny, allowedBy, deniedBy };
    }
    if (allowedBy.length > 0) {
      return { allowed: true, reason: 'allow-rule', defaultDeny, allowedBy, deniedBy };
    }
    return defaultDeny
      ? { allowed: false, reason: 'default-deny', defaultDeny, allowedBy, deniedBy }
      : { allowed: true, reason: 'no-default-deny', defaultDeny, allowedBy, deniedBy };
  }

  private matchingPeers(
    rule: NetworkPolicyRule,
    section: 'egress' | 'egressDeny',
    pod: ModelPod,
    namespace: string | undefined,
    dst: ParsedAddress,
    packet: ModelPacket,
  ): number[] {
    const out: number[] = [];
    (rule[section] ?? []).forEach((peer, i) => {
      if (this.matchesL3(peer, pod, namespace, dst) && matchesL4(peer, dst, packet)) out.push(i);
    });
    return out;
  }

  private podWithIp(dst: ParsedAddress): ModelPod | undefined {
    return this.pods.find((p) => p.ips.some((ip) => sameAddress(ip, dst)));
  }

  private isNodeAddress(dst: ParsedAddress, node: ModelNode): boolean {
    return [...node.internalIPs, ...nodeAddresses(node.network)].some((ip) => sameAddress(ip, dst));
  }

  /** Pods and nodes: what Cilium maps to an identity rather than to world. */
  private isClusterAddress(dst: ParsedAddress): boolean {
    return (
      this.podWithIp(dst) !== undefined ||
      [...this.nodes.values()].some((n) => n.internalIPs.some((ip) => sameAddress(ip, dst)))
    );
  }

  private matchesL3(
    peer: EgressPeerRule,
    pod: ModelPod,
    namespace: string | undefined,
    dst: ParsedAddress,
  ): boolean {
    for (const field of UNMODELLED_PEER_FIELDS) {
      if ((peer as Record<string, unknown>)[field] !== undefined) {
        throw new ModelError(`The model does not implement egress "${field}"`);
      }
    }
    const { toEndpoints, toEntities, toCIDR, toCIDRSet } = peer;
    if ([toEndpoints, toEntities, toCIDR, toCIDRSet].every((f) => f === undefined)) {
      // An L4-only rule applies "to any layer 3 destination" (layer4.rst, "Example (L4)").
      return true;
    }
    // utils.go mergeEndpointSelectors: "Explicitly check for empty non-nil slices, it should not
    // result in any identity being selected".
    if (
      [toEndpoints, toEntities, toCIDR, toCIDRSet].some((f) => f !== undefined && f.length === 0)
    ) {
      return false;
    }
    const target = this.podWithIp(dst);
    const own = this.requireNode(pod.node);
    const isWorld = !this.isClusterAddress(dst) && !this.isNodeAddress(dst, own);
    if (toEndpoints?.some((s) => target !== undefined && this.selects(s, target, namespace))) {
      return true;
    }
    for (const entity of toEntities ?? []) {
      // layer3.rst, "Entities based".
      switch (entity) {
        case 'all':
          return true;
        case 'world':
          if (isWorld) return true;
          break;
        case 'cluster':
          if (!isWorld) return true;
          break;
        case 'host':
          if (this.isNodeAddress(dst, own)) return true;
          break;
        case 'remote-node':
          if (
            [...this.nodes.values()].some(
              (n) => n.name !== own.name && n.internalIPs.some((ip) => sameAddress(ip, dst)),
            )
          ) {
            return true;
          }
          break;
        case 'none':
          break;
        default:
          throw new ModelError(`The model does not implement the entity "${entity}"`);
      }
    }
    // CIDR rules only match peers Cilium cannot map to an identity: not pods, not nodes
    // (language.rst, "IP/CIDR based"; NOTES, "toCIDRSet with except").
    if (!isWorld) return false;
    if (toCIDR?.some((cidr) => inPrefix(cidr, dst)) === true) return true;
    for (const entry of toCIDRSet ?? []) {
      const extra = entry as { cidrGroupRef?: unknown; cidrGroupSelector?: unknown };
      if (extra.cidrGroupRef !== undefined || extra.cidrGroupSelector !== undefined) {
        throw new ModelError(
          'The model does not implement toCIDRSet cidrGroupRef/cidrGroupSelector',
        );
      }
      // CNP schema, except: "These exceptions are only applied to the Cidr in this CIDRRule".
      if (inPrefix(entry.cidr, dst) && !(entry.except ?? []).some((e) => inPrefix(e, dst))) {
        return true;
      }
    }
    return false;
  }

  // --- egress gateway --------------------------------------------------------------------------

  private gatewayNodeFor(policy: CiliumEgressGatewayPolicy): ModelNode | undefined {
    // EGW doc: "In case multiple nodes are a match ... the first node in lexical ordering based
    // on their name will be selected."
    const candidates = [...this.nodes.values()]
      .filter((n) =>
        matchesLabelSelector(
          mapSelectorKeys(policy.spec.egressGateway.nodeSelector, stripSource),
          n.labels,
        ),
      )
      .sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0));
    return candidates[0];
  }

  /**
   * What the gateway derives when a policy is applied (policy.go deriveFromPolicyGatewayConfig):
   * with `interface`, that interface's first IPv4 (and from 1.18 IPv6) address; with `egressIP`,
   * that address if a device carries it; with neither, the first address of the default-route
   * device. Failing that there is no egress IP and matched traffic is dropped (EGW doc, "No
   * Egress IP configured").
   */
  private deriveGatewayConfig(policy: CiliumEgressGatewayPolicy): void {
    const node = this.gatewayNodeFor(policy);
    if (node === undefined) {
      this.gatewayConfigs.set(policy.metadata.name, null);
      return;
    }
    const { interface: iface, egressIP } = policy.spec.egressGateway;
    const derive = (family: Family): string | undefined => {
      if (family === 6 && !supportsIpv6EgressGateway(this.version)) return undefined;
      if (iface !== undefined && iface !== '') return firstAddress(node.network, iface, family);
      if (egressIP !== undefined && egressIP !== '') {
        const address = parseAddress(egressIP);
        if (address?.family !== family) return undefined;
        return deviceWithAddress(node.network, egressIP) === undefined ? undefined : egressIP;
      }
      const route = lookupRoute(node.network, { to: family === 4 ? '0.0.0.0' : '::' });
      return route.kind === 'route' ? firstAddress(node.network, route.dev, family) : undefined;
    };
    this.gatewayConfigs.set(policy.metadata.name, {
      node: node.name,
      egressIp: { 4: derive(4), 6: derive(6) },
    });
  }

  /** The cached gateway config, derived afresh only if the gateway moved to another node. */
  private gatewayConfigFor(policy: CiliumEgressGatewayPolicy, node: ModelNode): GatewayConfig {
    const cached = this.gatewayConfigs.get(policy.metadata.name);
    // The model re-derives only on re-apply, or when another node becomes the gateway (its
    // config must come from somewhere). Some Cilium versions also re-derive on any Kubernetes
    // node event (policy.go regenerateGatewayConfig runs on every reconciliation); the docs
    // promise only re-apply, and egressguard must not rely on more.
    if (cached === undefined || cached === null || cached.node !== node.name) {
      this.deriveGatewayConfig(policy);
    }
    const config = this.gatewayConfigs.get(policy.metadata.name);
    if (config === undefined || config === null) {
      throw new Error(`Gateway config of "${policy.metadata.name}" was not derived`);
    }
    return config;
  }

  private evaluateEgress(pod: ModelPod, dst: ParsedAddress): EgressOutcome {
    if (this.isClusterAddress(dst) || this.isNodeAddress(dst, this.requireNode(pod.node))) {
      return { kind: 'in-cluster' };
    }
    const family = dst.family;
    const labels = this.identityLabels(pod);
    const podNode = this.requireNode(pod.node);
    // The BPF map is keyed by (source IP, destination CIDR) with longest-prefix match; excluded
    // CIDRs are entries too, carrying EGRESS_GATEWAY_EXCLUDED_CIDR (NOTES, "Exclusions").
    let best: { policy: CiliumEgressGatewayPolicy; length: number; excluded: boolean } | undefined;
    let ignoredMatch: string | undefined;
    for (const policy of [...this.egressPolicies.values()].sort((a, b) =>
      a.metadata.name.localeCompare(b.metadata.name),
    )) {
      if (!this.egressSelects(policy, pod, labels, podNode)) continue;
      if (family === 6 && !supportsIpv6EgressGateway(this.version)) continue;
      const entries = [
        ...policy.spec.destinationCIDRs.map((cidr) => ({ cidr, excluded: false })),
        ...(policy.spec.excludedCIDRs ?? []).map((cidr) => ({ cidr, excluded: true })),
      ];
      for (const entry of entries) {
        const prefix = parsePrefix(entry.cidr);
        if (prefix?.family !== family || !inPrefix(entry.cidr, dst)) continue;
        if (ignoredBecause(policy) !== undefined) {
          ignoredMatch ??= policy.metadata.name;
          continue;
        }
        // A longer prefix wins. Two entries with one key (same source, same prefix) from two
        // policies: which one the map keeps is not documented; the model keeps the first
        // policy by name, whatever the apply order, so its answer is at least stable.
        if (best === undefined || prefix.length > best.length) {
          best = { policy, length: prefix.length, excluded: entry.excluded };
        }
      }
    }
    if (best === undefined || best.excluded || pod.egressGatewayPending === true) {
      const reason =
        best === undefined
          ? ignoredMatch === undefined
            ? 'no-matching-policy'
            : 'ignored-policy'
          : best.excluded
            ? 'excluded'
            : 'pod-not-yet-programmed';
      const policyName = best?.policy.metadata.name ?? ignoredMatch;
      return this.leaveFromPodNode(podNode, dst, reason, policyName);
    }
    const policy = best.policy;
    const name = policy.metadata.name;
    const gateway = this.gatewayNodeFor(policy);
    if (gateway === undefined) {
      return {
        kind: 'dropped',
        reason: 'DROP_NO_EGRESS_GATEWAY',
        node: podNode.name,
        egressGatewayPolicy: name,
        detail: `No node matches the gateway nodeSelector of "${name}"`,
      };
    }
    const egressIp = this.gatewayConfigFor(policy, gateway).egressIp[family];
    if (egressIp === undefined) {
      return {
        kind: 'dropped',
        reason: 'DROP_NO_EGRESS_IP',
        node: gateway.name,
        egressGatewayPolicy: name,
        detail: `Gateway "${gateway.name}" selected no IPv${family} egress IP for "${name}" when the policy was applied`,
      };
    }
    // EGW doc, "Selection of the egress network interface": the device comes from
    // `ip route get <externalIP> from <egressIP>`, evaluated now, against the cached IP.
    const route = lookupRoute(gateway.network, {
      to: formatAddress(dst.family, dst.value),
      from: egressIp,
    });
    if (route.kind !== 'route') {
      return {
        kind: 'dropped',
        reason: 'DROP_NO_FIB',
        node: gateway.name,
        egressGatewayPolicy: name,
        detail:
          route.kind === 'none'
            ? `No route from ${egressIp} on gateway "${gateway.name}"`
            : `A ${route.kind} route ${route.to} in table ${route.table} on gateway "${gateway.name}"`,
      };
    }
    const device = gateway.network.devices.find((d) => d.name === route.dev);
    if (device?.carrier === false) {
      return {
        kind: 'dropped',
        reason: 'NO_CARRIER',
        node: gateway.name,
        egressGatewayPolicy: name,
        detail: `Device "${route.dev}" on gateway "${gateway.name}" has no carrier`,
      };
    }
    const iface = policy.spec.egressGateway.interface;
    const holder = deviceWithAddress(gateway.network, egressIp);
    const stale =
      holder === undefined || (iface !== undefined && iface !== '' && holder.name !== iface);
    return {
      kind: 'leaves',
      path: 'egress-gateway',
      reason: 'steered',
      node: gateway.name,
      device: route.dev,
      // NOTES: a stale egress IP is still used for SNAT when a route resolves: the leak.
      sourceAddress: egressIp,
      egressGatewayPolicy: name,
      staleEgressIp: stale,
    };
  }

  /**
   * Whether a CEGP selects a pod: any selector whose podSelector and namespaceSelector (namespace
   * labels) both match, and whose optional nodeSelector matches the pod's node (EGW doc,
   * "Selecting source pods"; policy.go ParseCEGP: an empty namespaceSelector means any namespace).
   */
  private egressSelects(
    policy: CiliumEgressGatewayPolicy,
    pod: ModelPod,
    labels: Readonly<Record<string, string>>,
    podNode: ModelNode,
  ): boolean {
    return policy.spec.selectors.some((selector) => {
      if (selector.podSelector === undefined && selector.namespaceSelector === undefined)
        return false;
      if (
        selector.podSelector !== undefined &&
        !matchesLabelSelector(mapSelectorKeys(selector.podSelector, stripSource), labels)
      ) {
        return false;
      }
      if (
        selector.namespaceSelector !== undefined &&
        !matchesLabelSelector(
          selector.namespaceSelector,
          this.namespaces.get(pod.namespace)?.labels ?? {},
        )
      ) {
        return false;
      }
      return (
        selector.nodeSelector === undefined ||
        matchesLabelSelector(selector.nodeSelector, podNode.labels)
      );
    });
  }

  /**
   * Unsteered traffic leaves from the pod's own node and is masqueraded "to an output device IPv4
   * address" (Documentation/network/concepts/masquerading.rst, "eBPF-based").
   */
  private leaveFromPodNode(
    node: ModelNode,
    dst: ParsedAddress,
    reason: 'no-matching-policy' | 'excluded' | 'ignored-policy' | 'pod-not-yet-programmed',
    policy: string | undefined,
  ): EgressOutcome {
    const route = lookupRoute(node.network, { to: formatAddress(dst.family, dst.value) });
    const extra = policy === undefined ? {} : { egressGatewayPolicy: policy };
    if (route.kind !== 'route') {
      return {
        kind: 'dropped',
        reason: 'DROP_NO_FIB',
        node: node.name,
        ...extra,
        detail: `No usable route on node "${node.name}"`,
      };
    }
    const source = firstAddress(node.network, route.dev, dst.family);
    if (source === undefined) {
      throw new ModelError(
        `Device "${route.dev}" on node "${node.name}" has no IPv${dst.family} address to masquerade to`,
      );
    }
    return {
      kind: 'leaves',
      path: 'pod-node',
      reason,
      node: node.name,
      device: route.dev,
      sourceAddress: source,
      ...extra,
    };
  }

  private requireNode(name: string): ModelNode {
    const node = this.nodes.get(name);
    if (node === undefined) throw new ModelError(`No node "${name}" in the model`);
    return node;
  }
}

function policyId(manifest: CiliumNetworkPolicyManifest): string {
  return manifest.kind === 'CiliumNetworkPolicy'
    ? `${manifest.kind}/${manifest.metadata.namespace}/${manifest.metadata.name}`
    : `${manifest.kind}/${manifest.metadata.name}`;
}

/** Why Cilium ignores an egress gateway policy, if it does. */
function ignoredBecause(policy: CiliumEgressGatewayPolicy): string | undefined {
  const { interface: iface, egressIP } = policy.spec.egressGateway;
  // EGW doc: "Policies that contain both of these properties will be ignored by Cilium";
  // policy.go ParseCEGP returns an error for it.
  if (iface !== undefined && iface !== '' && egressIP !== undefined && egressIP !== '') {
    return 'both interface and egressIP';
  }
  // policy.go ParseCEGP: "cannot have both nil namespace selector and nil pod selector".
  if (
    policy.spec.selectors.some(
      (s) => s.podSelector === undefined && s.namespaceSelector === undefined,
    )
  ) {
    return 'a selector without podSelector and namespaceSelector';
  }
  return undefined;
}

function matchesPort(port: PortProtocol, packet: ModelPacket): boolean {
  // CNP schema, protocol: "If omitted or empty, any protocol matches"; "Matching on ICMP is not
  // supported" (ICMP goes through icmps).
  const protocol = port.protocol ?? 'ANY';
  if (packet.protocol === 'icmp') return false;
  if (protocol !== 'ANY' && protocol.toLowerCase() !== packet.protocol) return false;
  if (!/^\d+$/.test(port.port) || port.port === '0') {
    throw new ModelError(`The model does not implement port "${port.port}" (named ports, port 0)`);
  }
  const from = Number(port.port);
  // CNP schema, endPort: "EndPort can only be an L4 port number".
  const to = port.endPort !== undefined && port.endPort >= from ? port.endPort : from;
  return packet.port !== undefined && packet.port >= from && packet.port <= to;
}

/**
 * The L4 part of a rule: none means every protocol, ICMP included; with toPorts or icmps only
 * what they list ("If any layer 4 policy is specified, then ICMP will be blocked unless it's
 * related to a connection that is otherwise allowed", layer4.rst). utils.go turns icmps into L4
 * entries beside toPorts, so either may match.
 */
function matchesL4(peer: EgressPeerRule, dst: ParsedAddress, packet: ModelPacket): boolean {
  const toPorts = peer.toPorts ?? [];
  const icmps = peer.icmps ?? [];
  if (toPorts.length === 0 && icmps.length === 0) return true;
  for (const rule of toPorts) {
    const extra = rule as {
      rules?: unknown;
      listener?: unknown;
      originatingTLS?: unknown;
      serverNames?: unknown;
    };
    if (
      extra.rules !== undefined ||
      extra.listener !== undefined ||
      extra.originatingTLS !== undefined ||
      extra.serverNames !== undefined
    ) {
      throw new ModelError('The model does not implement L7 rules, listeners or TLS in toPorts');
    }
    if (rule.ports.length === 0)
      throw new ModelError('The model does not implement toPorts without ports');
    if (rule.ports.some((p) => matchesPort(p, packet))) return true;
  }
  if (packet.protocol !== 'icmp') return false;
  const family = dst.family;
  return icmps.some((rule) =>
    rule.fields.some((field) => {
      // CNP schema, family: "`IPv4` is set as default".
      const fieldFamily: Family = field.family === 'IPv6' ? 6 : 4;
      return fieldFamily === family && icmpTypeNumber(field, family) === packet.icmpType;
    }),
  );
}
