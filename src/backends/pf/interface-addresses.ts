import { parseAddress, type Family, type Prefix } from '../../core/index.js';

/** One address of a host interface, host bits kept (`192.168.64.1/22`). */
export interface PfInterfaceAddress {
  readonly family: Family;
  readonly value: number | bigint;
  readonly length: number;
}

export type PfInterfaces = ReadonlyMap<string, readonly PfInterfaceAddress[]>;

export type PfInterfaceModifier = 'network' | 'broadcast' | 'peer' | '0';

/**
 * The addresses an interface name (or `self`) written WITHOUT parentheses stands for, frozen when
 * pfctl parses the file (MODEL of F93 pfctl_parser.c host_if → ifa_lookup): every IPv4 and IPv6
 * address of the interface, link-local ones included, as a /32 or /128 (`:network`: its
 * network, skipping scoped IPv6 link-local addresses; `:broadcast`: IPv4 only; `:0`: the first
 * address of each family, no aliases). `self` is every interface's (ifa_lookup(NULL)). `:peer`
 * is not modelled: the model's interfaces carry no point-to-point peer, so it stands for nothing.
 */
export function loadTimeAddresses(
  interfaces: PfInterfaces,
  name: string,
  modifier: PfInterfaceModifier | null,
): Prefix[] {
  const owners = name === 'self' ? [...interfaces.values()] : [interfaces.get(name) ?? []];
  return owners.flatMap((own) =>
    select(own, modifier, {
      // ifa_lookup: `(flags & PFI_AFLAG_NETWORK) && p->ifindex > 0` skips scoped addresses.
      skip: (a) => modifier === 'network' && isLinkLocal(a),
    }),
  );
}

/**
 * The addresses a dynamic `(if)` holds at this moment, as the kernel keeps them (MODEL of XNU
 * bsd/net/pf_if.c pfi_instance_add, re-run by pfi_kifaddr_update whenever the interface's
 * addresses change): every address in the interface's order, IPv6 link-local ones included
 * (their embedded scope cleared, pfi_address_add) except for `:network`, `:0` the first of each
 * family, `:network` the networks, `:broadcast` IPv4 only. `(self)` matches nothing on macOS:
 * pfi_dynaddr_setup looks it up as the group kif "ALL" (`pfi_kif_get(IFG_ALL)`), which has no
 * ifnet, and pfi_table_update fills a table only `if (kif->pfik_ifp != NULL)`.
 */
export function liveAddresses(
  interfaces: PfInterfaces,
  name: string,
  modifier: PfInterfaceModifier | null,
): Prefix[] {
  if (name === 'self') return [];
  return select(interfaces.get(name) ?? [], modifier, {
    skip: (a) => modifier === 'network' && isLinkLocal(a),
  });
}

function select(
  addresses: readonly PfInterfaceAddress[],
  modifier: PfInterfaceModifier | null,
  options: { skip: (a: PfInterfaceAddress) => boolean },
): Prefix[] {
  const out: Prefix[] = [];
  const seen = new Set<Family>();
  for (const a of addresses) {
    if (options.skip(a)) continue;
    if (modifier === 'broadcast' && a.family !== 4) continue;
    if (modifier === 'peer') continue;
    if (modifier === '0' && seen.has(a.family)) continue;
    seen.add(a.family);
    if (modifier === 'network') {
      out.push(networkOf(a));
    } else if (modifier === 'broadcast') {
      // Only where the prefix has a broadcast address (shorter than /31).
      if (a.length < 31) {
        const network = networkOf(a);
        out.push({
          family: 4,
          start: (network.start as number) + 2 ** (32 - a.length) - 1,
          length: 32,
          hadHostBits: false,
        });
      }
    } else {
      out.push({
        family: a.family,
        start: a.value,
        length: a.family === 4 ? 32 : 128,
        hadHostBits: false,
      });
    }
  }
  return out;
}

function isLinkLocal(a: PfInterfaceAddress): boolean {
  return a.family === 6 && (a.value as bigint) >> 118n === 0x3fan;
}

function networkOf(a: PfInterfaceAddress): Prefix {
  if (a.family === 4) {
    const size = 2 ** (32 - a.length);
    const start = Math.floor((a.value as number) / size) * size;
    return { family: 4, start, length: a.length, hadHostBits: false };
  }
  const bits = BigInt(128 - a.length);
  return {
    family: 6,
    start: ((a.value as bigint) >> bits) << bits,
    length: a.length,
    hadHostBits: false,
  };
}

/** A prefix cut to `bits` (F93 pfctl_parser.c set_ipmask masks the address bits off too). */
export function maskPrefix(prefix: Prefix, bits: number): Prefix {
  const width = prefix.family === 4 ? 32 : 128;
  const length = Math.min(bits, width);
  if (prefix.family === 4) {
    const size = 2 ** (32 - length);
    return {
      ...prefix,
      start: Math.floor((prefix.start as number) / size) * size,
      length,
      hadHostBits: false,
    };
  }
  const shift = BigInt(128 - length);
  return {
    ...prefix,
    start: ((prefix.start as bigint) >> shift) << shift,
    length,
    hadHostBits: false,
  };
}

/** Interfaces and their addresses as text (`192.168.64.1/22`; no length: a host address). */
export function parseInterfaceAddresses(
  interfaces: Readonly<Record<string, readonly string[]>>,
): Map<string, PfInterfaceAddress[]> {
  const map = new Map<string, PfInterfaceAddress[]>();
  for (const [name, addresses] of Object.entries(interfaces)) {
    const parsed: PfInterfaceAddress[] = [];
    for (const text of addresses) {
      const [address = '', length] = text.split('/');
      const value = parseAddress(address);
      if (value === undefined) continue;
      parsed.push({
        family: value.family,
        value: value.value,
        length: length === undefined ? (value.family === 4 ? 32 : 128) : Number(length),
      });
    }
    map.set(name, parsed);
  }
  return map;
}
