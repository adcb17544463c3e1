export {
  assertNever,
  matchesInterface,
  type ClassIR,
  type KillSwitchIR,
  type MatchIR,
  type PolicyIR,
  type RuleIR,
  type SelectorIR,
  type ViaIR,
} from './nodes.js';
export { lowerPolicy } from './lower-policy.js';
export {
  createHostView,
  evaluatePacket,
  parsePacket,
  type Decision,
  type EvaluationState,
  type Explanation,
  type HostView,
  type Layer,
  type Packet,
} from './evaluate.js';
export {
  BLANK_STAMP,
  HASH_STAMP_PATTERN,
  hostConfigHash,
  irDigest,
  type HashInput,
} from './host-config-hash.js';
export { evaluateProbes, type ProbeResult } from './evaluate-probes.js';
export { classesNotOnHost } from './classes-on-host.js';
