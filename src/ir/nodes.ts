import type { AddressSet } from '../core/index.js';
import type { Destination, PortRange, Protocol } from '../policy/index.js';

/**
 * The intermediate representation: closed, immutable, backend-neutral. Every dispatch over a
 * `kind` ends in `assertNever`, so a new node kind does not compile until each backend handles it.
 */
export interface PolicyIR {
  readonly kind: 'policy';
  readonly name: string;
  /** The resolved uplink interface name. */
  readonly uplink: string;
  readonly tunnels: readonly string[];
  /**
   * Connected prefixes of the host outside the uplink and the tunnels: tunnel classes reach them
   * directly (throw routes), or LAN traffic and replies would go into the tunnel.
   */
  readonly localPrefixes: AddressSet;
  readonly classes: readonly ClassIR[];
}

export type SelectorIR =
  | {
      readonly kind: 'ingress';
      readonly interfaces: readonly string[];
      readonly sources: AddressSet;
    }
  | { readonly kind: 'host'; readonly sources: AddressSet };

export type ViaIR =
  | { readonly kind: 'uplink'; readonly interface: string }
  | { readonly kind: 'tunnel'; readonly interface: string };

export interface KillSwitchIR {
  readonly kind: 'kill-switch';
  readonly id: string;
  /** Destinations that may leave outside the tunnel: the policy's exceptions. */
  readonly except: AddressSet;
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

export interface ClassIR {
  readonly kind: 'class';
  readonly name: string;
  readonly selector: SelectorIR;
  /** Whether IPv6 of a class without IPv6 source prefixes is blocked (neighbour discovery aside). */
  readonly blockUnlistedIpv6: boolean;
  readonly via: ViaIR;
  readonly rules: readonly RuleIR[];
  readonly defaultAction: { readonly id: string; readonly action: 'allow' | 'deny' };
  readonly antiSpoofingId: string;
  readonly nat: boolean;
  readonly mssClamp: 'pmtu' | number | null;
  readonly killSwitch: KillSwitchIR | null;
}

export function assertNever(value: never, what = 'node'): never {
  throw new Error(`Unhandled ${what}: ${JSON.stringify(value)}`);
}

/** Whether an interface name matches a selector entry ("veth*" is a prefix). */
export function matchesInterface(pattern: string, name: string): boolean {
  return pattern.endsWith('*') ? name.startsWith(pattern.slice(0, -1)) : pattern === name;
}
