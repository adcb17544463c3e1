export {
  createRunner,
  requireNamespace,
  type Runner,
  type RunnerOptions,
  type RunOptions,
  type CommandResult,
  type Invocation,
  type RunningCommand,
  type RunningBinaryCommand,
  type Effect,
} from './runner.js';
export { Faults, type FaultAction } from './faults.js';
export {
  classifyCommand,
  classifyModelPrograms,
  commandOperands,
  MODEL_PROGRAMS_ENV,
  type CommandClass,
  type CommandClassifier,
} from './classify-command.js';
