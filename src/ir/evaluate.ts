import {
  AddressSet,
  formatAddress,
  parsePrefix,
  prefixEnd,
  type Family,
  type Prefix,
} from '../core/index.js';
import type { HostFacts } from '../facts/index.js';
import { matchesInterface, type Protocol } from '../policy/index.js';
import {
  assertNever,
  carries,
  type HostClassIR,
  type HostIR,
  type HousekeepingIR,
  type RuleIR,
} from './nodes.js';
import { isGlobalV6, masqueradeSourceV6, type SourceCandidate } from './masquerade-source.js';

/** Which part of a fragmented datagram a packet is. */
export type FragmentPart =
  /** The first fragment of a datagram whose fragments all arrive. */
  | 'first'
  /** A later fragment of a datagram whose fragments all arrive. */
  | 'non-first'
  /** A fragment whose datagram never completes (a non-first fragment sent alone, say). */
  | 'alone';

/** A packet to explain. Addresses are parsed; see `parsePacketArguments`. */
export interface Packet {
  readonly family: Family;
  readonly source: number | bigint;
  readonly destination: number | bigint;
  /** The interface it arrives on; absent: found from the source, or host-originated. */
  readonly ingress: string | undefined;
  readonly protocol: Protocol;
  /** The destination port of the datagram (of the whole datagram for a fragment). */
  readonly port: number | undefined;
  /** The ICMP or ICMPv6 type; absent: an echo request. */
  readonly icmpType?: number | undefined;
  /** Absent: not a fragment. */
  readonly fragment?: FragmentPart | undefined;
}

export interface EvaluationState {
  readonly tunnel: 'up' | 'down';
}

/** What decided a verdict: an IR node's kind and id. */
export type Decision =
  | { readonly kind: 'rule'; readonly id: string; readonly action: 'allow' | 'deny' | 'audit' }
  | { readonly kind: 'default'; readonly id: string }
  | { readonly kind: 'anti-spoofing'; readonly id: string }
  | { readonly kind: 'ipv6-block'; readonly id: string }
  | { readonly kind: HousekeepingIR['kind']; readonly id: string }
  | { readonly kind: 'kill-switch'; readonly id: string }
  | { readonly kind: 'reassembly'; readonly id: string }
  | { readonly kind: 'unmanaged'; readonly id: null };

/**
 * Where enforcement happens: policy routing, the firewall the host's backend compiles to, or the
 * pod network of a Kubernetes class (the backend that supports pod classes names it).
 */
export type Layer = 'routing' | 'filter' | 'pod-network';

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
  /** Every address of the host with its interface, in interface order: what a masquerade picks from. */
  readonly sourceCandidates: readonly SourceCandidate[];
}

export function createHostView(facts: HostFacts): HostView {
  const prefixes: Prefix[] = [];
  const interfaceAddresses = new Map<string, Prefix[]>();
  const sourceCandidates: SourceCandidate[] = [];
  for (const iface of facts.interfaces) {
    const own: Prefix[] = [];
    for (const address of iface.addresses) {
      const slash = address.indexOf('/');
      const host = parsePrefix(slash === -1 ? address : address.slice(0, slash));
      if (host !== undefined) {
        prefixes.push(host);
        own.push(host);
        const length = slash === -1 ? host.length : Number(address.slice(slash + 1));
        sourceCandidates.push({ interface: iface.name, address: host, prefixLength: length });
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
  return {
    addresses: AddressSet.fromPrefixes(prefixes),
    interfaceAddresses,
    routes,
    sourceCandidates,
  };
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

const LAYERS_FILTER: readonly Layer[] = ['filter'];
const LAYERS_BOTH: readonly Layer[] = ['routing', 'filter'];
const LINK_LOCAL_V6 = AddressSet.parse(['fe80::/10']);
const LINK_MULTICAST_V6 = AddressSet.parse(['ff02::/16']);
const ALL_DHCP_AGENTS = AddressSet.parse(['ff02::1:2/128']);
/** RFC 4861 router solicitation, neighbour solicitation and advertisement. */
const ND_TYPES = new Set([133, 135, 136]);
const ECHO_REQUEST: Readonly<Record<Family, number>> = { 4: 8, 6: 128 };

/**
 * The reference evaluator: what the policy does to one packet. Every backend's output must agree
 * with it (the conformance suite; on Linux, differentially against the kernel).
 */
export function evaluatePacket(
  ir: HostIR,
  host: HostView,
  packet: Packet,
  state: EvaluationState,
): Explanation {
  const found = findClass(ir, packet);
  if (packet.fragment === 'alone') return incompleteFragment(ir, found?.cls ?? null);
  const fragmentNotes =
    packet.fragment === undefined
      ? []
      : [
          `A ${packet.fragment} fragment: the kernel reassembles fragments before any hook of ours (node "${ir.reassembly.id}"), so it is judged like its whole datagram`,
        ];
  if (found === undefined) {
    return {
      class: null,
      verdict: 'allow',
      decidedBy: { kind: 'unmanaged', id: null },
      via: null,
      egress: null,
      hook: null,
      layers: [],
      notes: [
        'No class selects this packet: egressguard leaves it to the rest of the firewall',
        ...fragmentNotes,
      ],
    };
  }
  const { cls } = found;
  const toSelf = isForHost(host, packet);
  // Forwarded classes reach the host in the input hook; a host class's packets to the host itself
  // are judged in the output hook like the rest (they leave by "lo").
  const hook = toSelf && found.hook === 'forward' ? 'input' : found.hook;
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
    notes: [...notes, ...fragmentNotes],
  });

  if (found.hook === 'forward') {
    const housekeeping = cls.housekeeping.find((h) => isHousekeeping(h, packet, hook));
    if (housekeeping !== undefined) {
      return {
        class: cls.name,
        verdict: 'allow',
        decidedBy: { kind: housekeeping.kind, id: housekeeping.id },
        via: 'local',
        egress: null,
        hook: 'input',
        layers: LAYERS_FILTER,
        notes: [
          'Link housekeeping with the host (neighbour discovery, DHCP) stays open',
          ...fragmentNotes,
        ],
      };
    }
  }
  const sources = cls.selector.sources;
  if (cls.antiSpoofing !== null) {
    if (!sources.has(packet.family)) {
      if (packet.family === 6 && cls.ipv6Block === null) {
        // IPv6 explicitly allowed for a class without IPv6 prefixes: no source check possible.
      } else if (packet.family === 6 && cls.ipv6Block !== null) {
        return deny({ kind: 'ipv6-block', id: cls.ipv6Block.id }, LAYERS_FILTER, [
          `Class "${cls.name}" has no IPv6 source prefix, so its IPv6 is blocked`,
        ]);
      } else {
        return deny({ kind: 'anti-spoofing', id: cls.antiSpoofing.id }, LAYERS_FILTER, [
          `Class "${cls.name}" has no IPv${packet.family} source prefix`,
        ]);
      }
    } else if (!sources.contains(packet.family, packet.source)) {
      return deny({ kind: 'anti-spoofing', id: cls.antiSpoofing.id }, LAYERS_FILTER, [
        `The source is not among class "${cls.name}"'s prefixes (${sources.only(packet.family).describe()}): a workload may be spoofing`,
      ]);
    }
  }

  const notes: string[] = [];
  let route: { kind: 'tunnel' | 'main'; interface: string | null } = {
    kind: 'main',
    interface: lookupRoute(host, packet),
  };
  let layers = LAYERS_FILTER;
  if (!toSelf && cls.via.kind === 'tunnel') {
    const tunnel = cls.via.interface;
    const bypass =
      ir.localPrefixes.contains(packet.family, packet.destination) ||
      (cls.killSwitch?.except.contains(packet.family, packet.destination) ?? false);
    if (!bypass && isLinkLocal(packet)) {
      // The kernel looks a link-local destination up on the link the packet came by, whatever
      // the ip rules say (strict interface): it goes back out of that link, never into the
      // tunnel, and the kill switch drops what leaves by any other interface (measured).
      if (cls.killSwitch !== null) {
        return deny({ kind: 'kill-switch', id: cls.killSwitch.id }, LAYERS_FILTER, [
          `A link-local destination leaves by the link it came by ("${packet.ingress ?? '?'}"), not by tunnel "${tunnel}": the kill switch drops it`,
        ]);
      }
      notes.push(
        `A link-local destination leaves by the link it came by, not by tunnel "${tunnel}"`,
      );
    } else if (!bypass) {
      layers = LAYERS_BOTH;
      route = { kind: 'tunnel', interface: tunnel };
      const carried = carries(cls.via, packet.family);
      if (state.tunnel === 'down' || !carried) {
        const why = carried
          ? `Tunnel "${tunnel}" is down`
          : `Tunnel "${tunnel}" carries no IPv${packet.family} on this host (IPv${packet.family} is disabled on it)`;
        if (cls.killSwitch !== null) {
          return deny({ kind: 'kill-switch', id: cls.killSwitch.id }, LAYERS_BOTH, [
            `${why}: the owned routing table's blackhole and the firewall's kill switch each drop it`,
          ]);
        }
        // Its owned table has no blackhole: the lookup falls through, and main alone routes it.
        route = { kind: 'main', interface: lookupRoute(host, packet) };
        layers = LAYERS_FILTER;
        notes.push(
          `${why} and class "${cls.name}" has no kill switch: its owned routing table has no blackhole, so it falls back to the main table${route.interface === null ? '' : ` and leaves by "${route.interface}"`}`,
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
      ? { kind: 'default', id: cls.defaultRule.id }
      : { kind: 'rule', id: rule.id, action: rule.action };
  const action = rule === undefined ? cls.defaultRule.action : rule.action;
  if (action === 'deny') return deny(decidedBy, layers, notes);
  if (action === 'audit') notes.push('Audited: logged and allowed');
  const via = toSelf ? 'local' : route.interface;
  if (via === null)
    notes.push('No route to the destination: the host drops it with "network unreachable"');
  const egress = toSelf || via === null ? undefined : egressAddress(host, cls, via, packet);
  if (egress?.note !== undefined) notes.push(egress.note);
  return {
    class: cls.name,
    verdict: 'allow',
    decidedBy,
    via,
    egress: egress?.address ?? null,
    hook,
    layers,
    notes: [...notes, ...fragmentNotes],
  };
}

/**
 * A fragment whose datagram never completes is held for reassembly and discarded when its timer
 * runs out (net.ipv4.ipfrag_time, nf_conntrack_frag6_timeout): nothing of it leaves the host, in
 * a class or not. The destination could not have reassembled it either.
 */
function incompleteFragment(ir: HostIR, cls: HostClassIR | null): Explanation {
  return {
    class: cls?.name ?? null,
    verdict: 'deny',
    decidedBy: { kind: 'reassembly', id: ir.reassembly.id },
    via: null,
    egress: null,
    hook: null,
    layers: LAYERS_FILTER,
    notes: [
      'A fragment whose datagram never completes: the kernel holds it for reassembly before any hook of ours and discards it when the reassembly timer runs out',
    ],
  };
}

/**
 * Whether the host takes a packet as its own: one of its addresses, or link-local multicast
 * (neighbour discovery to a solicited-node group, DHCPv6 to the servers' group), which it
 * receives when it has joined the group. A link-local address of another node is not: the
 * kernel routes it back out of the link it came by, through the forward hook (measured;
 * net/ipv6/ip6_output.c ip6_forward skips its link-local source check for a packet that leaves
 * by the interface it arrived on).
 */
function isForHost(host: HostView, packet: Packet): boolean {
  return (
    host.addresses.contains(packet.family, packet.destination) ||
    (packet.family === 6 && LINK_MULTICAST_V6.contains(6, packet.destination))
  );
}

function isHousekeeping(
  node: HousekeepingIR,
  packet: Packet,
  hook: 'forward' | 'input' | 'output',
): boolean {
  // Housekeeping is with the host itself: it opens the input hook only.
  if (hook !== 'input') return false;
  switch (node.kind) {
    case 'neighbour-discovery':
      return packet.family === 6 && packet.protocol === 'icmp' && ND_TYPES.has(icmpTypeOf(packet));
    case 'dhcp':
      if (packet.protocol !== 'udp') return false;
      // RFC 2131: a client without an address broadcasts from 0.0.0.0 to the server port.
      if (packet.family === 4) {
        return packet.port === 67 && packet.source === 0 && packet.destination === 0xffffffff;
      }
      // RFC 8415 §7.1: a client sends from its link-local address to All_DHCP_Relay_Agents_and_Servers.
      return (
        packet.port === 547 &&
        LINK_LOCAL_V6.contains(6, packet.source) &&
        ALL_DHCP_AGENTS.contains(6, packet.destination)
      );
    default:
      return assertNever(node);
  }
}

function icmpTypeOf(packet: Packet): number {
  return packet.icmpType ?? ECHO_REQUEST[packet.family];
}

function findClass(
  ir: HostIR,
  packet: Packet,
): { cls: HostClassIR; hook: 'forward' | 'output' } | undefined {
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

/** An IPv6 link-local destination (fe80::/10). */
function isLinkLocal(packet: Packet): boolean {
  return packet.family === 6 && LINK_LOCAL_V6.contains(6, packet.destination);
}

function lookupRoute(host: HostView, packet: Packet): string | null {
  // Every interface has fe80::/64: a link-local destination is on the link the packet came by.
  if (isLinkLocal(packet)) return packet.ingress ?? null;
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

/** The source the far side sees, and what a person must know of it (a masquerade gone astray). */
function egressAddress(
  host: HostView,
  cls: HostClassIR,
  via: string,
  packet: Packet,
): { readonly address: string | null; readonly note?: string } {
  // NAT masquerades out of the class's own exit only; excepted and local routes keep the source.
  if (cls.nat === null || via !== cls.via.interface) {
    return { address: formatAddress(packet.family, packet.source) };
  }
  if (packet.family === 4) {
    const own = host.interfaceAddresses.get(via)?.find((p) => p.family === 4);
    return { address: own === undefined ? null : formatAddress(4, own.start) };
  }
  const source = masqueradeSourceV6(host.sourceCandidates, via, packet.destination as bigint);
  if (source === undefined) {
    return {
      address: null,
      note: `The host has no IPv6 address at all: the masquerade out of "${via}" finds no source and the kernel drops it`,
    };
  }
  const address = formatAddress(6, source.address.start);
  const global = isGlobalV6(source.address.start as bigint);
  if (source.interface === via && global) return { address };
  const fix = `give "${via}" an IPv6 address, or leave IPv6 out of class "${cls.name}"'s sources (its IPv6 is then blocked)`;
  return {
    address,
    note: global
      ? `"${via}" has no IPv6 address of its own: the masquerade gives the packet the source the kernel selects among the host's others (RFC 6724), ${address} of "${source.interface}", which the tunnel's far end did not assign: a VPN server normally drops it, so no reply comes back; ${fix}`
      : `The host has no global IPv6 address: the masquerade gives the packet the link-local source ${address} of "${source.interface}", which nothing beyond the link can answer, so no reply comes back; ${fix}`,
  };
}
