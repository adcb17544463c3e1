import type { AddressSet } from '../core/index.js';

/** An IP protocol: the three with family-aware meaning by name, any other by number. */
export type Protocol = 'tcp' | 'udp' | 'icmp' | number;

export interface PortRange {
  readonly from: number;
  readonly to: number;
}

export type Destination =
  | { readonly kind: 'any' }
  | { readonly kind: 'self' }
  | { readonly kind: 'addresses'; readonly set: AddressSet; readonly names: readonly string[] };

export interface PolicyRule {
  readonly id: string;
  readonly action: 'allow' | 'deny' | 'audit';
  readonly destination: Destination;
  /** Null: every IP protocol. */
  readonly protocols: readonly Protocol[] | null;
  /** Null: every port. */
  readonly ports: readonly PortRange[] | null;
}

export interface PolicyClass {
  readonly name: string;
  readonly origin: 'forwarded' | 'host';
  readonly ingress: readonly string[];
  readonly sources: AddressSet;
  readonly ipv6: 'block' | 'allow';
  readonly labels: Readonly<Record<string, string>>;
  readonly via: { readonly kind: 'uplink' } | { readonly kind: 'tunnel'; readonly name: string };
  readonly killSwitch: {
    readonly except: AddressSet;
    readonly exceptNames: readonly string[];
  } | null;
  readonly rules: readonly PolicyRule[];
  readonly defaultAction: 'allow' | 'deny';
  readonly nat: boolean;
  readonly mssClamp: 'pmtu' | number | null;
}

/**
 * A Kubernetes class: pods selected by namespace and labels. The pod network enforces it
 * (network policy and egress gateway); a node's firewall never sees its packets (eBPF host routing).
 */
export interface PodClass {
  readonly name: string;
  /** Null: pods of every namespace. */
  readonly namespace: string | null;
  readonly labels: Readonly<Record<string, string>>;
  readonly via: PolicyClass['via'];
  readonly killSwitch: PolicyClass['killSwitch'];
  readonly rules: readonly PolicyRule[];
  readonly defaultAction: 'allow' | 'deny';
}

/** A probe sent by a pod of a Kubernetes class (pods have no fixed address). */
export interface PodProbe {
  readonly id: string;
  /** Its index among its requirement's probes in the policy, for pointing at it. */
  readonly index: number;
  /** The pod class whose pod sends it. */
  readonly pod: string;
  readonly to: string;
  readonly proto: Protocol;
  readonly port: number | undefined;
  readonly tunnel: 'up' | 'down';
  readonly expect: 'allow' | 'deny';
  /** The interface it should leave by (the tunnel on the gateway node). */
  readonly via: string | undefined;
}

export interface Probe {
  readonly id: string;
  readonly from: string;
  readonly in: string | undefined;
  readonly to: string;
  readonly proto: Protocol;
  readonly port: number | undefined;
  readonly tunnel: 'up' | 'down';
  readonly expect: 'allow' | 'deny';
  readonly egress: string | undefined;
  readonly via: string | undefined;
}

export interface Requirement {
  readonly id: string;
  readonly statement: string;
  readonly safetyCritical: boolean;
  readonly probes: readonly Probe[];
  readonly podProbes: readonly PodProbe[];
}

/**
 * A tunnel found by its addresses rather than its name (a macOS utun is renumbered on every
 * reconnect): the interface with this local address, or with this point-to-point peer.
 */
export interface TunnelMatch {
  readonly address: string | null;
  readonly peer: string | null;
}

/** A validated policy with every network resolved to address sets. */
export interface Policy {
  readonly file: string;
  readonly name: string;
  /** "default-route" or an interface name. */
  readonly uplink: string;
  readonly tunnels: readonly string[];
  /** How a tunnel declared with `match` is found on a host, by its name in the policy. */
  readonly tunnelMatches: Readonly<Record<string, TunnelMatch>>;
  readonly classes: readonly PolicyClass[];
  /** Kubernetes classes (pods), in policy order. */
  readonly podClasses: readonly PodClass[];
  readonly requirements: readonly Requirement[];
}
