import { AddressSet, type Prefix } from '../core/index.js';
import { carries, type HostIR } from './nodes.js';

/** An address of the host, with the interface it is on and the length of its prefix. */
export interface SourceCandidate {
  readonly interface: string;
  /** The address itself (a /128). */
  readonly address: Prefix;
  /** The length of the prefix it was configured with (2001:db8:10::1/64: 64). */
  readonly prefixLength: number;
}

const LINK_LOCAL = AddressSet.parse(['fe80::/10']);
const LOOPBACK = AddressSet.parse(['::1/128']);
// RFC 6724 §2.1, the default policy table's labels (Linux: net/ipv6/addrlabel.c).
const LABELS: readonly {
  readonly set: AddressSet;
  readonly length: number;
  readonly label: number;
}[] = [
  ['::1/128', 0],
  ['::ffff:0:0/96', 4],
  ['::/96', 3],
  ['2001::/32', 5],
  ['2002::/16', 2],
  ['3ffe::/16', 12],
  ['fec0::/10', 11],
  ['fc00::/7', 13],
].map(([cidr, label]) => ({
  set: AddressSet.parse([cidr as string]),
  length: Number((cidr as string).split('/')[1]),
  label: label as number,
}));

function labelOf(address: bigint): number {
  let best: { length: number; label: number } = { length: -1, label: 1 }; // ::/0
  for (const entry of LABELS) {
    if (entry.length > best.length && entry.set.contains(6, address)) best = entry;
  }
  return best.label;
}

function commonPrefixLength(a: bigint, b: bigint): number {
  let diff = a ^ b;
  let length = 128;
  while (diff !== 0n) {
    diff >>= 1n;
    length--;
  }
  return length;
}

/**
 * The source address the kernel's IPv6 masquerade gives a packet leaving by `via` for a global
 * `destination` (nf_nat_masquerade_ipv6 → ipv6_dev_get_saddr, RFC 6724 §5). Every unicast
 * address of the host is a candidate, not only those on `via`: the kernel keeps to `via` only for
 * a link-local or multicast destination, or with use_oif_addrs_only (off by default). Ranked by an
 * appropriate scope (a global address, then a link-local one, then loopback: rule 2), one on
 * `via` (rule 5), a label matching the destination's (rule 6), then the longest prefix in common
 * with it, counted at most to the address's own prefix length (rule 8); on a tie the first in
 * interface order. Measured in a lab: a tunnel with no IPv6 address of its own sends the class's
 * IPv6 with another interface's global address, or with none on the host, with its own link-local
 * one. Rules 3, 4 and 7 (deprecated, home and temporary addresses) need what facts do not record.
 * Undefined: no IPv6 address at all, and the masquerade drops the packet (NF_DROP).
 */
export function masqueradeSourceV6(
  candidates: readonly SourceCandidate[],
  via: string,
  destination: bigint,
): SourceCandidate | undefined {
  const label = labelOf(destination);
  let best: { candidate: SourceCandidate; score: readonly number[] } | undefined;
  for (const candidate of candidates) {
    if (candidate.address.family !== 6) continue;
    const address = candidate.address.start as bigint;
    const score = [
      scopeRank(address),
      candidate.interface === via ? 1 : 0,
      labelOf(address) === label ? 1 : 0,
      Math.min(commonPrefixLength(address, destination), candidate.prefixLength),
    ];
    if (best === undefined || isBetter(score, best.score)) best = { candidate, score };
  }
  return best?.candidate;
}

/** Whether a source of this scope can be answered from beyond the link (a global address). */
export function isGlobalV6(address: bigint): boolean {
  return scopeRank(address) === 2;
}

/** For a global destination: a global scope is enough (2); link-local (1) beats loopback (0). */
function scopeRank(address: bigint): number {
  if (LOOPBACK.contains(6, address)) return 0;
  return LINK_LOCAL.contains(6, address) ? 1 : 2;
}

function isBetter(score: readonly number[], than: readonly number[]): boolean {
  for (let i = 0; i < score.length; i++) {
    if ((score[i] ?? 0) !== (than[i] ?? 0)) return (score[i] ?? 0) > (than[i] ?? 0);
  }
  return false;
}

/** A class that masquerades its IPv6 out of a tunnel with no global IPv6 address of its own. */
export interface MasqueradeWithoutAddress {
  readonly class: string;
  readonly tunnel: string;
  /** What the kernel picks from instead: the host's other global addresses, else link-local ones. */
  readonly fallbacks: readonly SourceCandidate[];
}

/**
 * The tunnel classes whose IPv6 the kernel would masquerade to an address the tunnel's far end did
 * not assign (masqueradeSourceV6): the class has IPv6 sources and NAT, its tunnel is present and
 * carries IPv6, and has no global IPv6 address. Their IPv6 leaves, but no reply comes back.
 */
export function findMasqueradeWithoutAddress(
  ir: Pick<HostIR, 'classes'>,
  candidates: readonly SourceCandidate[],
): MasqueradeWithoutAddress[] {
  return ir.classes.flatMap((c) => {
    const via = c.via;
    if (c.nat === null || via.kind !== 'tunnel' || !via.present || !carries(via, 6)) return [];
    if (!c.selector.sources.has(6)) return [];
    const v6 = candidates.filter(
      (s) => s.address.family === 6 && scopeRank(s.address.start as bigint) > 0,
    );
    if (v6.some((s) => s.interface === via.interface && isGlobalV6(s.address.start as bigint))) {
      return [];
    }
    const global = v6.filter((s) => isGlobalV6(s.address.start as bigint));
    return [{ class: c.name, tunnel: via.interface, fallbacks: global.length > 0 ? global : v6 }];
  });
}
