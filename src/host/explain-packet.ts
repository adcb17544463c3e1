import { EgressguardError, isEgressguardError } from '../core/index.js';
import type { HostFacts } from '../facts/index.js';
import {
  createHostView,
  evaluatePacket,
  evaluatePodPacket,
  lowerForHost,
  parsePacketArguments,
  type EvaluationState,
  type Explanation,
  type PacketArguments,
} from '../ir/index.js';
import { didYouMean, type Policy } from '../policy/index.js';
import {
  registry as defaultRegistry,
  type Backend,
  type BackendRegistry,
} from '../backends/index.js';

/**
 * An explanation whose layers carry the names its backend gives them (Backend.layer, and
 * Backend.routingLayer where the firewall itself picks the exit).
 */
export interface PacketExplanation extends Omit<Explanation, 'layers'> {
  readonly layers: readonly string[];
}

/**
 * What happens to one packet on a host of these facts (`explain`): the class, the verdict, the
 * IR node that decided, where it leaves, and which layers act. The packet is given as text, as
 * on the command line, and validated first (a `usage` error names the bad value).
 */
export function explainPacket(
  policy: Policy,
  facts: HostFacts,
  packet: PacketArguments,
  options: Partial<EvaluationState> & {
    /** The backend whose firewall names the filter layer (default: the one for the facts' OS). */
    readonly backend?: string | undefined;
    readonly registry?: BackendRegistry;
  } = {},
): PacketExplanation {
  const parsed = parsePacketArguments(packet);
  const registry = options.registry ?? defaultRegistry;
  const result = evaluatePacket(lowerForHost(policy, facts), createHostView(facts), parsed, {
    tunnel: options.tunnel ?? 'up',
  });
  const enforcer = enforcingBackend(registry, facts, options.backend);
  const names: Record<string, string> = {
    filter: enforcer?.layer ?? 'filter',
    routing: enforcer?.routingLayer ?? 'routing',
  };
  // pf picks the exit itself (route-to): one layer, named once.
  const layers = [...new Set(result.layers.map((l) => names[l] ?? l))];
  return { ...result, layers };
}

/** The backend that enforces: the asked-for one, else the facts' one, else none in this build. */
function enforcingBackend(
  registry: BackendRegistry,
  facts: HostFacts,
  backend: string | undefined,
): Backend | undefined {
  const named = registry.all().find((b) => b.name === backend);
  if (named !== undefined) return named;
  try {
    return registry.forFacts(facts);
  } catch (error) {
    // No backend in this build enforces on this OS: the verdict stands, the layer has no name.
    if (isEgressguardError(error) && error.code === 'unsupported') return undefined;
    throw error;
  }
}

/**
 * What happens to a packet a pod of a Kubernetes class sends (`explain --pod CLASS`): the layer
 * is the pod network, named by the backend that enforces pod classes, with what that backend says
 * about where its enforcement happens (a node's firewall never sees pod traffic).
 */
export function explainPodPacket(
  policy: Policy,
  facts: HostFacts,
  packet: Omit<PacketArguments, 'from' | 'in' | 'fragment'> & { readonly pod: string },
  options: Partial<EvaluationState> & { readonly registry?: BackendRegistry } = {},
): PacketExplanation {
  const names = policy.podClasses.map((c) => c.name);
  if (!names.includes(packet.pod)) {
    throw new EgressguardError(
      'usage',
      `Cannot explain a packet of pod class "${packet.pod}": policy "${policy.name}" has no such Kubernetes class${didYouMean(packet.pod, names)}`,
      {
        hint:
          names.length === 0
            ? 'the policy has no class with "pods"; give --from for a host class'
            : `use one of: ${names.join(', ')}`,
      },
    );
  }
  // A pod has no fixed address: the source is irrelevant, so the destination stands in for it
  // while the rest of the packet is validated the one way explain validates packets.
  const parsed = parsePacketArguments({ ...packet, from: packet.to });
  const result = evaluatePodPacket(lowerForHost(policy, facts), createHostView(facts), {
    podClass: packet.pod,
    packet: {
      family: parsed.family,
      destination: parsed.destination,
      protocol: parsed.protocol,
      port: parsed.port,
      icmpType: parsed.icmpType,
    },
    state: { tunnel: options.tunnel ?? 'up' },
  });
  const registry = options.registry ?? defaultRegistry;
  const enforcer = registry.all().find((b) => b.capabilities.supportsPodClasses === true);
  return {
    ...result,
    layers: result.layers.map((l) => (l === 'pod-network' ? (enforcer?.layer ?? l) : l)),
    notes: [...result.notes, ...(enforcer?.capabilities.podLayerNotes ?? [])],
  };
}
