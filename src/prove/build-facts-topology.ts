import { EgressguardError, parsePrefix, type Prefix } from '../core/index.js';
import type { HostFacts } from '../facts/index.js';
import { matchesInterface, type HostIR } from '../ir/index.js';
import type { LabLink, LabNode, LabRoute, Topology } from './lab/topology.js';

/** A lab that stands for the host some facts describe, and what each node of it is for. */
export interface FactsLab {
  readonly topology: Topology;
  /** The node that is the host: its interfaces, addresses and routes are the facts'. */
  readonly host: string;
  /** Host interface → the node on its far side, which sends what arrives on that interface. */
  readonly peers: ReadonlyMap<string, string>;
  /** Host interfaces a class selects; their far sides are workloads. */
  readonly classInterfaces: readonly string[];
  /** Host interfaces of no class whose far side can send (the uplink, LANs; not tunnels). */
  readonly unmanagedInterfaces: readonly string[];
  /** The host's interfaces that are tunnels, by the policy. */
  readonly tunnels: readonly string[];
  /** Default routes the lab adds for families the facts route nowhere (they name no exit). */
  readonly catchAll: readonly string[];
  /** Facts interfaces left out of the lab, with the reason. */
  readonly skipped: readonly string[];
  /**
   * The lab interface a packet arriving on `name` stands for: itself when the lab has it, else
   * one the same class pattern selects (`veth3` → `veth0` when the facts list no `veth*`).
   */
  resolveIngress(name: string): string | undefined;
}

const LOOPBACK = /^lo\d*$/;
const HOST = 'host';
const CATCH_ALL_METRIC = 4_294_967_295;

/**
 * Plans a lab from host facts: a `host` node with the facts' interfaces (named, addressed and
 * routed as in the facts), and behind each interface a node of its role: `internet` behind the
 * uplink, `peer-<tunnel>` behind each tunnel, `wl-<iface>` behind each class interface (a
 * pattern such as `veth*` that matches no interface of the facts gets `veth0`), `lan-<iface>`
 * behind any other. Every link is point-to-point, so any destination is delivered to the far
 * side with no neighbour discovery, and the far sides route everything back: a workload can
 * send any source to any destination. Far sides have no link-local address, so they stay quiet.
 */
export function buildFactsTopology(ir: HostIR, facts: HostFacts): FactsLab {
  const skipped: string[] = [];
  const hostInterfaces = new Map<string, string[]>();
  const patterns = ir.classes.flatMap((c) =>
    c.selector.kind === 'ingress' ? c.selector.interfaces : [],
  );
  const tunnels = ir.tunnels.map((t) => t.name);
  // Interfaces the policy names stay whatever their state: a tunnel is often down when facts
  // are gathered, a workload bridge has no address until its first workload.
  const isNamed = (name: string): boolean =>
    name === ir.uplink || tunnels.includes(name) || patterns.some((p) => matchesInterface(p, name));
  for (const iface of facts.interfaces) {
    if (LOOPBACK.test(iface.name)) {
      skipped.push(`${iface.name}: loopback`);
      continue;
    }
    // Nothing leaves a host by an interface that is down or has no address (a host's idle
    // `ifb` devices, a Docker bridge before its first container): no lab node stands behind it.
    const unusable = !iface.up
      ? 'down'
      : iface.addresses.filter((a) => !isLinkLocal(a)).length === 0
        ? 'no address'
        : undefined;
    if (unusable !== undefined && !isNamed(iface.name)) {
      skipped.push(`${iface.name}: ${unusable}`);
      continue;
    }
    hostInterfaces.set(
      iface.name,
      iface.addresses.map((a) => withLength(a)),
    );
  }
  for (const pattern of patterns) {
    if (![...hostInterfaces.keys()].some((name) => matchesInterface(pattern, name))) {
      hostInterfaces.set(pattern.endsWith('*') ? `${pattern.slice(0, -1)}0` : pattern, []);
    }
  }
  for (const tunnel of tunnels) {
    if (!hostInterfaces.has(tunnel)) hostInterfaces.set(tunnel, []);
  }
  if (!hostInterfaces.has(ir.uplink)) hostInterfaces.set(ir.uplink, []);

  const isClass = (name: string): boolean => patterns.some((p) => matchesInterface(p, name));
  const nodes: Record<string, LabNode> = {};
  const links: LabLink[] = [];
  const peers = new Map<string, string>();
  const hostSysctls: Record<string, number> = {
    // The host must not judge sources itself: a reverse-path filter would drop spoofed
    // packets before our anti-spoofing rule could count them. Effective: max(all, interface).
    'net.ipv4.conf.all.rp_filter': 0,
    'net.ipv4.conf.default.rp_filter': 0,
    'net.ipv4.conf.all.send_redirects': 0,
  };
  for (const [name, addresses] of [...hostInterfaces.entries()].sort(([a], [b]) =>
    a.localeCompare(b),
  )) {
    const role =
      name === ir.uplink
        ? 'internet'
        : tunnels.includes(name)
          ? `peer-${name}`
          : isClass(name)
            ? `wl-${name}`
            : `lan-${name}`;
    const node = nodeName(role);
    const peerIface = tunnels.includes(name) ? name : 'eth0';
    if (nodes[node] !== undefined) {
      throw new EgressguardError(
        'usage',
        `Cannot plan a lab for host "${facts.hostname}": interfaces give two nodes the name "${node}"`,
      );
    }
    nodes[node] = {
      sysctls: {
        [`net/ipv6/conf/${peerIface}/addr_gen_mode`]: 1, // no link-local: no RS, no MLD
        'net.ipv4.ip_nonlocal_bind': 1,
        'net.ipv6.ip_nonlocal_bind': 1,
      },
      routes: [
        { to: '0.0.0.0/0', dev: peerIface },
        { to: '::/0', dev: peerIface },
      ],
    };
    hostSysctls[`net/ipv4/conf/${name}/rp_filter`] = 0;
    links.push({
      a: { node: HOST, iface: name, addresses },
      // No address on the far side: it would join multicast groups and announce itself.
      b: { node, iface: peerIface },
      pointToPoint: true,
    });
    peers.set(name, node);
  }

  const routes = hostRoutes(facts, hostInterfaces);
  // A family the facts route nowhere would die in routing before any filter hook: the lab sends
  // it out of the uplink at the worst metric, so that the filter is what decides.
  const catchAll: LabRoute[] = ['0.0.0.0/0', '::/0']
    .filter((to) => !routes.some((r) => r.to === to))
    .map((to) => ({ to, dev: ir.uplink, metric: CATCH_ALL_METRIC }));
  nodes[HOST] = { forwarding: true, sysctls: hostSysctls, routes: [...routes, ...catchAll] };
  const labInterfaces = [...hostInterfaces.keys()];
  const classInterfaces = labInterfaces.filter(isClass).sort();
  return {
    topology: { nodes, links },
    host: HOST,
    peers,
    classInterfaces,
    unmanagedInterfaces: labInterfaces.filter((n) => !isClass(n) && !tunnels.includes(n)).sort(),
    tunnels,
    catchAll: catchAll.map((r) => `${r.to} dev ${r.dev ?? ''}`),
    skipped,
    resolveIngress(name) {
      if (hostInterfaces.has(name)) return name;
      const pattern = patterns.find((p) => matchesInterface(p, name));
      if (pattern === undefined) return undefined;
      const candidates = classInterfaces.filter((n) => matchesInterface(pattern, n));
      const digit = Number(/(\d+)$/.exec(name)?.[1] ?? 0);
      return candidates[digit % candidates.length];
    },
  };
}

/** The facts' routes the kernel does not add by itself (connected prefixes it does). */
function hostRoutes(facts: HostFacts, interfaces: ReadonlyMap<string, string[]>): LabRoute[] {
  const routes: LabRoute[] = [];
  for (const route of facts.routes) {
    const addresses = interfaces.get(route.interface);
    if (addresses === undefined) continue;
    const metric = route.metric === undefined ? {} : { metric: route.metric };
    const via = route.gateway === undefined ? {} : { via: route.gateway };
    if (route.destination === 'default') {
      const families =
        route.gateway === undefined ? ['0.0.0.0/0', '::/0'] : [familyAny(route.gateway)];
      for (const to of families) routes.push({ to, ...via, dev: route.interface, ...metric });
      continue;
    }
    const prefix = parsePrefix(route.destination);
    if (prefix === undefined || isLinkLocal(route.destination)) continue;
    const connected = addresses.some((a) => samePrefix(parsePrefix(a), prefix));
    if (connected && route.gateway === undefined) continue;
    routes.push({ to: cidr(route.destination, prefix), ...via, dev: route.interface, ...metric });
  }
  return routes;
}

function nodeName(role: string): string {
  return role
    .toLowerCase()
    .replace(/[^a-z0-9-]/g, '-')
    .slice(0, 24);
}

function withLength(address: string): string {
  if (address.includes('/')) return address;
  return `${address}/${address.includes(':') ? 128 : 32}`;
}

function isLinkLocal(address: string): boolean {
  const prefix = parsePrefix(address);
  return (
    prefix !== undefined && prefix.family === 6 && (prefix.start as bigint) >> 118n === 0x3fan // fe80::/10
  );
}

function familyAny(gateway: string): string {
  return gateway.includes(':') ? '::/0' : '0.0.0.0/0';
}

function samePrefix(a: Prefix | undefined, b: Prefix): boolean {
  return a !== undefined && a.family === b.family && a.start === b.start && a.length === b.length;
}

function cidr(text: string, prefix: Prefix): string {
  if (!prefix.hadHostBits) return text.includes('/') ? text : withLength(text);
  throw new EgressguardError('usage', `Cannot plan a lab route to "${text}": it has host bits set`);
}
