import { fileURLToPath } from 'node:url';
import { readHostFacts } from '../../src/facts/index.js';
import { createHostView, lowerForHost } from '../../src/ir/index.js';
import { loadPolicy } from '../../src/policy/index.js';
import { expandProbes, type LabProbe, type SkippedProbe } from '../../src/prove/lab-probes.js';
import { planProofLab, type ProofLab } from '../../src/prove/plan-proof-lab.js';

const EXAMPLE = fileURLToPath(
  new URL('../../testdata/policies/valid/linux-vpn-gateway/', import.meta.url),
);

/** The linux-vpn-gateway example as prove sees it: probes and the planned lab (no lab built). */
export function loadVpnGateway(): { probes: LabProbe[]; skipped: SkippedProbe[]; plan: ProofLab } {
  const policy = loadPolicy(`${EXAMPLE}policy.yaml`).policy;
  if (policy === undefined) throw new Error('the example policy does not load');
  const facts = readHostFacts(`${EXAMPLE}facts.json`);
  const ir = lowerForHost(policy, facts);
  const { probes, skipped } = expandProbes(policy, ir, createHostView(facts));
  return { probes, skipped, plan: planProofLab(ir, facts, probes) };
}
