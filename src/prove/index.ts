export {
  type Topology,
  type LabNode,
  type LabLink,
  type LinkEnd,
  type LabRoute,
  type LinkRef,
} from './lab/topology.js';
export {
  createLab,
  withLab,
  type Lab,
  type CreateLabOptions,
  type LinkState,
  type RestoreRoutes,
} from './lab/create-lab.js';
export { reapStaleLabs, type ReapResult } from './lab/reap-stale-labs.js';
export { DEFAULT_LAB_RUN_DIR } from './lab/lab-registry.js';
export { createNonce, isNonce } from './lab/create-nonce.js';
export {
  sendPackets,
  PACKET_KINDS,
  type PacketKind,
  type PacketSpec,
  type SendResult,
} from './lab/send-packets.js';
export {
  startObserver,
  type Observer,
  type ObserverOptions,
  type Observation,
  type PositiveControl,
  type Direction,
} from './lab/start-observer.js';
export { parsePacket, isIcmpError, type ObservedPacket } from './lab/parse-packet.js';
export { countPackets } from './lab/count-packets.js';
export { buildFactsTopology, type FactsLab } from './build-facts-topology.js';
export { labAccess } from './lab-access.js';
export { proveInLab, type ProveOptions, type ProofReport, type ProofVersions } from './prove.js';
export { renderSummary, renderJunit, type SummaryOptions } from './reports.js';
export { scenariosFor } from './scenarios/index.js';
export type { ScenarioResult, Scenario, Finding, StreamJudgement } from './scenario.js';
export type { ProbeJudgement, OracleVerdict } from './oracles.js';
export type { RequirementCoverage, Level } from './coverage.js';
