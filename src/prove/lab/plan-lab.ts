import { createHash } from 'node:crypto';
import { parsePrefix } from '../../core/index.js';
import type { LabLink, LabRoute, LinkEnd, Topology } from './topology.js';

/** The commands that build a lab, phase by phase; pure, so it can be read and tested alone. */
export interface LabPlan {
  /** Node → namespace name. */
  readonly namespaces: ReadonlyMap<string, string>;
  /** `key=value` sysctls for every node before any link exists, so new interfaces inherit them. */
  readonly earlySysctls: readonly string[];
  /** One `ip -n A link add … netns B` argv per link, run in the machine's own namespace. */
  readonly veths: readonly (readonly string[])[];
  /** Node → `key=value` sysctls, set once its links exist. */
  readonly sysctls: ReadonlyMap<string, readonly string[]>;
  /** Node → `ip -batch` lines: MTUs, addresses, links up. */
  readonly interfaces: ReadonlyMap<string, readonly string[]>;
  /** Node → `ip -batch` lines: routes, once every link of the lab is up. */
  readonly routes: ReadonlyMap<string, readonly string[]>;
}

// A lab's IPv6 addresses must work at once: with DAD on they stay tentative for about a second
// and cannot be bound or used as a source. DAD is skipped only when both `all` and the
// interface's own accept_dad are below 1 (net/ipv6/addrconf.c, addrconf_dad_begin).
// The ephemeral ports are pinned to the kernel's default, above the source ports of crafted
// packets (scripts/lab/sender.py, RAW_SOURCE_PORTS), so a probe's socket never shares a flow with
// a crafted one.
const EARLY_SYSCTLS = [
  'net.ipv6.conf.all.accept_dad=0',
  'net.ipv6.conf.default.accept_dad=0',
  'net.ipv4.ip_local_port_range=32768 60999',
];

/** Plans the commands for a validated topology whose nodes are given their namespace names. */
export function planLab(topology: Topology, namespaces: ReadonlyMap<string, string>): LabPlan {
  const nsOf = (node: string): string => namespaces.get(node) ?? node;
  const nodes = Object.keys(topology.nodes);
  const interfaces = new Map(nodes.map((node) => [node, ['link set dev lo up']]));
  for (const link of topology.links) {
    for (const end of [link.a, link.b])
      interfaces.get(end.node)?.push(...interfaceLines(end, link));
  }
  return {
    namespaces,
    earlySysctls: EARLY_SYSCTLS,
    veths: topology.links.map((link, i) =>
      vethArgv(link, { nsOf, ifindex: FIRST_IFINDEX + 2 * i }),
    ),
    sysctls: new Map(
      Object.entries(topology.nodes).map(([node, spec]) => [
        node,
        [
          ...(spec.forwarding === true
            ? ['net.ipv4.ip_forward=1', 'net.ipv6.conf.all.forwarding=1']
            : []),
          ...Object.entries(spec.sysctls ?? {}).map(([k, v]) => `${k}=${v}`),
        ],
      ]),
    ),
    interfaces,
    routes: new Map(
      Object.entries(topology.nodes).map(([node, spec]) => [
        node,
        (spec.routes ?? []).map((r) => routeLine(r)),
      ]),
    ),
  };
}

/**
 * The argv that creates a link's veth pair straight inside its two namespaces, each end with its
 * own ifindex. Left to the kernel, both ends of a lab's first veth get ifindex 2 in their fresh
 * namespaces; linkwatch then takes the carrier change for a non-urgent one (ifindex equal to
 * iflink, net/core/link_watch.c, linkwatch_urgent_event) and applies it up to a second later, and
 * until then IPv6 has not joined the solicited-node groups and answers no neighbour solicitation.
 */
export function vethArgv(
  link: LabLink,
  options: { readonly nsOf: (node: string) => string; readonly ifindex: number },
): string[] {
  const { nsOf, ifindex } = options;
  return [
    'ip',
    '-n',
    nsOf(link.a.node),
    'link',
    'add',
    link.a.iface,
    'index',
    String(ifindex),
    'type',
    'veth',
    'peer',
    'name',
    link.b.iface,
    'index',
    String(ifindex + 1),
    'netns',
    nsOf(link.b.node),
  ];
}

/** The first ifindex of the veth pairs a lab creates: each link takes two, a then b. */
export const FIRST_IFINDEX = 10;

/** `ip -batch` lines that give one link end its MTU and addresses, then bring it up. */
export function interfaceLines(end: LinkEnd, link: LabLink): string[] {
  return [
    ...(link.mtu === undefined ? [] : [`link set dev ${end.iface} mtu ${link.mtu}`]),
    ...(link.pointToPoint === true
      ? [`link set dev ${end.iface} address ${pointToPointMac(link)} arp off`]
      : []),
    ...(end.addresses ?? []).map(
      (address) =>
        `address add ${address} dev ${end.iface}${parsePrefix(address)?.family === 6 ? ' nodad' : ''}`,
    ),
    `link set dev ${end.iface} up`,
  ];
}

/**
 * The MAC both ends of a point-to-point link share: locally administered unicast, derived from the
 * link's declared ends, so a recreated link gets it again.
 */
export function pointToPointMac(link: LabLink): string {
  const digest = createHash('sha256')
    .update(`${link.a.node}/${link.a.iface} ${link.b.node}/${link.b.iface}`)
    .digest();
  return ['02', ...[...digest.subarray(0, 5)].map((b) => b.toString(16).padStart(2, '0'))].join(
    ':',
  );
}

/** The `ip -batch` line that adds (or replaces) one route. */
export function routeLine(route: LabRoute, verb: 'add' | 'replace' = 'add'): string {
  const words = ['route', verb];
  if (route.type !== undefined && route.type !== 'unicast') words.push(route.type);
  words.push(route.to);
  if (route.via !== undefined) words.push('via', route.via);
  if (route.dev !== undefined) words.push('dev', route.dev);
  if (route.metric !== undefined) words.push('metric', String(route.metric));
  if (route.table !== undefined) words.push('table', String(route.table));
  return words.join(' ');
}
