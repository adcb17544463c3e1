import type { AddressSet, Family } from '../core/index.js';
import type { Destination, PortRange, Protocol } from '../policy/index.js';

/**
 * The intermediate representation: closed, immutable, backend-neutral. Every dispatch over a
 * `kind` ends in `assertNever`, so a new node kind does not compile until each backend handles it.
 *
 * Lowering has two steps. `lowerPolicy` gives the host-independent `PolicyIR` (what a controller
 * holds for a whole fleet); `bindHost` binds one host's facts (its uplink, labels, connected
 * prefixes, what its tunnels can carry) and gives the `HostIR` a backend compiles, `explain`
 * evaluates and the host config hash covers. Every rule a backend emits, the implicit ones
 * included, is a node here with its id built once.
 */
export interface PolicyIR {
  readonly kind: 'policy';
  readonly name: string;
  readonly uplink: UplinkIR;
  /** The tunnels the policy declares, by its names for them. */
  readonly tunnels: readonly string[];
  /** How tunnels declared with `match` are found on a host (by address or peer, not name). */
  readonly tunnelMatches: Readonly<Record<string, TunnelMatchIR>>;
  readonly reassembly: ReassemblyIR;
  readonly classes: readonly ClassIR[];
  readonly podClasses: readonly PodClassIR[];
}

/** A tunnel found by its local address or its point-to-point peer (a utun's number changes). */
export interface TunnelMatchIR {
  readonly address: string | null;
  readonly peer: string | null;
}

/** The policy's uplink: the main table's default-route interface on each host, or a name. */
export type UplinkIR =
  { readonly kind: 'default-route' } | { readonly kind: 'named'; readonly interface: string };

/**
 * Fragments are reassembled before any of our hooks, so a fragment is judged like the datagram it
 * belongs to; a fragment whose datagram never completes is held and discarded. Without it, a rule
 * on ports cannot match a non-first fragment (it has no transport header) and the class default
 * would take it.
 */
export interface ReassemblyIR {
  readonly kind: 'reassembly';
  readonly id: string;
}

export type SelectorIR =
  | {
      readonly kind: 'ingress';
      readonly interfaces: readonly string[];
      readonly sources: AddressSet;
    }
  | { readonly kind: 'host'; readonly sources: AddressSet };

export type ViaIR =
  { readonly kind: 'uplink' } | { readonly kind: 'tunnel'; readonly interface: string };

/** Link housekeeping with the host that stays open ahead of anti-spoofing, or the link breaks. */
export type HousekeepingIR =
  /** Router and neighbour solicitations and advertisements, hop limit 255 (RFC 4861). */
  | { readonly kind: 'neighbour-discovery'; readonly id: string }
  /** DHCPv4 from 0.0.0.0 (RFC 2131) and DHCPv6 from a link-local address (RFC 8415) to the host. */
  | { readonly kind: 'dhcp'; readonly id: string };

/** Drops a packet from a class interface whose source is not among the class's prefixes. */
export interface AntiSpoofingIR {
  readonly kind: 'anti-spoofing';
  readonly id: string;
}

/** Blocks the IPv6 of a class without IPv6 source prefixes (housekeeping aside). */
export interface Ipv6BlockIR {
  readonly kind: 'ipv6-block';
  readonly id: string;
}

export interface KillSwitchIR {
  readonly kind: 'kill-switch';
  readonly id: string;
  /** Destinations that may leave outside the tunnel: the policy's exceptions. */
  readonly except: AddressSet;
}

export interface MssClampIR {
  readonly kind: 'mss-clamp';
  /** `pmtu`: the route's MTU; a number: that MSS. */
  readonly size: 'pmtu' | number;
}

export interface NatIR {
  readonly kind: 'masquerade';
}

export interface MatchIR {
  readonly destination: Destination;
  /** Null: every IP protocol. */
  readonly protocols: readonly Protocol[] | null;
  /** Null: every port. */
  readonly ports: readonly PortRange[] | null;
}

export interface RuleIR {
  readonly kind: 'rule';
  /** The policy's rule id, carried into counters, comments and logs. */
  readonly id: string;
  readonly action: 'allow' | 'deny' | 'audit';
  readonly match: MatchIR;
}

export interface DefaultIR {
  readonly kind: 'default';
  readonly id: string;
  readonly action: 'allow' | 'deny';
}

/** A class of the host-independent IR: `via` names no interface yet, `hosts` limits it. */
export interface ClassIR {
  readonly kind: 'class';
  readonly name: string;
  /** The host labels a host needs to carry this class (empty: every host). */
  readonly hostLabels: Readonly<Record<string, string>>;
  readonly selector: SelectorIR;
  readonly via: ViaIR;
  readonly housekeeping: readonly HousekeepingIR[];
  /** Null for host classes: their dispatch selects by source already. */
  readonly antiSpoofing: AntiSpoofingIR | null;
  readonly ipv6Block: Ipv6BlockIR | null;
  readonly killSwitch: KillSwitchIR | null;
  readonly mssClamp: MssClampIR | null;
  readonly nat: NatIR | null;
  readonly rules: readonly RuleIR[];
  readonly defaultRule: DefaultIR;
}

/**
 * The pods of a Kubernetes class: the pod network's identity labels, not
 * addresses. Null namespace: pods
 * of every namespace.
 */
export interface PodSelectorIR {
  readonly kind: 'pods';
  readonly namespace: string | null;
  readonly labels: Readonly<Record<string, string>>;
}

/**
 * The kill switch of a Kubernetes class. The egress gateway is not one by itself: it keeps
 * a cached egress IP after the tunnel goes down. What fails closed is a gateway nodeSelector no
 * node matches (DROP_NO_EGRESS_GATEWAY), so the gateway node carries `nodeLabel` only while its
 * tunnel is up (the backend's reference notes, "No matching gateway node → drop").
 */
export interface PodKillSwitchIR {
  readonly kind: 'pod-kill-switch';
  readonly id: string;
  /** Destinations that leave from the pod's own node, outside the tunnel (excludedCIDRs). */
  readonly except: AddressSet;
  readonly nodeLabel: { readonly key: string; readonly value: string };
}

/** A Kubernetes class: enforced by the pod network (network policy, egress gateway), never by a node's firewall. */
export interface PodClassIR {
  readonly kind: 'pod-class';
  readonly name: string;
  readonly selector: PodSelectorIR;
  readonly via: ViaIR;
  readonly killSwitch: PodKillSwitchIR | null;
  readonly rules: readonly RuleIR[];
  readonly defaultRule: DefaultIR;
}

/** A pod class as the gateway node binds it: what its tunnel carries there. */
export interface HostPodClassIR extends Omit<PodClassIR, 'via'> {
  readonly via: BoundViaIR;
}

/**
 * The Kubernetes cluster a gateway node belongs to, from its facts: the destinations the pod
 * network judges by identity, never by address. Its CIDR rules do not match pods or nodes, and a
 * ClusterIP is translated to a backend before policy, so it is the backend that is judged; the
 * egress gateway never steers them (docs/kubernetes.md, "What is verified here", with sources).
 */
export interface ClusterIR {
  readonly kind: 'cluster';
  /** The pod CIDRs, less the node addresses: the pod network's endpoints. */
  readonly pods: AddressSet;
  /** The service CIDRs: judged as the pods behind them. */
  readonly services: AddressSet;
  /** The nodes' addresses: the host and remote-node entities. */
  readonly nodes: AddressSet;
  /**
   * Per tunnel of the gateway node, how a pod sees that its traffic leaves by the tunnel's exit:
   * an echo service beyond it and the addresses it answers with through the tunnel.
   */
  readonly tunnelExits: Readonly<Record<string, TunnelExitIR>>;
}

/** What an echo service beyond a tunnel answers when traffic leaves by that tunnel. */
export interface TunnelExitIR {
  readonly echoUrl: string;
  readonly addresses: readonly string[];
}

/** The parts of a cluster the pod network judges by identity. */
export type ClusterPartName = 'pods' | 'services' | 'nodes';

/** A tunnel as one host has it: the families it can carry (an IPv4-only tunnel carries no IPv6). */
export interface TunnelIR {
  readonly kind: 'tunnel';
  /** The interface on this host (a tunnel declared with `match`: the one that matches now). */
  readonly name: string;
  /** The policy's name for it (equal to `name` unless the tunnel is found by `match`). */
  readonly declared: string;
  readonly families: readonly Family[];
  /**
   * Whether the host's facts have the interface. Absent (down, not created yet, or no interface
   * matches), `name` is one no interface has: a backend that must name an existing interface
   * (a filter rule that routes to it) compiles the class kill-switch-only instead.
   */
  readonly present: boolean;
  /**
   * Its own addresses and point-to-point peer as the facts show them (none while absent): a VPN
   * that reconnects gets new ones, and what was translated to the old ones must not live on, so
   * they are part of what a host's config hash covers.
   */
  readonly addresses: readonly string[];
  readonly peer: string | null;
}

export type BoundViaIR =
  | { readonly kind: 'uplink'; readonly interface: string }
  | {
      readonly kind: 'tunnel';
      readonly interface: string;
      readonly families: readonly Family[];
      /** As TunnelIR's `present`: the facts have the interface. */
      readonly present: boolean;
    };

/** A class bound to one host: `via` resolved to the interface it leaves by. */
export interface HostClassIR extends Omit<ClassIR, 'via' | 'hostLabels'> {
  readonly via: BoundViaIR;
  /**
   * The Kubernetes class whose egress gateway this class routes, when binding derived it (the
   * gateway node's own policy routing and kill switch for the tunnel's address); null for a
   * class of the policy.
   */
  readonly gatewayFor: string | null;
}

/** The IR bound to one host's facts: what a backend compiles and the host config hash covers. */
export interface HostIR {
  readonly kind: 'host-policy';
  readonly name: string;
  /** The resolved uplink interface name. */
  readonly uplink: string;
  readonly tunnels: readonly TunnelIR[];
  /**
   * Connected prefixes of the host outside the uplink and the tunnels: tunnel classes reach them
   * directly (throw routes), or LAN traffic and replies would go into the tunnel.
   */
  readonly localPrefixes: AddressSet;
  /**
   * The host's interfaces that have an address, by name, sorted: what the host takes as its own
   * (`self`), named so a backend can follow their addresses live as they change (pf: `(en0)`)
   * rather than freeze them when its rules load.
   */
  readonly hostInterfaces: readonly string[];
  /**
   * Per interface, its first IPv6 address beyond link-local (RFC 4291 §2.5.6: a link-local
   * address is never a source toward another link): the address an IPv6 masquerade on it gives,
   * as the IR's evaluator takes it. Interfaces without one are absent.
   */
  readonly ipv6NatSources: Readonly<Record<string, string>>;
  readonly reassembly: ReassemblyIR;
  /** The classes this host carries (its labels match), in policy order. */
  readonly classes: readonly HostClassIR[];
  /** Kubernetes classes, bound to this host as their gateway node (its tunnels' families). */
  readonly podClasses: readonly HostPodClassIR[];
  /** The cluster this host is a node of, when its facts say. */
  readonly cluster: ClusterIR | null;
}

export function assertNever(value: never, what = 'node'): never {
  throw new Error(`Unhandled ${what}: ${JSON.stringify(value)}`);
}

/** The families a tunnel class can leave by: those its tunnel carries on this host. */
export function carries(via: BoundViaIR, family: Family): boolean {
  return via.kind === 'uplink' || via.families.includes(family);
}
