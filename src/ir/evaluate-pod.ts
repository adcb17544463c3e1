import { formatAddress, type Family } from '../core/index.js';
import type { Protocol } from '../policy/index.js';
import type { Decision, EvaluationState, Explanation, HostView, Layer } from './evaluate.js';
import { carries, type HostIR, type RuleIR } from './nodes.js';

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
  if (cls.via.kind === 'tunnel') {
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
  const rule = cls.rules.find((r) => matchesPodRule(r, packet));
  const decidedBy: Decision =
    rule === undefined
      ? { kind: 'default', id: cls.defaultRule.id }
      : { kind: 'rule', id: rule.id, action: rule.action };
  const action = rule === undefined ? cls.defaultRule.action : rule.action;
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
      via === null && cls.via.kind === 'uplink'
        ? ["Leaves from the pod's own node, masqueraded by the pod network", ...notes]
        : notes,
  };
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
