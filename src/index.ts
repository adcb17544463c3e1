/**
 * egressguard's programmatic API (`import … from 'egressguard'`): load and check a policy, lower
 * it, explain a packet, compile it for a backend, and plan and apply it on a host or a network
 * namespace through the same safe-apply contract as the CLI. README "Programmatic API" shows it
 * at work; docs/architecture.md says where each part lives.
 *
 * Everything here is the CLI's own code, not a second path: the commands call these functions.
 */

// Errors: every failure a caller can cause is an EgressguardError with a stable code and a hint.
export { EgressguardError, isEgressguardError, VERSION, type ErrorCode } from './core/index.js';

// Policy: YAML text or a file → a validated Policy, or issues with line and column.
export {
  formatIssue,
  hasErrors,
  loadPolicy,
  parsePolicy,
  policyJsonSchema,
  type ParseResult,
  type Policy,
  type PolicyIssue,
} from './policy/index.js';

// Facts: what a host is (OS, interfaces, routes, labels), from a file or read live.
export { gatherFacts, parseHostFacts, readHostFacts, type HostFacts } from './facts/index.js';

// IR: the host-independent lowering, binding to one host, and the reference evaluator.
export {
  bindHost,
  evaluatePacket,
  lowerPolicy,
  type Explanation,
  type HostIR,
  type Packet,
  type PacketArguments,
  type PolicyIR,
} from './ir/index.js';

// Backends: the registry of firewalls egressguard compiles to, and the seam each implements.
export {
  registry,
  type Artifact,
  type Backend,
  type BackendOptions,
  type BackendRegistry,
  type LiveState,
  type PlanResult,
} from './backends/index.js';

// Host: a policy prepared for one host, and the plan/apply of it on a target.
export {
  applyPrepared,
  compilePolicy,
  createHostTarget,
  explainPacket,
  planPrepared,
  preparePolicy,
  type HostTarget,
  type HostTargetInput,
  type PacketExplanation,
  type Prepared,
} from './host/index.js';
export type { ApplyReport } from './apply/index.js';
