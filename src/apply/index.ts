export { applyGeneration, type ApplyInput, type ApplyReport } from './apply-generation.js';
export { planGeneration } from './plan-generation.js';
export { readStatus, type Condition, type HostStatus } from './read-status.js';
export { removeGeneration } from './remove-generation.js';
export { restoreGeneration, type RestoreOutcome } from './restore-generation.js';
export { revertUnconfirmed } from './revert-generation.js';
export type { RevertOutcome } from './revert-record.js';
export { FILES, readGeneration, type Generation, type Attempt } from './generation.js';
export {
  confirmGeneration,
  readPendingConfirm,
  scheduleRevert,
  type PendingConfirm,
} from './confirm-timer.js';
export {
  runResident,
  type ResidentLogEntry,
  type ResidentPass,
  type ResidentRepair,
} from './run-resident.js';
export { startGatewayLoop, type GatewayLoop } from './run-gateway.js';
export { recordFailure, type FailureRecord } from './failure-record.js';
