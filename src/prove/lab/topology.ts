import { EgressguardError, parseAddress, parsePrefix, type Family } from '../../core/index.js';

/** A lab's shape as plain data: network namespaces (nodes) joined by veth pairs (links). */
export interface Topology {
  readonly nodes: Readonly<Record<string, LabNode>>;
  readonly links: readonly LabLink[];
}

/** One network namespace of a lab. */
export interface LabNode {
  /** Route between interfaces: net.ipv4.ip_forward=1 and net.ipv6.conf.all.forwarding=1. */
  readonly forwarding?: boolean;
  /**
   * Any other sysctls (e.g. `net.ipv4.ip_nonlocal_bind: 1`), set once the links exist, so
   * per-interface keys work, and before addresses are added. DAD is always off in a lab.
   */
  readonly sysctls?: Readonly<Record<string, string | number>>;
  readonly routes?: readonly LabRoute[];
}

/** One side of a link: the interface in that node and its addresses (`10.0.0.1/24`, v4 or v6). */
export interface LinkEnd {
  readonly node: string;
  readonly iface: string;
  readonly addresses?: readonly string[];
}

/** A veth pair. A tunnel in a lab is a veth pair named like one (`tun0`) into a peer node. */
export interface LabLink {
  readonly a: LinkEnd;
  readonly b: LinkEnd;
  readonly mtu?: number;
  /**
   * Behave like an L3 point-to-point link (a tunnel): both ends get the same MAC address and ARP
   * off, so a route `dev X` without a gateway delivers any destination to the peer, with no
   * neighbour discovery, for IPv4 and IPv6 alike. A NOARP device's neighbours take the device's
   * own address (net/ipv4/arp.c arp_constructor, net/ipv6/ndisc.c ndisc_constructor), and the
   * peer accepts a frame to its own address as PACKET_HOST.
   */
  readonly pointToPoint?: boolean;
}

/** A route of a node, in its main table unless `table` is given. */
export interface LabRoute {
  /** A prefix, or `default` (its family then comes from `via`; else write 0.0.0.0/0 or ::/0). */
  readonly to: string;
  readonly via?: string;
  readonly dev?: string;
  readonly type?: 'unicast' | 'blackhole' | 'unreachable';
  readonly metric?: number;
  readonly table?: number;
}

/** A link end named by its node and current interface name. */
export interface LinkRef {
  readonly node: string;
  readonly iface: string;
}

const NODE_NAME = /^[a-z][a-z0-9-]{0,23}$/;
// IFNAMSIZ is 16 with the NUL; no leading '-' (it would read as an option of ip).
const IFACE_NAME = /^[A-Za-z0-9_][A-Za-z0-9_.-]{0,14}$/;
const SYSCTL_KEY = /^[a-z0-9_][A-Za-z0-9_./-]*$/;
const SYSCTL_VALUE = /^[A-Za-z0-9_.:-]+$/;
const MAX_TABLE = 2 ** 31 - 1;

/** The address family a route is for, or undefined when it cannot be told. */
export function routeFamily(route: LabRoute): Family | undefined {
  if (route.to !== 'default') return parsePrefix(route.to)?.family;
  return route.via === undefined ? undefined : parseAddress(route.via)?.family;
}

/** Checks a topology and throws one error listing every problem in it. */
export function validateTopology(topology: Topology): void {
  const problems: string[] = [];
  const nodes = Object.keys(topology.nodes);
  if (nodes.length === 0) problems.push('nodes: a lab needs at least one node');
  for (const node of nodes) {
    if (!NODE_NAME.test(node)) {
      problems.push(`nodes.${node}: name must match ${NODE_NAME.source}`);
    }
  }

  const ifaces = new Map<string, Set<string>>(nodes.map((n) => [n, new Set<string>()]));
  topology.links.forEach((link, i) => {
    for (const side of ['a', 'b'] as const) {
      const end = link[side];
      const where = `links[${i}].${side}`;
      const names = ifaces.get(end.node);
      if (names === undefined) {
        problems.push(`${where}.node "${end.node}" is not a node of this topology`);
      } else if (!IFACE_NAME.test(end.iface) || end.iface === 'lo') {
        problems.push(`${where}.iface "${end.iface}" must match ${IFACE_NAME.source} (not lo)`);
      } else if (names.has(end.iface)) {
        problems.push(`${where}.iface "${end.iface}" is used twice in node "${end.node}"`);
      } else {
        names.add(end.iface);
      }
      (end.addresses ?? []).forEach((address, j) => {
        if (parsePrefix(address) === undefined || !address.includes('/')) {
          problems.push(`${where}.addresses[${j}] "${address}" must be an address with a length`);
        }
      });
    }
    if (link.mtu !== undefined && !isIntegerIn(link.mtu, 68, 65535)) {
      problems.push(`links[${i}].mtu ${link.mtu} must be an integer from 68 to 65535`);
    }
  });

  for (const [node, spec] of Object.entries(topology.nodes)) {
    for (const [key, value] of Object.entries(spec.sysctls ?? {})) {
      if (!SYSCTL_KEY.test(key) || !SYSCTL_VALUE.test(String(value))) {
        problems.push(`nodes.${node}.sysctls: "${key}" = "${value}" is not a valid sysctl`);
      }
    }
    (spec.routes ?? []).forEach((route, i) => {
      problems.push(
        ...checkRoute(route, ifaces.get(node) ?? new Set()).map(
          (p) => `nodes.${node}.routes[${i}]: ${p}`,
        ),
      );
    });
  }

  if (problems.length > 0) {
    throw new EgressguardError(
      'usage',
      `Cannot build lab: ${problems.length} problem${problems.length === 1 ? '' : 's'} in the topology: ${problems.join('; ')}`,
      { hint: 'fix the topology passed to createLab' },
    );
  }
}

function checkRoute(route: LabRoute, ifaces: ReadonlySet<string>): string[] {
  const problems: string[] = [];
  const to = route.to === 'default' ? undefined : parsePrefix(route.to);
  if (route.to !== 'default' && to === undefined) {
    problems.push(`to "${route.to}" must be a prefix or "default"`);
  } else if (to?.hadHostBits === true) {
    problems.push(`to "${route.to}" has host bits set`);
  }
  const via = route.via === undefined ? undefined : parseAddress(route.via);
  if (route.via !== undefined && via === undefined) {
    problems.push(`via "${route.via}" must be an address`);
  }
  if (to !== undefined && via !== undefined && to.family !== via.family) {
    problems.push(`to "${route.to}" and via "${route.via}" are of different families`);
  }
  if (routeFamily(route) === undefined && problems.length === 0) {
    problems.push('a default route without via needs its family: write 0.0.0.0/0 or ::/0');
  }
  if (route.dev !== undefined && !ifaces.has(route.dev)) {
    problems.push(`dev "${route.dev}" is not an interface of this node`);
  }
  const type = route.type ?? 'unicast';
  if (type === 'unicast' && route.via === undefined && route.dev === undefined) {
    problems.push('a unicast route needs via or dev');
  }
  if (type !== 'unicast' && (route.via !== undefined || route.dev !== undefined)) {
    problems.push(`a ${type} route takes neither via nor dev`);
  }
  if (route.metric !== undefined && !isIntegerIn(route.metric, 0, 2 ** 32 - 1)) {
    problems.push(`metric ${route.metric} must be a non-negative integer`);
  }
  if (route.table !== undefined && !isIntegerIn(route.table, 1, MAX_TABLE)) {
    problems.push(`table ${route.table} must be an integer from 1 to ${MAX_TABLE}`);
  }
  return problems;
}

function isIntegerIn(value: number, low: number, high: number): boolean {
  return Number.isInteger(value) && value >= low && value <= high;
}
