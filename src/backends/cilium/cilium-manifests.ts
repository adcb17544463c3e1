/**
 * The Cilium manifests egressguard generates, typed with only the fields it uses. Field names and
 * shapes follow the pinned CRD schemas in schema/cilium/ (CiliumEgressGatewayPolicy 1.17.1,
 * CiliumNetworkPolicy and CiliumClusterwideNetworkPolicy 1.18.2); validateManifests checks real
 * objects against those schemas, so a field added here that the schema lacks fails there.
 */

export const CILIUM_API_VERSION = 'cilium.io/v2';

/**
 * The annotation whose change re-applies an egress gateway policy (the resident after the tunnel
 * returns, the chainsaw suite after its faults): one name, so both write the same key.
 */
export const REAPPLIED_ANNOTATION = 'egressguard.dev/reapplied-at';

export interface LabelSelectorRequirement {
  readonly key: string;
  readonly operator: 'In' | 'NotIn' | 'Exists' | 'DoesNotExist';
  readonly values?: readonly string[];
}

/** A Kubernetes label selector: matchLabels and matchExpressions are ANDed; empty selects all. */
export interface LabelSelector {
  readonly matchLabels?: Readonly<Record<string, string>>;
  readonly matchExpressions?: readonly LabelSelectorRequirement[];
}

export interface ObjectMeta {
  readonly name: string;
  readonly namespace?: string;
  readonly labels?: Readonly<Record<string, string>>;
  readonly annotations?: Readonly<Record<string, string>>;
  readonly resourceVersion?: string;
}

export interface EgressGatewaySelector {
  readonly podSelector?: LabelSelector;
  readonly namespaceSelector?: LabelSelector;
  /** Restricts which nodes' pods match; never alone (EGW doc, "Selecting source pods"). */
  readonly nodeSelector?: LabelSelector;
}

export interface EgressGateway {
  readonly nodeSelector: LabelSelector;
  /** Picks the SNAT address (that interface's first address), not the egress device. */
  readonly interface?: string;
  readonly egressIP?: string;
}

/** CiliumEgressGatewayPolicy: cluster-scoped, so metadata has no namespace. */
export interface CiliumEgressGatewayPolicy {
  readonly apiVersion: typeof CILIUM_API_VERSION;
  readonly kind: 'CiliumEgressGatewayPolicy';
  readonly metadata: ObjectMeta;
  readonly spec: {
    readonly selectors: readonly EgressGatewaySelector[];
    readonly destinationCIDRs: readonly string[];
    readonly excludedCIDRs?: readonly string[];
    readonly egressGateway: EgressGateway;
  };
}

export type PortProtocolName = 'TCP' | 'UDP' | 'SCTP' | 'ANY';

export interface PortProtocol {
  /** A port number as a string (named ports are not generated). */
  readonly port: string;
  readonly endPort?: number;
  /** Omitted means ANY. */
  readonly protocol?: PortProtocolName;
}

export interface PortRule {
  readonly ports: readonly PortProtocol[];
}

export interface IcmpField {
  /** Omitted means IPv4 (schema default). */
  readonly family?: 'IPv4' | 'IPv6';
  readonly type: number | string;
}

export interface IcmpRule {
  readonly fields: readonly IcmpField[];
}

export interface CidrRule {
  readonly cidr: string;
  readonly except?: readonly string[];
}

export type Entity =
  | 'all'
  | 'world'
  | 'cluster'
  | 'host'
  | 'init'
  | 'ingress'
  | 'unmanaged'
  | 'remote-node'
  | 'health'
  | 'none'
  | 'kube-apiserver';

/** The peer and L4 parts of an egress rule (allow) or an egressDeny rule. */
export interface EgressPeerRule {
  readonly toEndpoints?: readonly LabelSelector[];
  readonly toEntities?: readonly Entity[];
  readonly toCIDR?: readonly string[];
  readonly toCIDRSet?: readonly CidrRule[];
  readonly toPorts?: readonly PortRule[];
  readonly icmps?: readonly IcmpRule[];
}

export interface NetworkPolicyRule {
  readonly description?: string;
  /** Namespaced policies only match pods in their own namespace (Cilium adds that label). */
  readonly endpointSelector: LabelSelector;
  readonly egress?: readonly EgressPeerRule[];
  readonly egressDeny?: readonly EgressPeerRule[];
  readonly enableDefaultDeny?: { readonly egress?: boolean; readonly ingress?: boolean };
}

export interface CiliumNetworkPolicy {
  readonly apiVersion: typeof CILIUM_API_VERSION;
  readonly kind: 'CiliumNetworkPolicy';
  readonly metadata: ObjectMeta & { readonly namespace: string };
  readonly spec?: NetworkPolicyRule;
  readonly specs?: readonly NetworkPolicyRule[];
}

export interface CiliumClusterwideNetworkPolicy {
  readonly apiVersion: typeof CILIUM_API_VERSION;
  readonly kind: 'CiliumClusterwideNetworkPolicy';
  readonly metadata: ObjectMeta;
  readonly spec?: NetworkPolicyRule;
  readonly specs?: readonly NetworkPolicyRule[];
}

export type CiliumNetworkPolicyManifest = CiliumNetworkPolicy | CiliumClusterwideNetworkPolicy;

export type CiliumManifest = CiliumEgressGatewayPolicy | CiliumNetworkPolicyManifest;

/** The network policy rules of a CNP/CCNP: `spec` and every `specs` entry. */
export function listPolicyRules(manifest: CiliumNetworkPolicyManifest): NetworkPolicyRule[] {
  return [...(manifest.spec === undefined ? [] : [manifest.spec]), ...(manifest.specs ?? [])];
}
