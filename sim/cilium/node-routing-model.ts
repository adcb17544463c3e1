import {
  AddressSet,
  type Family,
  type ParsedAddress,
  parseAddress,
  parsePrefix,
} from '../../src/core/index.js';

/**
 * A MODEL of a Linux node's routing, just enough for the egress gateway: devices with addresses,
 * routing tables and policy rules, and the FIB lookup `ip route get DST from SRC` does
 * (ip-rule(8): rules are tried by ascending priority; the first table with a matching route
 * decides; ip-route(8): the longest matching prefix wins in a table). Not the kernel: no metrics,
 * no multipath, no neighbours.
 */

export interface ModelDevice {
  readonly name: string;
  /** Administratively up (IFF_UP). Routes through a down or deleted device are gone. */
  readonly up: boolean;
  /**
   * Carrier (e.g. a tun device whose daemon died has none). The kernel keeps routes through a
   * device without carrier and still uses them unless ignore_routes_with_linkdown is set
   * (Documentation/networking/ip-sysctl.rst); the packet is then lost on that device.
   */
  readonly carrier?: boolean;
  /** Addresses with their prefix length ("10.8.0.2/24") or bare, in configuration order. */
  readonly addresses: readonly string[];
}

export type ModelRouteType = 'unicast' | 'blackhole' | 'unreachable' | 'prohibit';

export interface ModelRoute {
  /** A prefix: "0.0.0.0/0" and "::/0" are the defaults. */
  readonly to: string;
  /** Required for unicast routes. */
  readonly dev?: string;
  readonly type?: ModelRouteType;
}

export interface ModelRule {
  readonly priority: number;
  /** A source prefix; absent means "from all". */
  readonly from?: string;
  readonly table: string;
}

export interface ModelNodeNetwork {
  readonly devices: readonly ModelDevice[];
  /** Tables by name; "main" is the one `ip route` shows. */
  readonly tables: Readonly<Record<string, readonly ModelRoute[]>>;
  /** Policy rules besides the default "from all lookup main" at priority 32766. */
  readonly rules?: readonly ModelRule[];
}

export type RouteLookup =
  | { readonly kind: 'route'; readonly table: string; readonly to: string; readonly dev: string }
  | {
      readonly kind: 'blackhole' | 'unreachable' | 'prohibit';
      readonly table: string;
      readonly to: string;
    }
  | { readonly kind: 'none' };

const MAIN_RULE: ModelRule = { priority: 32766, table: 'main' };

function contains(prefixText: string, address: ParsedAddress): boolean {
  const prefix = parsePrefix(prefixText);
  if (prefix === undefined)
    throw new Error(`Model route or rule has a malformed prefix "${prefixText}"`);
  return AddressSet.fromPrefixes([prefix]).contains(address.family, address.value);
}

function prefixLength(prefixText: string): number {
  return parsePrefix(prefixText)?.length ?? -1;
}

/** The device a unicast route can use now: present and administratively up. */
function usableDevice(
  network: ModelNodeNetwork,
  name: string | undefined,
): ModelDevice | undefined {
  const device = network.devices.find((d) => d.name === name);
  return device?.up === true ? device : undefined;
}

/** `ip route get DST [from SRC]` on the model. */
export function lookupRoute(
  network: ModelNodeNetwork,
  query: { readonly to: string; readonly from?: string },
): RouteLookup {
  const dst = parseAddress(query.to);
  if (dst === undefined)
    throw new Error(`Cannot look up a route to malformed address "${query.to}"`);
  const src = query.from === undefined ? undefined : parseAddress(query.from);
  const rules = [...(network.rules ?? []), MAIN_RULE].sort((a, b) => a.priority - b.priority);
  for (const rule of rules) {
    if (rule.from !== undefined) {
      const from = parsePrefix(rule.from);
      // A rule of the other family, or a "from" rule when the lookup has no source, is skipped.
      if (src === undefined || from?.family !== src.family || !contains(rule.from, src)) continue;
    }
    let best: ModelRoute | undefined;
    for (const route of network.tables[rule.table] ?? []) {
      const prefix = parsePrefix(route.to);
      if (prefix?.family !== dst.family || !contains(route.to, dst)) continue;
      const type = route.type ?? 'unicast';
      if (type === 'unicast' && usableDevice(network, route.dev) === undefined) continue;
      if (best === undefined || prefixLength(route.to) > prefixLength(best.to)) best = route;
    }
    if (best === undefined) continue;
    const type = best.type ?? 'unicast';
    if (type === 'unicast') {
      return { kind: 'route', table: rule.table, to: best.to, dev: best.dev as string };
    }
    return { kind: type, table: rule.table, to: best.to };
  }
  return { kind: 'none' };
}

function addressOnly(text: string): string {
  return text.split('/')[0] as string;
}

/** The first configured address of a family on a device (link-local IPv6 skipped). */
export function firstAddress(
  network: ModelNodeNetwork,
  deviceName: string,
  family: Family,
): string | undefined {
  const device = network.devices.find((d) => d.name === deviceName);
  for (const text of device?.addresses ?? []) {
    const address = parseAddress(addressOnly(text));
    if (address?.family !== family) continue;
    if (family === 6 && (address.value as bigint) >> 118n === 0x3fan) continue; // fe80::/10
    return addressOnly(text);
  }
  return undefined;
}

/** The device carrying an address, if any. */
export function deviceWithAddress(
  network: ModelNodeNetwork,
  address: string,
): ModelDevice | undefined {
  const wanted = parseAddress(address);
  if (wanted === undefined) return undefined;
  return network.devices.find((d) =>
    d.addresses.some((text) => {
      const a = parseAddress(addressOnly(text));
      return a?.family === wanted.family && a.value === wanted.value;
    }),
  );
}

/** Every address configured on the node's devices. */
export function nodeAddresses(network: ModelNodeNetwork): string[] {
  return network.devices.flatMap((d) => d.addresses.map(addressOnly));
}
