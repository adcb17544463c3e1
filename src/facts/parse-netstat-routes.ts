/** One IPv4 route as macOS `netstat -rn -f inet` lists it. */
export interface NetstatRoute {
  /** `default` or `a.b.c.d/len`. */
  readonly destination: string;
  /** A next-hop address; null for `link#N` and link-layer addresses. */
  readonly gateway: string | null;
  readonly flags: string;
  readonly interface: string;
}

/**
 * Parses the `Internet:` table of macOS `netstat -rn` (netstat(1) `-r`): columns Destination,
 * Gateway, Flags, Netif, Expire. Network numbers are printed short, with the omitted octets zero
 * and the length implied by the octets given (`127` is 127.0.0.0/8, `198.51.100` a /24) unless a
 * `/len` follows; four octets without one are a host.
 */
export function parseNetstatRoutes(text: string): NetstatRoute[] {
  const out: NetstatRoute[] = [];
  let inTable = false;
  for (const line of text.split('\n')) {
    if (/^Internet6?:/.test(line)) {
      inTable = line.startsWith('Internet:');
      continue;
    }
    if (!inTable || line.trim() === '' || line.startsWith('Destination')) continue;
    const [destination, gateway, flags, netif] = line.trim().split(/\s+/);
    if (destination === undefined || gateway === undefined || netif === undefined) continue;
    out.push({
      destination: destination === 'default' ? 'default' : expandNetwork(destination),
      gateway: /^\d+\.\d+\.\d+\.\d+$/.test(gateway) ? gateway : null,
      flags: flags ?? '',
      interface: netif,
    });
  }
  return out;
}

/** The primary default route as `route -n get default` (route(8)) shows it, if there is one. */
export function parseRouteGet(text: string): { gateway: string | null; interface: string } | null {
  const field = (name: string): string | undefined =>
    new RegExp(`^\\s*${name}: (\\S+)\\s*$`, 'm').exec(text)?.[1];
  const netif = field('interface');
  if (netif === undefined) return null;
  const gateway = field('gateway');
  return {
    gateway: gateway !== undefined && /^\d+\.\d+\.\d+\.\d+$/.test(gateway) ? gateway : null,
    interface: netif,
  };
}

function expandNetwork(text: string): string {
  const [network = '', length] = text.split('/');
  const octets = network.split('.');
  const padded = [...octets, '0', '0', '0'].slice(0, 4).join('.');
  return `${padded}/${length ?? String(Math.min(octets.length, 4) * 8)}`;
}
