import {
  AddressSet,
  EgressguardError,
  formatAddress,
  parsePrefix,
  type Family,
  type Prefix,
} from '../core/index.js';
import {
  describeTunnelMatch,
  matchesTunnel,
  resolveUplink,
  type HostFacts,
} from '../facts/index.js';
import { matchesInterface, type Policy } from '../policy/index.js';
import { deepFreeze } from './deep-freeze.js';
import { lowerPolicy } from './lower-policy.js';
import {
  type BoundViaIR,
  type ClassIR,
  type ClusterIR,
  type HostClassIR,
  type HostIR,
  type PolicyIR,
  type TunnelIR,
} from './nodes.js';

/**
 * Binds the host-independent IR to one host's facts: resolves the uplink, leaves out the classes
 * whose host labels this host lacks, finds the connected prefixes tunnel classes reach directly,
 * and what each tunnel can carry. Throws a `facts` error when the policy cannot hold on this host
 * (no uplink, a class arriving on the uplink): that host's bundle can never be valid.
 */
export function bindHost(ir: PolicyIR, facts: HostFacts): HostIR {
  const resolved = resolveTunnels(ir, facts);
  const names = [...resolved.values()];
  const uplink = resolveUplink(
    facts,
    ir.uplink.kind === 'named' ? ir.uplink.interface : 'default-route',
    names,
  );
  const localPrefixes: Prefix[] = [];
  for (const iface of facts.interfaces) {
    if (iface.name === uplink || names.includes(iface.name)) continue;
    for (const address of iface.addresses) {
      const prefix = parsePrefix(address);
      // Loopback and link-local never leave the host: no route needed.
      if (prefix === undefined || isHostScoped(prefix)) continue;
      localPrefixes.push(prefix);
    }
  }
  const tunnels = ir.tunnels.map((declared): TunnelIR => {
    const name = resolved.get(declared) ?? declared;
    const iface = facts.interfaces.find((i) => i.name === name);
    // Absent: the tunnel is down or not created yet; assume it carries both until it says not.
    const families: Family[] = iface?.ipv6 === false ? [4] : [4, 6];
    return {
      kind: 'tunnel',
      name,
      declared,
      families,
      present: iface !== undefined,
      addresses: [...(iface?.addresses ?? [])],
      peer: iface?.peer ?? null,
    };
  });
  const own = ir.classes
    .filter((c) => isClassOnHost(c, facts))
    .map((c) => bindClass(c, { uplink, tunnels, hostname: facts.hostname }));
  const classes = [...own, ...gatewayClasses(ir, facts, { own, uplink, tunnels })];
  return deepFreeze({
    kind: 'host-policy',
    name: ir.name,
    uplink,
    tunnels,
    localPrefixes: AddressSet.fromPrefixes(localPrefixes),
    ...hostAddresses(facts),
    reassembly: ir.reassembly,
    classes,
    podClasses: ir.podClasses.map((c) => ({
      ...c,
      via: bindVia(c.via, { uplink, tunnels }),
    })),
    cluster: bindCluster(facts),
  });
}

const LINK_LOCAL_V6 = AddressSet.parse(['fe80::/10']);

/** What the host takes as its own, as HostIR names it (hostInterfaces, ipv6NatSources). */
function hostAddresses(facts: HostFacts): Pick<HostIR, 'hostInterfaces' | 'ipv6NatSources'> {
  const hostOf = (address: string): Prefix | undefined => parsePrefix(address.split('/')[0] ?? '');
  const interfaces: string[] = [];
  const natSources: Record<string, string> = {};
  for (const iface of facts.interfaces) {
    const own = iface.addresses.map(hostOf).filter((p): p is Prefix => p !== undefined);
    if (own.length > 0) interfaces.push(iface.name);
    const global = own.find((p) => p.family === 6 && !LINK_LOCAL_V6.contains(6, p.start));
    if (global !== undefined && !(iface.name in natSources)) {
      natSources[iface.name] = formatAddress(6, global.start);
    }
  }
  return { hostInterfaces: [...new Set(interfaces)].sort(), ipv6NatSources: natSources };
}

function bindCluster(facts: HostFacts): ClusterIR | null {
  const cluster = facts.cluster;
  if (cluster === undefined) return null;
  const nodes = AddressSet.parse(cluster.nodeAddresses);
  return {
    kind: 'cluster',
    pods: AddressSet.parse(cluster.podCidrs).subtract(nodes),
    services: AddressSet.parse(cluster.serviceCidrs).subtract(nodes),
    nodes,
    tunnelExits: cluster.tunnelExits,
  };
}

function bindClass(
  c: ClassIR,
  host: { uplink: string; tunnels: readonly TunnelIR[]; hostname: string },
): HostClassIR {
  if (c.selector.kind === 'ingress') {
    const onUplink = c.selector.interfaces.find((p) => matchesInterface(p, host.uplink));
    if (onUplink !== undefined) {
      throw new EgressguardError(
        'facts',
        `Cannot carry class "${c.name}" on host "${host.hostname}": its ingress "${onUplink}" matches the uplink "${host.uplink}"`,
        {
          hint: 'a class arrives on the interfaces its workloads sit behind (a bridge, a veth prefix); name the uplink in the policy (interfaces.uplink) or change the ingress',
        },
      );
    }
  }
  return {
    kind: 'class',
    name: c.name,
    selector: c.selector,
    via: bindVia(c.via, host),
    housekeeping: c.housekeeping,
    antiSpoofing: c.antiSpoofing,
    ipv6Block: c.ipv6Block,
    killSwitch: c.killSwitch,
    mssClamp: c.mssClamp,
    nat: c.nat,
    rules: c.rules,
    defaultRule: c.defaultRule,
    gatewayFor: null,
  };
}

/**
 * The gateway node's part of a Kubernetes tunnel class, derived from the class and this host's
 * facts: the egress gateway's interface only picks the SNAT address (the tunnel's address); the
 * node's own routing picks the device (docs/kubernetes.md, "The gateway node's part, generated").
 * So the tunnel's addresses form a host class that leaves by the tunnel, with the pod class's
 * kill switch and exceptions: its steering sends the SNATed pod traffic into the tunnel (with a
 * blackhole behind it), and its host firewall's kill switch covers what the node itself sends
 * from those addresses (the SNATed pod traffic bypasses the host firewall). Derived only on a
 * host that has the tunnel with an address (the gateway node), and only when no class of the
 * policy already routes those addresses through the tunnel.
 */
function gatewayClasses(
  ir: PolicyIR,
  facts: HostFacts,
  host: { own: readonly HostClassIR[]; uplink: string; tunnels: readonly TunnelIR[] },
): HostClassIR[] {
  return ir.podClasses.flatMap((pc): HostClassIR[] => {
    if (pc.via.kind !== 'tunnel') return [];
    const declared = pc.via.interface;
    const tunnel = host.tunnels.find((t) => t.declared === declared)?.name ?? declared;
    // The addresses themselves (a bare address is a host prefix), not the subnets they sit in.
    const prefixes = (facts.interfaces.find((i) => i.name === tunnel)?.addresses ?? [])
      .map((a) => parsePrefix(a.split('/')[0] ?? ''))
      .filter((p): p is Prefix => p !== undefined && !isHostScoped(p));
    if (prefixes.length === 0) return [];
    const sources = AddressSet.fromPrefixes(prefixes);
    const routed = host.own.some(
      (c) =>
        c.selector.kind === 'host' &&
        c.via.kind === 'tunnel' &&
        c.via.interface === tunnel &&
        c.selector.sources.covers(sources),
    );
    if (routed) return [];
    const name = `${pc.name}.gateway`;
    return [
      {
        kind: 'class',
        name,
        selector: { kind: 'host', sources },
        via: bindVia(pc.via, host),
        housekeeping: [],
        antiSpoofing: null,
        ipv6Block: null,
        killSwitch:
          pc.killSwitch === null
            ? null
            : { kind: 'kill-switch', id: `${name}/kill-switch`, except: pc.killSwitch.except },
        mssClamp: null,
        nat: null,
        rules: [],
        defaultRule: { kind: 'default', id: `${name}/default`, action: 'allow' },
        gatewayFor: pc.name,
      },
    ];
  });
}

function bindVia(
  via: ClassIR['via'],
  host: { uplink: string; tunnels: readonly TunnelIR[] },
): BoundViaIR {
  if (via.kind === 'tunnel') {
    const tunnel = host.tunnels.find((t) => t.declared === via.interface);
    return {
      kind: 'tunnel',
      interface: tunnel?.name ?? via.interface,
      families: tunnel?.families ?? [4, 6],
      present: tunnel?.present ?? false,
    };
  }
  return { kind: 'uplink', interface: host.uplink };
}

/**
 * A name no interface has: what a matched tunnel absent from the host binds to, for backends
 * that match interfaces by name at run time (an output-interface match, a route's device). The
 * tunnel is also marked absent (`present: false`), so a backend that must name an existing
 * interface compiles nothing that names it.
 */
const ABSENT_TUNNEL = 'eg-absent';

/**
 * The interface each declared tunnel is on this host. A tunnel declared by name is that name; one
 * declared with `match` is the interface whose own address or point-to-point peer is the one
 * matched, found anew at every bind (a macOS utun is renumbered on every reconnect, and its old
 * number can go to another tunnel). When none matches, the tunnel is absent: it binds to a name
 * no interface has (its declared name when that is free), so the kill switch drops its class
 * rather than route it into whatever tunnel now wears the old name (and bindHost marks it
 * absent). Two matching interfaces are a `facts` error: which one carries the class is not for
 * egressguard to guess.
 */
export function resolveTunnels(
  ir: Pick<PolicyIR, 'tunnels' | 'tunnelMatches'>,
  facts: Pick<HostFacts, 'interfaces' | 'hostname'>,
): Map<string, string> {
  const out = new Map<string, string>();
  const taken = new Set(facts.interfaces.map((i) => i.name));
  ir.tunnels.forEach((declared, index) => {
    const match = ir.tunnelMatches[declared];
    if (match === undefined) {
      out.set(declared, declared);
      return;
    }
    const found = facts.interfaces.filter((i) => matchesTunnel(match, i));
    if (found.length > 1) {
      throw new EgressguardError(
        'facts',
        `Cannot identify tunnel "${declared}" on host "${facts.hostname}": interfaces ${found.map((i) => `"${i.name}"`).join(' and ')} both match ${describeTunnelMatch(match)}`,
        {
          hint: 'match the tunnel by an address only one interface has (its own address, or its peer)',
        },
      );
    }
    const name = found[0]?.name;
    if (name !== undefined) out.set(declared, name);
    else out.set(declared, taken.has(declared) ? `${ABSENT_TUNNEL}${index}` : declared);
  });
  return out;
}

/** Whether a class applies on this host: every label it asks for is in the host's facts. */
export function isClassOnHost(cls: Pick<ClassIR, 'hostLabels'>, facts: HostFacts): boolean {
  return Object.entries(cls.hostLabels).every(([k, v]) => facts.labels[k] === v);
}

/** Classes this host does not carry because its labels do not match (binding leaves them out). */
export function classesNotOnHost(
  ir: PolicyIR,
  facts: HostFacts,
): { name: string; labels: Readonly<Record<string, string>> }[] {
  return ir.classes
    .filter((c) => !isClassOnHost(c, facts))
    .map((c) => ({ name: c.name, labels: c.hostLabels }));
}

function isHostScoped(prefix: Prefix): boolean {
  if (prefix.family === 4) return (prefix.start as number) >>> 24 === 127;
  const start = prefix.start as bigint;
  return start === 1n || start >> 118n === 0x3fan; // ::1, fe80::/10
}

/** Both steps at once, for one host: the policy lowered, then bound to its facts. */
export function lowerForHost(policy: Policy, facts: HostFacts): HostIR {
  return bindHost(lowerPolicy(policy), facts);
}
