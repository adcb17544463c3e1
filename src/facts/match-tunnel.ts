import { parseAddress } from '../core/index.js';
import type { HostFacts } from './host-facts.js';

/** How a tunnel declared with `match` is found: its own address, or its point-to-point peer. */
export interface TunnelMatch {
  readonly address: string | null;
  readonly peer: string | null;
}

/** Whether an interface is the tunnel `match` describes (one of its addresses, or its peer). */
export function matchesTunnel(
  match: TunnelMatch,
  iface: Pick<HostFacts['interfaces'][number], 'addresses' | 'peer'>,
): boolean {
  return (
    (match.address !== null &&
      iface.addresses.some((a) => sameAddress(a.split('/')[0] ?? '', match.address as string))) ||
    (match.peer !== null && iface.peer !== undefined && sameAddress(iface.peer, match.peer))
  );
}

/** The match in words: `address 10.8.0.2 or peer 10.8.0.1`. */
export function describeTunnelMatch(match: TunnelMatch): string {
  return [
    match.address === null ? null : `address ${match.address}`,
    match.peer === null ? null : `peer ${match.peer}`,
  ]
    .filter((p) => p !== null)
    .join(' or ');
}

function sameAddress(a: string, b: string): boolean {
  const x = parseAddress(a);
  const y = parseAddress(b);
  return x !== undefined && y !== undefined && x.family === y.family && x.value === y.value;
}
