import type { HostFacts } from './host-facts.js';
import { matchesTunnel, type TunnelMatch } from './match-tunnel.js';

/**
 * Reviewed facts with the tunnels found by `match` as the live host has them now: every
 * interface the reviewed file holds that matches a tunnel, or wears a declared tunnel's name,
 * is dropped, and every live one that does is taken instead. A utun is renumbered on every
 * reconnect (utun3 today, utun5 after a sleep), which a file reviewed once cannot follow; the
 * uplink, the bridges, the routes and the rest stay as reviewed. A live interface that is neither
 * (another VPN now wearing the old number) is left out, as the file left it out.
 */
export function refreshTunnels(
  reviewed: HostFacts,
  live: HostFacts['interfaces'],
  matches: Readonly<Record<string, TunnelMatch>>,
): HostFacts {
  const entries = Object.entries(matches);
  if (entries.length === 0) return reviewed;
  const isTunnel = (i: HostFacts['interfaces'][number]): boolean =>
    Object.hasOwn(matches, i.name) || entries.some(([, match]) => matchesTunnel(match, i));
  const fresh = live.filter(isTunnel);
  const kept = reviewed.interfaces.filter(
    (i) => !isTunnel(i) && !fresh.some((f) => f.name === i.name),
  );
  return { ...reviewed, interfaces: [...kept, ...fresh] };
}
