import { AddressSet, AddressSetBuilder, EgressguardError, type Family } from '../../core/index.js';
import { carries, type HostPodClassIR, type RuleIR } from '../../ir/index.js';
import type { Protocol } from '../../policy/index.js';

/**
 * First match → Cilium's union of allows with deny-overrides. Cilium network policy has no rule
 * order: allows are a union and any deny beats every allow (intro.rst "Rule Basics", deny.rst;
 * shared/reference/cilium/NOTES.md). So the class's ordered rules are first evaluated here, on
 * every elementary piece of the destination space (address intervals cut at every rule's edge,
 * times L4 pieces cut at every rule's port edge), and each piece gets the verdict of its first
 * matching rule. Pieces with one set of allowed L4 pieces are grouped, and each group is written
 * in the form Cilium can express: an allow that lists what is allowed, or (when the allowed part
 * includes protocols Cilium's toPorts cannot name, like GRE) an L3 allow with a deny of the rest.
 * That is "earlier allows subtracted from later denies, and the reverse", done once and exactly.
 */

/** One piece of the L4 space: a port range of a ported protocol, all of ICMP, or the rest. */
export type L4Piece =
  | {
      readonly kind: 'ports';
      readonly protocol: 'TCP' | 'UDP' | 'SCTP';
      readonly from: number;
      readonly to: number;
    }
  | { readonly kind: 'icmp' }
  /** Every protocol other than TCP, UDP, SCTP and ICMP: Cilium's toPorts cannot name them. */
  | { readonly kind: 'other' };

export interface VerdictGroup {
  /** Destinations (both families) that share one verdict on every L4 piece. */
  readonly addresses: AddressSet;
  /** The L4 pieces allowed to them; the others are denied. */
  readonly allowed: readonly L4Piece[];
  readonly denied: readonly L4Piece[];
  /** The policy ids that decided (rules, the default, the kill switch), sorted. */
  readonly decidedBy: readonly string[];
}

const PORTED: readonly { protocol: 'TCP' | 'UDP' | 'SCTP'; ir: Protocol }[] = [
  { protocol: 'TCP', ir: 'tcp' },
  { protocol: 'UDP', ir: 'udp' },
  { protocol: 'SCTP', ir: 132 },
];
const MAX: Readonly<Record<Family, number | bigint>> = { 4: 2 ** 32 - 1, 6: (1n << 128n) - 1n };

/** Refuses what Cilium cannot express, with the rule and the reason. */
function checkExpressible(cls: HostPodClassIR): void {
  for (const rule of cls.rules) {
    if (rule.action === 'audit') {
      throw new EgressguardError(
        'unsupported',
        `Cannot compile rule "${rule.id}" of Kubernetes class "${cls.name}" for Cilium: Cilium has no per-rule audit (log and allow)`,
        { hint: 'use allow (Hubble shows the flows), or deny' },
      );
    }
    for (const p of rule.match.protocols ?? []) {
      if (p === 'tcp' || p === 'udp' || p === 'icmp' || p === 132) continue;
      throw new EgressguardError(
        'unsupported',
        `Cannot compile rule "${rule.id}" of Kubernetes class "${cls.name}" for Cilium: protocol ${String(p)} cannot be matched (Cilium's toPorts names TCP, UDP and SCTP, its icmps ICMP)`,
        { hint: 'drop the protocol from the rule, or leave "proto" out to match every protocol' },
      );
    }
  }
}

function portPieces(cls: HostPodClassIR): L4Piece[] {
  const pieces: L4Piece[] = [];
  for (const { protocol, ir } of PORTED) {
    const cuts = new Set<number>([1, 65536]);
    for (const rule of cls.rules) {
      if (rule.match.protocols !== null && !rule.match.protocols.includes(ir)) continue;
      for (const range of rule.match.ports ?? []) {
        cuts.add(range.from);
        cuts.add(range.to + 1);
      }
    }
    const sorted = [...cuts].filter((c) => c >= 1 && c <= 65536).sort((a, b) => a - b);
    for (let i = 0; i + 1 < sorted.length; i++) {
      pieces.push({
        kind: 'ports',
        protocol,
        from: sorted[i] as number,
        to: (sorted[i + 1] as number) - 1,
      });
    }
  }
  return [...pieces, { kind: 'icmp' }, { kind: 'other' }];
}

function irProtocol(piece: L4Piece): Protocol | null {
  if (piece.kind === 'icmp') return 'icmp';
  if (piece.kind === 'other') return null;
  return PORTED.find((p) => p.protocol === piece.protocol)?.ir ?? null;
}

function matchesPiece(rule: RuleIR, family: Family, address: number | bigint, piece: L4Piece) {
  const { destination, protocols, ports } = rule.match;
  if (destination.kind === 'self') return false;
  if (destination.kind === 'addresses' && !destination.set.contains(family, address)) return false;
  if (protocols !== null) {
    const protocol = irProtocol(piece);
    if (protocol === null || !protocols.includes(protocol)) return false;
  }
  if (ports !== null) {
    // Pieces are cut at every port edge: one inside a range lies wholly inside it.
    if (piece.kind !== 'ports') return false;
    if (!ports.some((r) => r.from <= piece.from && piece.from <= r.to)) return false;
  }
  return true;
}

/** The elementary address intervals of one family, cut at every edge of `sets`. */
function addressPieces(
  sets: readonly AddressSet[],
  family: Family,
): [number | bigint, number | bigint][] {
  const max = MAX[family];
  const cuts = new Set<number | bigint>([family === 4 ? 0 : 0n]);
  for (const set of sets) {
    for (const [start, end] of set.intervals(family)) {
      cuts.add(start);
      if (end !== max) cuts.add(family === 4 ? (end as number) + 1 : (end as bigint) + 1n);
    }
  }
  const sorted = [...cuts].sort((a, b) => (a < b ? -1 : a > b ? 1 : 0));
  return sorted.map((start, i) => {
    const next = sorted[i + 1];
    const end =
      next === undefined ? max : family === 4 ? (next as number) - 1 : (next as bigint) - 1n;
    return [start, end];
  });
}

function pieceKey(piece: L4Piece): string {
  return piece.kind === 'ports' ? `${piece.protocol}:${piece.from}-${piece.to}` : piece.kind;
}

/**
 * The class's network policy as groups of destinations with their allowed L4 pieces: what the
 * first-match rules (and, for a tunnel that carries no IPv6 on the gateway node, the kill switch)
 * decide. Throws an `unsupported` error for a rule Cilium cannot express.
 */
export function computePodVerdicts(cls: HostPodClassIR): VerdictGroup[] {
  checkExpressible(cls);
  const l4 = portPieces(cls);
  const sets = cls.rules.flatMap((r) =>
    r.match.destination.kind === 'addresses' ? [r.match.destination.set] : [],
  );
  const killSwitch = cls.killSwitch;
  if (killSwitch !== null) sets.push(killSwitch.except);
  const groups = new Map<
    string,
    {
      addresses: AddressSetBuilder;
      allowed: L4Piece[];
      denied: L4Piece[];
      decidedBy: Set<string>;
    }
  >();
  for (const family of [4, 6] as const) {
    // Without the tunnel carrying this family, the kill switch denies it outside its exceptions.
    const killed = cls.via.kind === 'tunnel' && killSwitch !== null && !carries(cls.via, family);
    for (const [start, end] of addressPieces(sets, family)) {
      const allowed: L4Piece[] = [];
      const denied: L4Piece[] = [];
      const decidedBy = new Set<string>();
      for (const piece of l4) {
        let id: string;
        let action: 'allow' | 'deny';
        if (killed && !killSwitch.except.contains(family, start)) {
          id = killSwitch.id;
          action = 'deny';
        } else {
          const rule = cls.rules.find((r) => matchesPiece(r, family, start, piece));
          id = rule?.id ?? cls.defaultRule.id;
          action =
            rule === undefined ? cls.defaultRule.action : rule.action === 'deny' ? 'deny' : 'allow';
        }
        decidedBy.add(id);
        (action === 'allow' ? allowed : denied).push(piece);
      }
      const key = `${allowed.map(pieceKey).join(',')}|${[...decidedBy].sort().join(',')}`;
      let group = groups.get(key);
      if (group === undefined) {
        group = { addresses: new AddressSetBuilder(), allowed, denied, decidedBy };
        groups.set(key, group);
      }
      if (family === 4) group.addresses.addIpv4(start as number, end as number);
      else group.addresses.addIpv6(start as bigint, end as bigint);
    }
  }
  return [...groups.values()].map((g) => ({
    addresses: g.addresses.build(),
    allowed: g.allowed,
    denied: g.denied,
    decidedBy: [...g.decidedBy].sort(),
  }));
}
