export type {
  ApplyOutcome,
  HostEngine,
  LiveStatus,
  PrepareOutcome,
  PreparedGeneration,
} from './host-engine.js';
export {
  createBundleHasher,
  createRecordingEngine,
  type RecordingEngine,
} from './recording-engine.js';
export {
  createFirewallEngine,
  type FirewallEngineOptions,
  type FirewallGeneration,
} from './firewall-engine.js';
export { Reconciler, type AttemptRecord, type ReconcilerMemory } from './reconciler.js';
export { runAgent, type AgentEnd, type AgentOptions } from './run-agent.js';
export { systemAgentClock, type AgentClock } from './agent-clock.js';
export { createAgentMetrics, type AgentMetrics } from './agent-metrics.js';
export {
  AGENT_UNIT_KINDS,
  renderAgentUnit,
  type AgentUnitInput,
  type AgentUnitKind,
} from './agent-units.js';
