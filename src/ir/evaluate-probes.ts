import { parseAddress } from '../core/index.js';
import type { PodProbe, Probe, Protocol, Requirement } from '../policy/index.js';
import { evaluatePacket, type Explanation, type HostView, type Packet } from './evaluate.js';
import { evaluatePodPacket } from './evaluate-pod.js';
import type { HostIR } from './nodes.js';

export interface ProbeResult {
  readonly requirement: string;
  readonly probe: Probe;
  /** Index of the probe in its requirement, for pointing at it in the policy. */
  readonly index: number;
  readonly explanation: Explanation;
  /** Why the evaluator disagrees with the probe's expectation; empty when it agrees. */
  readonly mismatches: readonly string[];
}

/** Runs each requirement's probes through the reference evaluator: the L1 (static) proof. */
export function evaluateProbes(
  ir: HostIR,
  host: HostView,
  requirements: readonly Requirement[],
): ProbeResult[] {
  return requirements.flatMap((requirement) =>
    requirement.probes.map((probe, index) => {
      const packet = toPacket({
        from: probe.from,
        to: probe.to,
        ingress: probe.in,
        protocol: probe.proto,
        port: probe.port,
      });
      const explanation = evaluatePacket(ir, host, packet, { tunnel: probe.tunnel });
      const mismatches = routeMismatches(probe, explanation, (via) => `"${via ?? 'nothing'}"`);
      if (
        probe.egress !== undefined &&
        explanation.verdict === 'allow' &&
        explanation.egress !== probe.egress
      ) {
        mismatches.push(
          `expected egress address ${probe.egress}, gets ${explanation.egress ?? 'none'}`,
        );
      }
      return { requirement: requirement.id, probe, index, explanation, mismatches };
    }),
  );
}

/** A packet from addresses already validated (a probe's, a lab's); throws on a bad one. */
export function toPacket(input: {
  readonly from: string;
  readonly to: string;
  readonly ingress?: string | undefined;
  readonly protocol?: Protocol | undefined;
  readonly port?: number | undefined;
}): Packet {
  const source = parseAddress(input.from);
  const destination = parseAddress(input.to);
  if (source === undefined || destination === undefined || source.family !== destination.family) {
    throw new Error(`Cannot make a packet from "${input.from}" to "${input.to}"`);
  }
  return {
    family: source.family,
    source: source.value,
    destination: destination.value,
    ingress: input.ingress,
    protocol: input.protocol ?? 'tcp',
    port: input.port,
  };
}

export interface PodProbeResult {
  readonly requirement: string;
  readonly probe: PodProbe;
  readonly explanation: Explanation;
  readonly mismatches: readonly string[];
}

/** Runs each requirement's pod probes through the pod evaluator: the L1 proof of Kubernetes classes. */
export function evaluatePodProbes(
  ir: HostIR,
  host: HostView,
  requirements: readonly Requirement[],
): PodProbeResult[] {
  return requirements.flatMap((requirement) =>
    requirement.podProbes.map((probe) => {
      const destination = parseAddress(probe.to);
      if (destination === undefined) throw new Error(`Cannot make a packet to "${probe.to}"`);
      const explanation = evaluatePodPacket(ir, host, {
        podClass: probe.pod,
        packet: {
          family: destination.family,
          destination: destination.value,
          protocol: probe.proto,
          port: probe.port,
        },
        state: { tunnel: probe.tunnel },
      });
      const mismatches = routeMismatches(probe, explanation, (via) =>
        via === null ? "the pod's own node" : `"${via}"`,
      );
      return { requirement: requirement.id, probe, explanation, mismatches };
    }),
  );
}

/** Where the evaluator and a probe disagree on the verdict or, when allowed, the way out. */
function routeMismatches(
  probe: Pick<Probe, 'expect' | 'via'>,
  explanation: Explanation,
  describeVia: (via: string | null) => string,
): string[] {
  const mismatches: string[] = [];
  const { verdict, decidedBy } = explanation;
  if (verdict !== probe.expect) {
    mismatches.push(
      `expected ${probe.expect}, the policy gives ${verdict} (decided by ${decidedBy.kind}${decidedBy.id === null ? '' : ` "${decidedBy.id}"`})`,
    );
  }
  if (probe.via !== undefined && verdict === 'allow' && explanation.via !== probe.via) {
    mismatches.push(
      `expected to leave by "${probe.via}", leaves by ${describeVia(explanation.via)}`,
    );
  }
  return mismatches;
}
