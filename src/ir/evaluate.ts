import {
  AddressSet,
  formatAddress,
  parseAddress,
  parsePrefix,
  prefixEnd,
  type Family,
  type Prefix,
} from '../core/index.js';
import type { HostFacts } from '../facts/index.js';
import type { Protocol } from '../policy/index.js';
import {
  assertNever,
  matchesInterface,
  type ClassIR,
  type PolicyIR,
  type RuleIR,
} from './nodes.js';

/** A packet to explain. Addresses are parsed; see `parsePacket`. */
export interface Packet {
  readonly family: Family;
  readonly source: number | bigint;
  readonly destination: number | bigint;
  /** The interface it arrives on; absent: found from the source, or host-originated. */
  readonly ingress: string | undefined;
  readonly protocol: Protocol;
  readonly port: number | undefined;
}

export interface EvaluationState {
  readonly tunnel: 'up' | 'down';
}

/** What decided a verdict. */
export type Decision =
  | { readonly kind: 'rule'; readonly id: string; readonly action: 'allow' | 'deny' | 'audit' }
  | { readonly kind: 'default'; readonly id: string }
  | { readonly kind: 'anti-spoofing'; readonly id: string }
  | { readonly kind: 'ipv6-block'; readonly id: string }
  | { readonly kind: 'neighbour-discovery'; readonly id: string }
  | { readonly kind: 'dhcp'; readonly id: string }
  | { readonly kind: 'kill-switch'; readonly id: string }
  | { readonly kind: 'unmanaged'; readonly id: null };

/** Where enforcement happens: policy routing, or the host firewall (nftables, pf, cilium). */
export type Layer = 'routing' | 'filter';

export interface Explanation {
  readonly class: string | null;
  readonly verdict: 'allow' | 'deny';
  readonly decidedBy: Decision;
  /** The interface the packet may leave by, "local" for the host itself, null when dropped. */
  readonly via: string | null;
  /** The source address the far side sees, when allowed and leaving the host. */
  readonly egress: string | null;
  readonly hook: 'forward' | 'input' | 'output' | null;
  readonly layers: readonly Layer[];
  readonly notes: readonly string[];
}

/** The parts of the host the evaluator needs: its addresses and main routing table. */
export interface HostView {
  /**
   * Every destination the host takes as its own (`self`, the input hook): its addresses, and
   * what the kernel delivers to it though no interface has it: the broadcast of each IPv4 prefix
   * shorter than /31 and 255.255.255.255 (net/ipv4/fib_frontend.c fib_add_ifaddr; route.c
   * ip_route_input_slow), and the subnet-router anycast of each IPv6 prefix shorter than /127,
   * which a forwarding host joins (RFC 4291 §2.6.1; net/ipv6/addrconf.c addrconf_join_anycast).
   */
  readonly addresses: AddressSet;
  readonly interfaceAddresses: ReadonlyMap<string, readonly Prefix[]>;
  readonly routes: readonly { prefix: Prefix; interface: string }[];
}

export function createHostView(facts: HostFacts): HostView {
  const prefixes: Prefix[] = [];
  const interfaceAddresses = new Map<string, Prefix[]>();
  for (const iface of facts.interfaces) {
    const own: Prefix[] = [];
    for (const address of iface.addresses) {
      const slash = address.indexOf('/');
      const host = parsePrefix(slash === -1 ? address : address.slice(0, slash));
      if (host !== undefined) {
        prefixes.push(host);
        own.push(host);
      }
      const network = slash === -1 ? undefined : parsePrefix(address);
      if (network !== undefined) prefixes.push(...receivedAsOwn(network));
    }
    interfaceAddresses.set(iface.name, own);
  }
  const routes: { prefix: Prefix; interface: string }[] = [];
  for (const route of facts.routes) {
    const families: string[] =
      route.destination === 'default' ? [defaultFamily(route.gateway)] : [route.destination];
    for (const text of families) {
      const prefix = parsePrefix(text);
      if (prefix !== undefined) routes.push({ prefix, interface: route.interface });
    }
  }
  prefixes.push(LIMITED_BROADCAST);
  return { addresses: AddressSet.fromPrefixes(prefixes), interfaceAddresses, routes };
}

const LIMITED_BROADCAST: Prefix = { family: 4, start: 0xffffffff, length: 32, hadHostBits: false };

/** The addresses of a connected prefix the host receives as its own: broadcast, or anycast. */
function receivedAsOwn(network: Prefix): Prefix[] {
  if (network.family === 4) {
    return network.length < 31
      ? [{ family: 4, start: prefixEnd(network), length: 32, hadHostBits: false }]
      : [];
  }
  return network.length < 127 ? [{ ...network, length: 128, hadHostBits: false }] : [];
}

function defaultFamily(gateway: string | undefined): string {
  return gateway?.includes(':') ? '::/0' : '0.0.0.0/0';
}

/** Parses explain's textual packet; throws on malformed input (the CLI reports it). */
export function parsePacket(input: {
  from: string;
  to: string;
  ingress?: string | undefined;
  protocol?: Protocol | undefined;
  port?: number | undefined;
}): Packet {
  const source = parseAddress(input.from);
  const destination = parseAddress(input.to);
  if (source === undefined) throw new Error(`Cannot parse source address "${input.from}"`);
  if (destination === undefined) throw new Error(`Cannot parse destination address "${input.to}"`);
  if (source.family !== destination.family) {
    throw new Error(
      `Source "${input.from}" and destination "${input.to}" are of different families`,
    );
  }
  return {
    family: source.family,
    source: source.value,
    destination: destination.value,
    ingress: input.ingress,
    protocol: input.protocol ?? 'tcp',
    port: input.port,
  };
}

const LAYERS_FILTER: readonly Layer[] = ['filter'];
const LAYERS_BOTH: readonly Layer[] = ['routing', 'filter'];
const ND_DESTINATIONS = AddressSet.parse(['fe80::/10', 'ff02::/16']);

/**
 * The reference evaluator: what the policy does to one packet. Every backend's output must agree
 * with it (the conformance suite; on Linux, differentially against the kernel).
 */
export function evaluatePacket(
  ir: PolicyIR,
  host: HostView,
  packet: Packet,
  state: EvaluationState,
): Explanation {
  const found = findClass(ir, packet);
  if (found === undefined) {
    return {
      class: null,
      verdict: 'allow',
      decidedBy: { kind: 'unmanaged', id: null },
      via: null,
      egress: null,
      hook: null,
      layers: [],
      notes: ['No class selects this packet: egressguard leaves it to the rest of the firewall'],
    };
  }
  const { cls, hook } = found;
  const deny = (
    decidedBy: Decision,
    layers: readonly Layer[],
    notes: string[] = [],
  ): Explanation => ({
    class: cls.name,
    verdict: 'deny',
    decidedBy,
    via: null,
    egress: null,
    hook,
    layers,
    notes,
  });

  const housekeeping = linkHousekeeping(cls, packet, hook);
  if (housekeeping !== undefined) return housekeeping;
  const sources = cls.selector.sources;
  if (!sources.has(packet.family)) {
    if (packet.family === 6 && !cls.blockUnlistedIpv6) {
      // IPv6 explicitly allowed for a class without IPv6 prefixes: no source check possible.
    } else {
      return packet.family === 6
        ? deny({ kind: 'ipv6-block', id: `${cls.name}/ipv6-block` }, LAYERS_FILTER, [
            `Class "${cls.name}" has no IPv6 source prefix, so its IPv6 is blocked`,
          ])
        : deny({ kind: 'anti-spoofing', id: cls.antiSpoofingId }, LAYERS_FILTER, [
            `Class "${cls.name}" has no IPv4 source prefix`,
          ]);
    }
  } else if (!sources.contains(packet.family, packet.source)) {
    return deny({ kind: 'anti-spoofing', id: cls.antiSpoofingId }, LAYERS_FILTER, [
      `The source is not among class "${cls.name}"'s prefixes (${sources.only(packet.family).describe()}): a workload may be spoofing`,
    ]);
  }

  const toSelf = host.addresses.contains(packet.family, packet.destination);
  // Forwarded classes reach the host in the input hook; a host class's packets to the host itself
  // are judged in the output hook like the rest (they leave by "lo").
  const effectiveHook = toSelf && hook === 'forward' ? 'input' : hook;
  const notes: string[] = [];
  let route: { kind: 'tunnel' | 'main'; interface: string | null } = {
    kind: 'main',
    interface: lookupRoute(host, packet),
  };
  let layers = LAYERS_FILTER;
  if (!toSelf && cls.via.kind === 'tunnel') {
    const bypass =
      ir.localPrefixes.contains(packet.family, packet.destination) ||
      (cls.killSwitch?.except.contains(packet.family, packet.destination) ?? false);
    if (!bypass) {
      layers = LAYERS_BOTH;
      route = { kind: 'tunnel', interface: cls.via.interface };
      if (state.tunnel === 'down') {
        if (cls.killSwitch !== null) {
          return deny({ kind: 'kill-switch', id: cls.killSwitch.id }, LAYERS_BOTH, [
            `Tunnel "${cls.via.interface}" is down: the owned routing table's blackhole and the firewall's kill switch each drop it`,
          ]);
        }
        // Its owned table has no blackhole: the lookup falls through, and main alone routes it.
        route = { kind: 'main', interface: lookupRoute(host, packet) };
        layers = LAYERS_FILTER;
        notes.push(
          `Tunnel "${cls.via.interface}" is down and class "${cls.name}" has no kill switch: its owned routing table has no blackhole, so it falls back to the main table${route.interface === null ? '' : ` and leaves by "${route.interface}"`}`,
        );
      }
    } else {
      notes.push(
        'Excepted or local destination: leaves by the main routing table, outside the tunnel',
      );
    }
  }

  const rule = cls.rules.find((r) => matchesRule(r, packet, toSelf));
  const decidedBy: Decision =
    rule === undefined
      ? { kind: 'default', id: cls.defaultAction.id }
      : { kind: 'rule', id: rule.id, action: rule.action };
  const action = rule === undefined ? cls.defaultAction.action : rule.action;
  if (action === 'deny') {
    return { ...deny(decidedBy, layers, notes), hook: effectiveHook };
  }
  if (action === 'audit') notes.push('Audited: logged and allowed');
  const via = toSelf ? 'local' : route.interface;
  if (via === null)
    notes.push('No route to the destination: the host drops it with "network unreachable"');
  return {
    class: cls.name,
    verdict: 'allow',
    decidedBy,
    via,
    egress: toSelf || via === null ? null : egressAddress(host, cls, via, packet),
    hook: effectiveHook,
    layers,
    notes,
  };
}

/**
 * Neighbour discovery and DHCP with the host stay open ahead of anti-spoofing, or the link breaks.
 * ICMPv6 to a link-local or multicast address stands for neighbour discovery here.
 */
function linkHousekeeping(
  cls: ClassIR,
  packet: Packet,
  hook: 'forward' | 'output',
): Explanation | undefined {
  if (hook !== 'forward') return undefined;
  let decidedBy: Decision | undefined;
  if (
    packet.family === 6 &&
    packet.protocol === 'icmp' &&
    ND_DESTINATIONS.contains(6, packet.destination)
  ) {
    decidedBy = { kind: 'neighbour-discovery', id: `${cls.name}/neighbour-discovery` };
  } else if (
    packet.family === 4 &&
    packet.protocol === 'udp' &&
    packet.port === 67 &&
    packet.source === 0 &&
    packet.destination === 0xffffffff
  ) {
    decidedBy = { kind: 'dhcp', id: `${cls.name}/dhcp` };
  }
  if (decidedBy === undefined) return undefined;
  return {
    class: cls.name,
    verdict: 'allow',
    decidedBy,
    via: 'local',
    egress: null,
    hook: 'input',
    layers: LAYERS_FILTER,
    notes: ['Link housekeeping with the host (neighbour discovery, DHCP) stays open'],
  };
}

function findClass(
  ir: PolicyIR,
  packet: Packet,
): { cls: ClassIR; hook: 'forward' | 'output' } | undefined {
  if (packet.ingress !== undefined) {
    const ingress = packet.ingress;
    const cls = ir.classes.find(
      (c) =>
        c.selector.kind === 'ingress' &&
        c.selector.interfaces.some((pattern) => matchesInterface(pattern, ingress)),
    );
    return cls === undefined ? undefined : { cls, hook: 'forward' };
  }
  for (const cls of ir.classes) {
    if (cls.selector.sources.contains(packet.family, packet.source)) {
      const kind = cls.selector.kind;
      switch (kind) {
        case 'ingress':
          return { cls, hook: 'forward' };
        case 'host':
          return { cls, hook: 'output' };
        default:
          return assertNever(kind);
      }
    }
  }
  return undefined;
}

function matchesRule(rule: RuleIR, packet: Packet, toSelf: boolean): boolean {
  const { destination, protocols, ports } = rule.match;
  switch (destination.kind) {
    case 'any':
      break;
    case 'self':
      if (!toSelf) return false;
      break;
    case 'addresses':
      if (!destination.set.contains(packet.family, packet.destination)) return false;
      break;
    default:
      return assertNever(destination);
  }
  if (protocols !== null && !protocols.includes(packet.protocol)) return false;
  if (ports !== null) {
    if (packet.port === undefined) return false;
    const port = packet.port;
    if (!ports.some((r) => r.from <= port && port <= r.to)) return false;
  }
  return true;
}

function lookupRoute(host: HostView, packet: Packet): string | null {
  let best: { length: number; interface: string } | undefined;
  for (const route of host.routes) {
    if (route.prefix.family !== packet.family) continue;
    if (best !== undefined && route.prefix.length <= best.length) continue;
    if (AddressSet.fromPrefixes([route.prefix]).contains(packet.family, packet.destination)) {
      best = { length: route.prefix.length, interface: route.interface };
    }
  }
  return best?.interface ?? null;
}

function egressAddress(host: HostView, cls: ClassIR, via: string, packet: Packet): string | null {
  // NAT masquerades out of the class's own exit only; excepted and local routes keep the source.
  if (!cls.nat || via !== cls.via.interface) return formatAddress(packet.family, packet.source);
  const own = host.interfaceAddresses.get(via)?.find((p) => p.family === packet.family);
  return own === undefined ? null : formatAddress(own.family, own.start);
}
