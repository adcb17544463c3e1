import type { HostFacts } from './host-facts.js';

/**
 * The facts a resident binds while a declared tunnel is deleted: the tunnel as last seen, down.
 * A deleted link has no addresses and no IPv6 setting to read, and binding without them would
 * change what is enforced while the tunnel is gone (the gateway node's routing for the tunnel's
 * address dropped, with its blackhole; an IPv4-only tunnel assumed to carry IPv6), only to change
 * it back when the tunnel returns: a re-apply on each side of every outage, the first one on the
 * kill switch's path. A tunnel that comes back with other addresses is bound as it is then.
 */
export function keepAbsentTunnels(
  fresh: HostFacts,
  previous: HostFacts | undefined,
  tunnels: readonly string[],
): HostFacts {
  if (previous === undefined) return fresh;
  const kept = tunnels.flatMap((name) => {
    if (fresh.interfaces.some((i) => i.name === name)) return [];
    const last = previous.interfaces.find((i) => i.name === name);
    return last === undefined ? [] : [{ ...last, up: false }];
  });
  return kept.length === 0 ? fresh : { ...fresh, interfaces: [...fresh.interfaces, ...kept] };
}
