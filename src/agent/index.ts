export type {
  ApplyOutcome,
  HostEngine,
  LiveStatus,
  PrepareOutcome,
  PreparedGeneration,
} from './host-engine.js';
export { createRecordingEngine, type RecordingEngine } from './recording-engine.js';
export { Reconciler, type AttemptRecord, type ReconcilerMemory } from './reconciler.js';
export { runAgent, systemAgentClock, type AgentClock, type AgentOptions } from './run-agent.js';
export { createAgentMetrics, type AgentMetrics } from './agent-metrics.js';
