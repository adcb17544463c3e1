export {
  Controller,
  type ControllerOptions,
  type HostIdentity,
  type ReportTaken,
} from './controller.js';
export {
  createHostIrBinder,
  createPolicyDocumentBinder,
  digestFacts,
  hashPolicyBundle,
  type BindResult,
  type BindTarget,
  type BundleBinder,
  type HashBundle,
  type PrepareResult,
  type PushInput,
} from './bundle-binder.js';
export {
  bindingFactsOf,
  compileBundle,
  digestBindingFacts,
  findPushOptionProblem,
  type CompileBundleResult,
  type CompiledBundle,
} from './compile-bundle.js';
export { decodePolicyIr, encodePolicyIr, type DecodeResult } from './ir-codec.js';
export { systemClock, type Clock } from './clock.js';
export {
  connectController,
  describeRefusal,
  fetchPinnedCa,
  type ControllerAnswer,
  type ControllerConnection,
} from './controller-connection.js';
export { CONDITION_TYPES, type Condition, type ConditionType } from './conditions.js';
export {
  DEFAULT_BACKOFF,
  FailureBudget,
  backoffCeiling,
  backoffDelay,
  type BackoffPolicy,
} from './failure-budget.js';
export * from './protocol.js';
export { RefusedError, type RefusalCode } from './request-error.js';
export { type RolloutParamsInput } from './rollout-plan.js';
export {
  createSecret,
  hashSecret,
  matchesSecret,
  parseBootstrapToken,
  type BootstrapToken,
} from './secrets.js';
export { openStore, type Store, type StoreOptions } from './store/open-store.js';
export {
  classifyStoreError,
  type StoreFault,
  type StoreHealth,
  type StoreState,
} from './store/store-health.js';
