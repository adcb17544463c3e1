import { formatAddress, type AddressSet, type Family } from '../core/index.js';
import type { Protocol } from '../policy/index.js';
import type { Decision, EvaluationState, Explanation, HostView, Layer } from './evaluate.js';
import { carries, type HostIR, type HostPodClassIR, type RuleIR } from './nodes.js';

/** A packet a pod sends: pods have no fixed address, so only what the rules match on. */
export interface PodPacket {
  readonly family: Family;
  readonly destination: number | bigint;
  readonly protocol: Protocol;
  readonly port: number | undefined;
  /** The ICMP or ICMPv6 type; absent: an echo request. */
  readonly icmpType?: number | undefined;
}

const LAYERS_POD: readonly Layer[] = ['pod-network'];

/**
 * The reference evaluator for a Kubernetes class: what the policy does to a packet a pod of the
 * class sends, with the gateway's tunnel up or down. Pod traffic never meets a node's firewall
 * (eBPF host routing), so the one enforcing layer is the pod network.
 */
export function evaluatePodPacket(
  ir: HostIR,
  host: HostView,
  input: { readonly podClass: string; readonly packet: PodPacket; readonly state: EvaluationState },
): Explanation {
  const cls = ir.podClasses.find((c) => c.name === input.podClass);
  if (cls === undefined) {
    throw new Error(`No Kubernetes class "${input.podClass}" in policy "${ir.name}"`);
  }
  const { packet, state } = input;
  const notes = [
    'Enforced by the pod network (its network policy and egress gateway): a node firewall does not see pod traffic, which eBPF host routing redirects past netfilter',
  ];
  const deny = (decidedBy: Decision, extra: string[] = []): Explanation => ({
    class: cls.name,
    verdict: 'deny',
    decidedBy,
    via: null,
    egress: null,
    hook: null,
    layers: LAYERS_POD,
    notes: [...extra, ...notes],
  });
  if (cls.killSwitch !== null) {
    const { key, value } = cls.killSwitch.nodeLabel;
    notes.push(
      `Kill switch "${cls.killSwitch.id}": the gateway node carries label ${key}=${value} only while its tunnel is up; with no node carrying it, the egress gateway matches no node and drops the class's traffic instead of letting it leave by another device`,
    );
  }
  let steered = false;
  const part = clusterPart(ir, packet);
  if (part !== null) {
    notes.unshift(CLUSTER_NOTES[part]);
    const node = part === 'services' ? firstAddress(ir.cluster?.nodes, packet.family) : undefined;
    if (node !== undefined) {
      const asNode = decide(cls, { ...packet, destination: node });
      if (asNode.action !== decide(cls, packet).action) {
        notes.push(
          `If this address is the ClusterIP of a service whose backends are nodes (such as "kubernetes", the API server's service), it is judged as a node, at the backend's port: the rules give a node ${asNode.action} here (${asNode.id})`,
        );
      }
    }
  } else if (cls.via.kind === 'tunnel') {
    const tunnel = cls.via.interface;
    const excepted = cls.killSwitch?.except.contains(packet.family, packet.destination) ?? false;
    if (!excepted) {
      const carried = carries(cls.via, packet.family);
      if (cls.killSwitch !== null && (state.tunnel === 'down' || !carried)) {
        const label = `${cls.killSwitch.nodeLabel.key}=${cls.killSwitch.nodeLabel.value}`;
        return deny(
          { kind: 'kill-switch', id: cls.killSwitch.id },
          carried
            ? [
                `Tunnel "${tunnel}" is down: the gateway node loses label ${label}, no node matches the egress gateway's nodeSelector and the pod network drops it (DROP_NO_EGRESS_GATEWAY)`,
              ]
            : [
                `Tunnel "${tunnel}" carries no IPv${packet.family} on the gateway node: the class's IPv${packet.family} outside the exceptions is denied by network policy`,
              ],
        );
      }
      steered = state.tunnel === 'up' && carried;
      if (steered && cls.killSwitch !== null) notes.push(RESIDUAL_WINDOW);
      if (!steered) {
        notes.unshift(
          `Tunnel "${tunnel}" is down and class "${cls.name}" has no kill switch: its traffic leaves from the pod's own node`,
        );
      }
    } else {
      notes.unshift(
        "Excepted destination: excluded from the egress gateway, it leaves from the pod's own node",
      );
    }
  }
  const { decidedBy, action } = decide(cls, packet);
  if (action === 'deny') return deny(decidedBy);
  const via = steered && cls.via.kind === 'tunnel' ? cls.via.interface : null;
  return {
    class: cls.name,
    verdict: 'allow',
    decidedBy,
    via,
    egress: via === null ? null : tunnelAddress(host, via, packet.family),
    hook: null,
    layers: LAYERS_POD,
    notes:
      via === null && cls.via.kind === 'uplink' && part === null
        ? ["Leaves from the pod's own node, masqueraded by the pod network", ...notes]
        : notes,
  };
}

/** The first-match verdict of the class's rules (the default when none matches). */
function decide(
  cls: HostPodClassIR,
  packet: PodPacket,
): { decidedBy: Decision; action: 'allow' | 'deny' | 'audit'; id: string } {
  const rule = cls.rules.find((r) => matchesPodRule(r, packet));
  if (rule === undefined) {
    const id = cls.defaultRule.id;
    return { decidedBy: { kind: 'default', id }, action: cls.defaultRule.action, id };
  }
  return {
    decidedBy: { kind: 'rule', id: rule.id, action: rule.action },
    action: rule.action,
    id: rule.id,
  };
}

type ClusterPart = 'pods' | 'services' | 'nodes';

// What steers a tunnel class, and the window that stays open (docs/kubernetes.md, "What stays open").
const RESIDUAL_WINDOW =
  "Steering starts late for a new pod: the pod network programs it after a delay, so each pod of the class starts with the tunnel gate, an init container that holds its containers until its own request leaves by the tunnel exit (the admission policy refuses a pod without it); until then only the gate's requests to the echo service can leave by the pod's node. With the steering policy deleted or refused, a backstop policy drops the class as with the tunnel down. Not covered: the egress gateway switched off on the cluster, or the backstop deleted as well (doctor --k8s and the alerts report both)";

// What the pod network makes of an in-cluster destination (ClusterIR's sources).
const CLUSTER_NOTES: Readonly<Record<ClusterPart, string>> = {
  pods: 'In-cluster destination (the pod CIDR): the pod network judges it by identity, as any pod of the cluster, never by address; the egress gateway never steers it, so it stays inside the cluster whatever the tunnel does',
  services:
    'In-cluster destination (the service CIDR): the pod network translates the ClusterIP of a service to one of its backends before policy and judges that backend (the verdict here is for a pod); a ClusterIP whose service has no backend is refused before policy (the pod network fails the connection with "host unreachable", or drops the packet as "Service backend not found"), and an address no service holds is dropped by the class\'s network policy, which leaves the service CIDR out of its address rules; the egress gateway never steers any of them',
  nodes:
    'In-cluster destination (a node): the pod network judges it by identity (the host and remote-node entities), never by address; the egress gateway never steers it',
};

/** Which part of the cluster a destination is in, when the facts say where the cluster is. */
function clusterPart(ir: HostIR, packet: PodPacket): ClusterPart | null {
  const cluster = ir.cluster;
  if (cluster === null) return null;
  for (const part of ['nodes', 'pods', 'services'] as const) {
    if (cluster[part].contains(packet.family, packet.destination)) return part;
  }
  return null;
}

function firstAddress(set: AddressSet | undefined, family: Family): number | bigint | undefined {
  for (const [start] of set?.intervals(family) ?? []) return start;
  return undefined;
}

function tunnelAddress(host: HostView, tunnel: string, family: Family): string | null {
  const own = host.interfaceAddresses.get(tunnel)?.find((p) => p.family === family);
  return own === undefined ? null : formatAddress(own.family, own.start);
}

function matchesPodRule(rule: RuleIR, packet: PodPacket): boolean {
  const { destination, protocols, ports } = rule.match;
  // "self" is refused for Kubernetes classes when the policy is checked.
  if (destination.kind === 'self') return false;
  if (destination.kind === 'addresses') {
    if (!destination.set.contains(packet.family, packet.destination)) return false;
  }
  if (protocols !== null && !protocols.includes(packet.protocol)) return false;
  if (ports !== null) {
    const port = packet.port;
    if (port === undefined || !ports.some((r) => r.from <= port && port <= r.to)) return false;
  }
  return true;
}
