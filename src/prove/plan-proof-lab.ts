import { AddressSet, EgressguardError, parseAddress } from '../core/index.js';
import type { HostFacts } from '../facts/index.js';
import type { HostIR } from '../ir/index.js';
import { buildFactsTopology, type FactsLab } from './build-facts-topology.js';
import type { LabProbe } from './lab-probes.js';
import type { Topology } from './lab/topology.js';

/** A node beyond one of the host's interfaces, where outside packet counts are taken. */
export interface FarSide {
  readonly role: 'uplink' | 'tunnel' | 'lan';
  /** The host's interface that leads there. */
  readonly iface: string;
  readonly node: string;
  /**
   * Where its observer captures: the link end, or `any` beyond a tunnel, so the capture lives
   * through the tunnel being deleted and recreated.
   */
  readonly observe: string;
  /** A destination the host routes to this far side, for the observer's positive control. */
  readonly controlDst: string;
}

/** The lab a proof runs in, planned from the policy's IR, its facts and its probes. */
export interface ProofLab {
  readonly facts: FactsLab;
  readonly topology: Topology;
  readonly host: string;
  readonly uplink: FarSide;
  readonly tunnels: readonly FarSide[];
  readonly lans: readonly FarSide[];
  readonly farSides: readonly FarSide[];
  /** Addresses every far side answers on (its loopback): probe destinations, the resolver. */
  readonly farAddresses: readonly string[];
  /** Lab node → the probe sources it sends from (on its loopback). */
  readonly sources: ReadonlyMap<string, readonly string[]>;
  readonly tcpPorts: readonly number[];
  readonly udpPorts: readonly number[];
  /** The lab's DNS resolver beyond the uplink and every tunnel (a documentation address). */
  readonly resolver: string;
  /**
   * Routes the lab's VPN client keeps on the host, as a real one does (a peer route, the pushed
   * DNS server): tunnel → prefixes routed `dev <tunnel>` in the main table. They vanish with the
   * tunnel and the lab puts them back when it returns; egressguard never sees or owns them.
   */
  readonly tunnelRoutes: ReadonlyMap<string, readonly string[]>;
  /** The lab node a probe is sent from: the workload behind its ingress, or the host. */
  nodeOf(probe: LabProbe): string;
  /** The far side a host interface leads to, if it is one. */
  farSideOf(iface: string): FarSide | undefined;
}

// Documentation addresses (RFC 5737) the lab may take for itself, first free first.
const LAB_ADDRESS_CANDIDATES = [
  '192.0.2.53',
  '198.51.100.53',
  '203.0.113.53',
  '192.0.2.201',
  '192.0.2.202',
  '192.0.2.203',
  '198.51.100.201',
  '198.51.100.202',
  '203.0.113.201',
  '203.0.113.202',
];

/**
 * Plans the proof lab: the facts' host (buildFactsTopology: the host with its interfaces,
 * addresses and routes; the internet behind the uplink, a peer behind each tunnel, a LAN host
 * behind any other interface, a workload behind each class interface), plus what the proof needs
 * on top: the addresses the far sides answer on, the probe sources of each workload, the echo
 * ports, the resolver and the control destinations. Nothing in it reaches a real interface.
 */
export function planProofLab(ir: HostIR, facts: HostFacts, probes: readonly LabProbe[]): ProofLab {
  const factsLab = buildFactsTopology(ir, facts);
  const taken = AddressSet.parse([
    ...facts.interfaces.flatMap((i) => i.addresses),
    ...facts.routes.filter((r) => r.destination !== 'default').map((r) => r.destination),
    ...probes.flatMap((p) => [p.from, p.to]),
  ])
    .union(ir.localPrefixes)
    .union(
      ir.classes.reduce(
        (set, c) =>
          set.union(c.selector.sources).union(c.killSwitch?.except ?? AddressSet.parse([])),
        AddressSet.parse([]),
      ),
    );
  const free = LAB_ADDRESS_CANDIDATES.filter((a) => {
    const parsed = parseAddress(a);
    return parsed !== undefined && !taken.contains(parsed.family, parsed.value);
  });
  const take = (what: string): string => {
    const next = free.shift();
    if (next === undefined) {
      throw new EgressguardError(
        'usage',
        `Cannot plan the proof lab: no documentation address is left for ${what}`,
        { hint: 'the policy and facts use every address the lab would take' },
      );
    }
    return next;
  };
  const resolver = take('the lab resolver');

  const sideOf = (iface: string, role: FarSide['role'], controlDst: string): FarSide => {
    const node = factsLab.peers.get(iface);
    if (node === undefined) {
      throw new EgressguardError('usage', `Cannot plan the proof lab: no node behind "${iface}"`);
    }
    return { role, iface, node, observe: role === 'tunnel' ? 'any' : 'eth0', controlDst };
  };
  const uplinkIface = ir.uplink;
  const uplink = sideOf(
    uplinkIface,
    'uplink',
    gatewayVia(facts, uplinkIface) ?? neighbourOn(facts, uplinkIface) ?? take('the uplink control'),
  );
  const tunnelRoutes = new Map<string, string[]>();
  const tunnels = factsLab.tunnels.map((name, i) => {
    const control = take(`the control of tunnel "${name}"`);
    tunnelRoutes.set(name, [`${control}/32`, ...(i === 0 ? [`${resolver}/32`] : [])]);
    return sideOf(name, 'tunnel', control);
  });
  const lans = factsLab.unmanagedInterfaces
    .filter((name) => name !== uplinkIface)
    .map((name) =>
      sideOf(
        name,
        'lan',
        gatewayVia(facts, name) ?? neighbourOn(facts, name) ?? take(`the control of "${name}"`),
      ),
    );
  const farSides = [uplink, ...tunnels, ...lans];

  const nodeOf = (probe: LabProbe): string => {
    if (probe.ingress === undefined) return factsLab.host;
    const iface = factsLab.resolveIngress(probe.ingress);
    const node = iface === undefined ? undefined : factsLab.peers.get(iface);
    if (node === undefined) {
      throw new EgressguardError(
        'usage',
        `Cannot send probe "${probe.key}": the lab has no workload behind "${probe.ingress}"`,
      );
    }
    return node;
  };

  const hostAddresses = new Set(
    facts.interfaces.flatMap((i) => i.addresses.map((a) => a.split('/')[0] ?? a)),
  );
  const farAddresses = [
    ...new Set([...probes.map((p) => p.to).filter((a) => !hostAddresses.has(a)), resolver]),
  ].sort();
  const sources = new Map<string, string[]>();
  for (const probe of probes) {
    const node = nodeOf(probe);
    if (node === factsLab.host) continue; // the host sends from its own addresses
    const list = sources.get(node) ?? [];
    if (!list.includes(probe.from)) list.push(probe.from);
    sources.set(node, list);
  }
  const ports = (kinds: readonly string[]): number[] =>
    [
      ...new Set(
        probes.filter((p) => kinds.includes(p.kind) && p.port !== undefined).map((p) => p.port),
      ),
    ]
      .filter((p): p is number => p !== undefined)
      .sort((a, b) => a - b);
  return {
    facts: factsLab,
    topology: factsLab.topology,
    host: factsLab.host,
    uplink,
    tunnels,
    lans,
    farSides,
    farAddresses,
    sources,
    tcpPorts: ports(['tcp']),
    udpPorts: [...new Set([...ports(['udp', 'dns']), 53])].sort((a, b) => a - b),
    resolver,
    tunnelRoutes,
    nodeOf,
    farSideOf: (iface) => farSides.find((s) => s.iface === iface),
  };
}

function gatewayVia(facts: HostFacts, iface: string): string | undefined {
  const gateways = facts.routes
    .filter((r) => r.interface === iface && r.gateway !== undefined)
    .map((r) => r.gateway ?? '');
  return gateways.find((g) => !g.includes(':')) ?? gateways[0];
}

/** Another address in a connected IPv4 prefix of the interface (the host's plus or minus one). */
function neighbourOn(facts: HostFacts, iface: string): string | undefined {
  const address = facts.interfaces
    .find((i) => i.name === iface)
    ?.addresses.find((a) => !a.includes(':') && !a.endsWith('/32'));
  if (address === undefined) return undefined;
  const [ip = '', length = '32'] = address.split('/');
  const parsed = parseAddress(ip);
  if (parsed === undefined || parsed.family !== 4) return undefined;
  const value = parsed.value;
  const size = 2 ** (32 - Number(length));
  const base = value - (value % size);
  const other = value + 1 < base + size - 1 ? value + 1 : value - 1;
  return [24, 16, 8, 0].map((shift) => (other >>> shift) & 255).join('.');
}
