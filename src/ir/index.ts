export {
  assertNever,
  carries,
  type AntiSpoofingIR,
  type BoundViaIR,
  type ClassIR,
  type ClusterIR,
  type ClusterPartName,
  type TunnelExitIR,
  type DefaultIR,
  type HostClassIR,
  type HostIR,
  type HostPodClassIR,
  type PodClassIR,
  type PodKillSwitchIR,
  type PodSelectorIR,
  type HousekeepingIR,
  type Ipv6BlockIR,
  type KillSwitchIR,
  type MatchIR,
  type MssClampIR,
  type NatIR,
  type PolicyIR,
  type ReassemblyIR,
  type RuleIR,
  type SelectorIR,
  type TunnelIR,
  type TunnelMatchIR,
  type UplinkIR,
  type ViaIR,
} from './nodes.js';
export { matchesInterface } from '../policy/index.js';
export { lowerPolicy, REASSEMBLY_ID } from './lower-policy.js';
export {
  bindHost,
  classesNotOnHost,
  isClassOnHost,
  lowerForHost,
  resolveTunnels,
} from './bind-host.js';
export {
  createHostView,
  evaluatePacket,
  type Decision,
  type EvaluationState,
  type Explanation,
  type FragmentPart,
  type HostView,
  type Layer,
  type Packet,
} from './evaluate.js';
export { parsePacketArguments, type PacketArguments } from './packet-arguments.js';
export {
  BLANK_STAMP,
  HASH_STAMP_PATTERN,
  hostConfigHash,
  irDigest,
  type HashInput,
} from './host-config-hash.js';
export {
  evaluatePodProbes,
  evaluateProbes,
  toPacket,
  type PodProbeResult,
  type ProbeResult,
} from './evaluate-probes.js';
export { gatewayLabel } from './gateway-label.js';
export { findMissingIngress, type MissingIngress } from './missing-ingress.js';
export {
  findMasqueradeWithoutAddress,
  type MasqueradeWithoutAddress,
} from './masquerade-source.js';
export { evaluatePodPacket, type PodPacket } from './evaluate-pod.js';
