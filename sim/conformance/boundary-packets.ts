import { AddressSet, createRandom, type Family } from '../../src/core/index.js';
import type { EvaluationState, FragmentPart, HostIR, PodPacket } from '../../src/ir/index.js';
import type { Protocol } from '../../src/policy/index.js';
import type { TestPacket } from '../../src/backends/backend.js';

const V4_MAX = 2 ** 32 - 1;
const V6_MAX = (1n << 128n) - 1n;
const PROTOCOLS: readonly Protocol[] = ['tcp', 'udp', 'icmp', 47, 50, 132];
const FRAGMENT_PARTS: readonly FragmentPart[] = ['first', 'non-first', 'alone'];
/** The share of packets sent as a fragment: the first, a non-first, or a lone one. */
const FRAGMENT_SHARE = 0.1;

/**
 * Packets biased to the edges where compilers go wrong: the first and last address of every
 * interval and one outside each, every port-range edge and its neighbours, both families,
 * GRE/ESP/SCTP besides TCP/UDP/ICMP, and some sent as fragments (a first or non-first fragment
 * of a datagram that completes, or a lone one). Deterministic for a seed.
 */
export function generateBoundaryPackets(
  ir: HostIR,
  options: {
    count: number;
    seed: number;
    hostAddresses?: AddressSet;
  },
): TestPacket[] {
  const random = createRandom(options.seed);
  const pick = <T>(items: readonly T[]): T => items[Math.floor(random() * items.length)] as T;

  const destinationSets: AddressSet[] = [ir.localPrefixes];
  if (options.hostAddresses !== undefined) destinationSets.push(options.hostAddresses);
  const ports = boundariesOf(ir.classes, destinationSets);
  const destinationEdges = { 4: edges(destinationSets, 4), 6: edges(destinationSets, 6) };
  const portList = [...ports].sort((a, b) => a - b);

  const classes = ir.classes.filter((c) => c.selector.kind === 'ingress');
  const packets: TestPacket[] = [];
  for (let i = 0; i < options.count && classes.length > 0; i++) {
    const cls = pick(classes);
    if (cls.selector.kind !== 'ingress') continue;
    const family: Family =
      cls.selector.sources.has(6) && random() < 0.4
        ? 6
        : cls.selector.sources.has(4)
          ? random() < 0.15
            ? 6
            : 4
          : 6;
    const sourceEdges = edges([cls.selector.sources], family);
    const source =
      random() < 0.8
        ? (randomIn(cls.selector.sources, family, random) ??
          pick(sourceEdges.length > 0 ? sourceEdges : [documentationAddress(family, random)]))
        : pick(sourceEdges.length > 0 ? sourceEdges : [documentationAddress(family, random)]);
    const edgeList = destinationEdges[family];
    const destination =
      edgeList.length > 0 && random() < 0.7 ? pick(edgeList) : documentationAddress(family, random);
    const protocol = pick(PROTOCOLS);
    const port =
      protocol === 'tcp' || protocol === 'udp' || protocol === 132 ? pick(portList) : undefined;
    const pattern = pick(cls.selector.interfaces);
    const ingress = pattern.endsWith('*')
      ? `${pattern.slice(0, -1)}${Math.floor(random() * 4)}`
      : pattern;
    const fragment = random() < FRAGMENT_SHARE ? pick(FRAGMENT_PARTS) : undefined;
    packets.push({
      packet: {
        family,
        source,
        destination,
        ingress,
        protocol,
        port,
        ...(fragment === undefined ? {} : { fragment }),
      },
      state: { tunnel: random() < 0.5 ? 'up' : 'down' },
    });
  }
  return packets;
}

/** A packet a pod of a Kubernetes class sends, and the gateway's tunnel state to judge it in. */
export interface PodTestPacket {
  readonly podClass: string;
  readonly packet: PodPacket;
  readonly state: EvaluationState;
}

const ECHO_REQUEST: Readonly<Record<Family, number>> = { 4: 8, 6: 128 };

/**
 * Boundary-biased packets for the Kubernetes classes: destinations at every edge of the classes'
 * rule sets and kill switch exceptions (and one beyond), every port-range edge and its
 * neighbours, both families, half with the tunnel up. Pods have no fixed address: the class is
 * the source. Deterministic for a seed.
 */
export function generatePodBoundaryPackets(
  ir: HostIR,
  options: {
    count: number;
    seed: number;
    /** The protocols to draw from (default TCP, UDP, ICMP, SCTP, GRE). */
    protocols?: readonly Protocol[];
    /** More destinations to include (in-cluster addresses, say). */
    extraDestinations?: AddressSet;
  },
): PodTestPacket[] {
  const random = createRandom(options.seed);
  const pick = <T>(items: readonly T[]): T => items[Math.floor(random() * items.length)] as T;
  const protocols = options.protocols ?? ['tcp', 'udp', 'icmp', 132, 47];
  const sets: AddressSet[] = [];
  if (options.extraDestinations !== undefined) sets.push(options.extraDestinations);
  // The cluster's pods, services and nodes: the pod network judges them by identity.
  if (ir.cluster !== null) sets.push(ir.cluster.pods, ir.cluster.services, ir.cluster.nodes);
  const ports = boundariesOf(ir.podClasses, sets);
  const destinationEdges = { 4: edges(sets, 4), 6: edges(sets, 6) };
  const portList = [...ports].sort((a, b) => a - b);
  const packets: PodTestPacket[] = [];
  for (let i = 0; i < options.count && ir.podClasses.length > 0; i++) {
    const cls = pick(ir.podClasses);
    const family: Family = random() < 0.2 ? 6 : 4;
    const edgeList = destinationEdges[family];
    const destination =
      edgeList.length > 0 && random() < 0.7 ? pick(edgeList) : documentationAddress(family, random);
    const protocol = pick(protocols);
    const port =
      protocol === 'tcp' || protocol === 'udp' || protocol === 132 ? pick(portList) : undefined;
    packets.push({
      podClass: cls.name,
      packet: {
        family,
        destination,
        protocol,
        port,
        ...(protocol === 'icmp' ? { icmpType: ECHO_REQUEST[family] } : {}),
      },
      state: { tunnel: random() < 0.5 ? 'up' : 'down' },
    });
  }
  return packets;
}

/** First and last address of every interval, and one beyond each end. */
function edges(sets: readonly AddressSet[], family: Family): (number | bigint)[] {
  const out = new Set<number | bigint>();
  const max = family === 4 ? V4_MAX : V6_MAX;
  for (const set of sets) {
    for (const [s, e] of set.intervals(family)) {
      out.add(s);
      out.add(e);
      if (family === 4) {
        if ((s as number) > 0) out.add((s as number) - 1);
        if ((e as number) < (max as number)) out.add((e as number) + 1);
      } else {
        if ((s as bigint) > 0n) out.add((s as bigint) - 1n);
        if ((e as bigint) < (max as bigint)) out.add((e as bigint) + 1n);
      }
    }
  }
  return [...out];
}

function randomIn(
  set: AddressSet,
  family: Family,
  random: () => number,
): number | bigint | undefined {
  const intervals = [...set.intervals(family)];
  const chosen = intervals[Math.floor(random() * intervals.length)];
  if (chosen === undefined) return undefined;
  const [s, e] = chosen;
  if (family === 4)
    return (s as number) + Math.floor(random() * ((e as number) - (s as number) + 1));
  const span = (e as bigint) - (s as bigint) + 1n;
  const offset = BigInt(Math.floor(random() * Number(span > 1_000_000n ? 1_000_000n : span)));
  return (s as bigint) + offset;
}

/** An address in the documentation ranges (RFC 5737, RFC 3849): the lab's "internet". */
function documentationAddress(family: Family, random: () => number): number | bigint {
  if (family === 4) {
    const bases = [0xc0000200, 0xc6336400, 0xcb007100]; // 192.0.2.0, 198.51.100.0, 203.0.113.0
    return (bases[Math.floor(random() * 3)] ?? 0xc0000200) + 1 + Math.floor(random() * 254);
  }
  return (0x20010db8n << 96n) | BigInt(Math.floor(random() * 0xffffffff));
}

/**
 * The edges packets are aimed at: every kill-switch exception and rule destination goes into
 * `sets`; the ports returned are the common ones plus each rule range's ends and their neighbours.
 */
function boundariesOf(
  classes: readonly {
    readonly killSwitch: { readonly except: AddressSet } | null;
    readonly rules: HostIR['classes'][number]['rules'];
  }[],
  sets: AddressSet[],
): Set<number> {
  const ports = new Set<number>([1, 22, 53, 80, 443, 65535]);
  for (const cls of classes) {
    if (cls.killSwitch !== null) sets.push(cls.killSwitch.except);
    for (const rule of cls.rules) {
      if (rule.match.destination.kind === 'addresses') sets.push(rule.match.destination.set);
      for (const range of rule.match.ports ?? []) {
        for (const p of [
          range.from - 1,
          range.from,
          range.from + 1,
          range.to - 1,
          range.to,
          range.to + 1,
        ]) {
          if (p >= 1 && p <= 65535) ports.add(p);
        }
      }
    }
  }
  return ports;
}
