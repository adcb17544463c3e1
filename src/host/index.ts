export {
  backendOf,
  createHostTarget,
  hostContext,
  type HostTarget,
  type HostTargetInput,
} from './host-target.js';
export { findFactsFile, requireFacts, requirePolicy } from './load-inputs.js';
export {
  compilePolicy,
  prepareForFacts,
  preparePolicy,
  type PrepareInput,
  type Prepared,
} from './prepare-policy.js';
export { applyPrepared, boundTunnels, planPrepared } from './apply-prepared.js';
export { explainPacket, explainPodPacket, type PacketExplanation } from './explain-packet.js';
