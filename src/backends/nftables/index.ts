export { nftablesBackend } from './nftables-backend.js';
export {
  createNftCompiler,
  DEFAULT_TABLE,
  LOCKDOWN_ARTIFACT,
  LOG_GROUP,
  RULESET_ARTIFACT,
} from './nft-compiler.js';
export {
  buildSteering,
  STEERING_ARTIFACT,
  STEERING_DEFAULTS,
  type SteeringRoute,
  type SteeringRule,
  type SteeringSpec,
} from './steering.js';
export { renderUnits, type UnitOptions } from './systemd-units.js';
export {
  createDoctorContext,
  diagnose,
  type DoctorArea,
  type DoctorFinding,
  type DoctorReport,
  type DoctorSeverity,
} from './nft-doctor.js';
export { readDoctorSnapshot } from './nft-doctor-gather.js';
export { createDropDecoder, mapRuleClasses, type DropRecord } from './nflog-record.js';
