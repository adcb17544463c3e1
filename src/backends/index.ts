export type {
  Applier,
  ApplyResult,
  Artifact,
  ArtifactRole,
  Backend,
  BackendContext,
  BackendOption,
  BackendOptions,
  Capabilities,
  CompileOptions,
  Compiler,
  ConformanceHarness,
  DoctorFinding,
  DoctorReport,
  DoctorSeverity,
  DoctorSupport,
  DropRecord,
  DropStream,
  DropsSupport,
  Inspector,
  LabAccess,
  LabPacket,
  LiveCounter,
  LiveProblem,
  LiveState,
  Observed,
  PlanResult,
  ProveSupport,
  SuiteSupport,
  TestPacket,
  UnitsSupport,
  Watcher,
  WatchEvent,
} from './backend.js';
export { BackendRegistry, registry } from './registry.js';
export {
  generateBoundaryPackets,
  generatePodBoundaryPackets,
  type PodTestPacket,
} from './boundary-packets.js';
export { checkConformance, type Disagreement } from './conformance.js';
export { artifactOfRole, compileWithHash } from './compile-with-hash.js';
export { describeLiveProblem } from './live-problem.js';
