export type {
  Applier,
  ApplyResult,
  Artifact,
  Backend,
  BackendContext,
  Capabilities,
  CompileOptions,
  Compiler,
  Inspector,
  LiveCounter,
  LiveState,
  PlanResult,
  Watcher,
  WatchEvent,
} from './backend.js';
export { BackendRegistry } from './registry.js';
export { generateBoundaryPackets, type TestPacket } from './boundary-packets.js';
export {
  checkConformance,
  type ConformanceHarness,
  type Disagreement,
  type Observed,
} from './conformance.js';
export {
  nftablesBackend,
  buildSteering,
  DEFAULT_TABLE,
  LOCKDOWN_ARTIFACT,
  LOG_GROUP,
  RULESET_ARTIFACT,
  STEERING_ARTIFACT,
  STEERING_DEFAULTS,
  type SteeringRoute,
  type SteeringRule,
  type SteeringSpec,
} from './nftables/index.js';
export { renderUnits, type UnitOptions } from './nftables/index.js';
export { compileWithHash } from './compile-with-hash.js';
export {
  createDoctorContext,
  createDropDecoder,
  diagnose,
  mapRuleClasses,
  readDoctorSnapshot,
  type DoctorArea,
  type DoctorFinding,
  type DoctorReport,
  type DoctorSeverity,
  type DropRecord,
} from './nftables/index.js';
