import { evaluatePacket, type HostView, type HostIR } from '../../src/ir/index.js';
import type { ConformanceHarness, Observed, TestPacket } from '../../src/backends/backend.js';

export interface Disagreement {
  readonly packet: TestPacket;
  readonly expected: Observed;
  readonly observed: Observed;
}

/**
 * The conformance suite every backend runs: the reference evaluator on the IR decides, and the
 * backend's enforcer must agree on the verdict and on the deciding rule id for every packet.
 */
export async function checkConformance(input: {
  ir: HostIR;
  host: HostView;
  packets: readonly TestPacket[];
  harness: ConformanceHarness;
}): Promise<Disagreement[]> {
  const observed = await input.harness.observe(input.packets);
  if (observed.length !== input.packets.length) {
    throw new Error(
      `Harness "${input.harness.name}" observed ${observed.length} packets of ${input.packets.length}`,
    );
  }
  const disagreements: Disagreement[] = [];
  input.packets.forEach((tp, i) => {
    const reference = evaluatePacket(input.ir, input.host, tp.packet, tp.state);
    const expected: Observed = { verdict: reference.verdict, decidedBy: reference.decidedBy.id };
    const got = observed[i];
    if (got === undefined) return;
    if (got.verdict !== expected.verdict || got.decidedBy !== expected.decidedBy) {
      disagreements.push({ packet: tp, expected, observed: got });
    }
  });
  return disagreements;
}
