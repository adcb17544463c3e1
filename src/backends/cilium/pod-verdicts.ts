import { AddressSet, AddressSetBuilder, EgressguardError, type Family } from '../../core/index.js';
import {
  carries,
  type ClusterIR,
  type ClusterPartName,
  type HostPodClassIR,
  type RuleIR,
} from '../../ir/index.js';
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

/** What the class's rules decide for one part of the cluster, which Cilium names by identity. */
export interface IdentityVerdict {
  /** `pods`: every pod of the cluster (toEndpoints); `nodes`: the host and remote-node entities. */
  readonly part: 'pods' | 'nodes';
  readonly families: readonly Family[];
  readonly allowed: readonly L4Piece[];
  readonly denied: readonly L4Piece[];
  readonly decidedBy: readonly string[];
}

export interface PodVerdicts {
  /** Destinations by address (toCIDRSet): what Cilium cannot map to an identity. */
  readonly cidrGroups: readonly VerdictGroup[];
  /** In-cluster destinations by identity; empty when the facts name no cluster. */
  readonly identities: readonly IdentityVerdict[];
}

interface PieceVerdict {
  readonly allowed: L4Piece[];
  readonly denied: L4Piece[];
  readonly decidedBy: Set<string>;
}

const PART_WORDS: Readonly<Record<ClusterPartName, string>> = {
  pods: 'pod addresses',
  services: 'service addresses',
  nodes: 'node addresses',
};

/**
 * The class's network policy: groups of destinations with their allowed L4 pieces, as the
 * first-match rules (and, for a tunnel that carries no IPv6 on the gateway node, the kill switch)
 * decide; and, when the facts name the cluster, the verdict on its pods and nodes, which Cilium
 * matches by identity. In-cluster destinations are never steered, so the kill switch never
 * decides them. Throws an `unsupported` error for a rule Cilium cannot express, and when the
 * rules judge part of the pods (or of the nodes) differently from the rest, or the services
 * differently from the pods behind them.
 */
export function computePodVerdicts(cls: HostPodClassIR, cluster: ClusterIR | null): PodVerdicts {
  checkExpressible(cls);
  const l4 = portPieces(cls);
  const sets = cls.rules.flatMap((r) =>
    r.match.destination.kind === 'addresses' ? [r.match.destination.set] : [],
  );
  const killSwitch = cls.killSwitch;
  if (killSwitch !== null) sets.push(killSwitch.except);
  const inCluster =
    cluster === null ? AddressSet.EMPTY : cluster.pods.union(cluster.services).union(cluster.nodes);
  if (cluster !== null) sets.push(cluster.pods, cluster.services, cluster.nodes);
  const verdictAt = (family: Family, start: number | bigint): PieceVerdict => {
    // Without the tunnel carrying this family, the kill switch denies it outside its exceptions.
    const killed =
      cls.via.kind === 'tunnel' &&
      killSwitch !== null &&
      !carries(cls.via, family) &&
      !killSwitch.except.contains(family, start) &&
      !inCluster.contains(family, start);
    const allowed: L4Piece[] = [];
    const denied: L4Piece[] = [];
    const decidedBy = new Set<string>();
    for (const piece of l4) {
      let id: string;
      let action: 'allow' | 'deny';
      if (killed) {
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
    return { allowed, denied, decidedBy };
  };
  const groups = new Map<
    string,
    {
      addresses: AddressSetBuilder;
      allowed: L4Piece[];
      denied: L4Piece[];
      decidedBy: Set<string>;
    }
  >();
  // Per part of the cluster: its verdicts (by allowed pieces), the pieces of each, their families.
  const parts = new Map<ClusterPartName, Map<string, PartPieces>>();
  for (const family of [4, 6] as const) {
    for (const [start, end] of addressPieces(sets, family)) {
      const verdict = verdictAt(family, start);
      const { allowed, denied, decidedBy } = verdict;
      const key = `${allowed.map(pieceKey).join(',')}|${[...decidedBy].sort().join(',')}`;
      let group = groups.get(key);
      if (group === undefined) {
        group = { addresses: new AddressSetBuilder(), allowed, denied, decidedBy };
        groups.set(key, group);
      }
      if (family === 4) group.addresses.addIpv4(start as number, end as number);
      else group.addresses.addIpv6(start as bigint, end as bigint);
      if (cluster === null) continue;
      for (const part of ['pods', 'services', 'nodes'] as const) {
        if (!cluster[part].contains(family, start)) continue;
        const byVerdict = parts.get(part) ?? new Map<string, PartPieces>();
        parts.set(part, byVerdict);
        const verdictKey = allowed.map(pieceKey).join(',');
        const entry = byVerdict.get(verdictKey) ?? {
          verdict,
          addresses: new AddressSetBuilder(),
          families: new Set<Family>(),
          decidedBy: new Set<string>(),
        };
        byVerdict.set(verdictKey, entry);
        entry.families.add(family);
        for (const id of decidedBy) entry.decidedBy.add(id);
        if (family === 4) entry.addresses.addIpv4(start as number, end as number);
        else entry.addresses.addIpv6(start as bigint, end as bigint);
      }
    }
  }
  const cidrGroups = [...groups.values()].map((g) => ({
    addresses: g.addresses.build(),
    allowed: g.allowed,
    denied: g.denied,
    decidedBy: [...g.decidedBy].sort(),
  }));
  return { cidrGroups, identities: identityVerdicts(cls, parts) };
}

interface PartPieces {
  readonly verdict: PieceVerdict;
  readonly addresses: AddressSetBuilder;
  readonly families: Set<Family>;
  readonly decidedBy: Set<string>;
}

/** One verdict per part, or the error that says which rules split a part. */
function identityVerdicts(
  cls: HostPodClassIR,
  parts: ReadonlyMap<ClusterPartName, ReadonlyMap<string, PartPieces>>,
): IdentityVerdict[] {
  const one = (part: ClusterPartName): PartPieces | undefined => {
    const byVerdict = [...(parts.get(part)?.values() ?? [])];
    if (byVerdict.length <= 1) return byVerdict[0];
    const described = byVerdict
      .map(
        (p) =>
          `${p.addresses.build().describe(2)} by ${[...p.decidedBy]
            .sort()
            .map((id) => `"${id}"`)
            .join(', ')}`,
      )
      .join('; ');
    throw new EgressguardError(
      'unsupported',
      `Cannot compile Kubernetes class "${cls.name}" for Cilium: its rules judge the cluster's ${PART_WORDS[part]} in parts (${described}), and Cilium matches ${part === 'nodes' ? 'nodes as the host and remote-node entities' : 'pods by identity'}, never by address`,
      {
        hint: `let each rule name all of the cluster's ${PART_WORDS[part]} or none of them (the facts' "cluster" says where they are), or leave those destinations to the cluster's own network policies`,
      },
    );
  };
  const pods = one('pods');
  const services = one('services');
  const nodes = one('nodes');
  if (pods !== undefined && services !== undefined) {
    const key = (p: PartPieces): string => p.verdict.allowed.map(pieceKey).join(',');
    if (key(pods) !== key(services)) {
      throw new EgressguardError(
        'unsupported',
        `Cannot compile Kubernetes class "${cls.name}" for Cilium: its rules judge the service addresses (by ${[
          ...services.decidedBy,
        ]
          .sort()
          .map((id) => `"${id}"`)
          .join(', ')}) differently from the pods (by ${[...pods.decidedBy]
          .sort()
          .map((id) => `"${id}"`)
          .join(
            ', ',
          )}), and Cilium translates a ClusterIP to a pod behind it before policy and judges that pod`,
        {
          hint: 'give the service CIDR and the pod CIDR the same rules (one network with both, like k3s-vpn-egress\'s "cluster")',
        },
      );
    }
  }
  const out: IdentityVerdict[] = [];
  for (const [part, pieces] of [
    ['pods', pods],
    ['nodes', nodes],
  ] as const) {
    if (pieces === undefined) continue;
    const decidedBy = new Set(pieces.decidedBy);
    if (part === 'pods') for (const id of services?.decidedBy ?? []) decidedBy.add(id);
    out.push({
      part,
      families: [...pieces.families].sort(),
      allowed: pieces.verdict.allowed,
      denied: pieces.verdict.denied,
      decidedBy: [...decidedBy].sort(),
    });
  }
  return out;
}
