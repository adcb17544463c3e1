import { Counter, Gauge, Histogram, Registry } from 'prom-client';
import type { StatusReport } from '../fleet/index.js';
import type { AttemptRecord } from './reconciler.js';

/** The agent's own metrics (`egressguard agent --metrics-listen`). */
export interface AgentMetrics {
  readonly registry: Registry;
  recordAttempt(attempt: AttemptRecord): void;
  recordState(appliedHash: string | null, report: StatusReport | undefined): void;
  recordReachable(reachable: boolean): void;
  /** A repair of drift: by the watchers between rounds, or by a round applying the generation again. */
  recordRepair(what: 'table' | 'routes' | 'generation', by: 'watcher' | 'round'): void;
  /** The watchers failed and are started again. */
  recordWatcherRestart(): void;
}

export function createAgentMetrics(): AgentMetrics {
  const registry = new Registry();
  const registers = [registry];
  const appliedInfo = new Gauge({
    name: 'egressguard_agent_applied_hash_info',
    help: 'The host config hash applied on this host (value 1)',
    labelNames: ['hash'] as const,
    registers,
  });
  const duration = new Histogram({
    name: 'egressguard_agent_apply_duration_seconds',
    help: 'How long an apply attempt took, from prepare to read-back',
    labelNames: ['outcome'] as const,
    buckets: [0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30],
    registers,
  });
  const lastSuccess = new Gauge({
    name: 'egressguard_agent_last_successful_apply_timestamp_seconds',
    help: 'When an apply last succeeded',
    registers,
  });
  const failures = new Counter({
    name: 'egressguard_agent_apply_failures_total',
    help: 'Failed apply attempts',
    registers,
  });
  const drift = new Gauge({
    name: 'egressguard_agent_drift',
    help: '1 while the live state differs from the applied one',
    registers,
  });
  const repairs = new Counter({
    name: 'egressguard_agent_drift_repairs_total',
    help: 'Repairs of the live state back to the applied generation',
    labelNames: ['what', 'by'] as const,
    registers,
  });
  const watcherRestarts = new Counter({
    name: 'egressguard_agent_watcher_restarts_total',
    help: "Restarts of the watchers (the resident mode's, between polls) after they failed",
    registers,
  });
  const tunnelUp = new Gauge({
    name: 'egressguard_agent_tunnel_up',
    help: '1 when the tunnel is up',
    labelNames: ['tunnel'] as const,
    registers,
  });
  const reachable = new Gauge({
    name: 'egressguard_agent_controller_reachable',
    help: '1 when the last request to the controller succeeded',
    registers,
  });
  return {
    registry,
    recordAttempt: (attempt) => {
      duration.observe({ outcome: attempt.ok ? 'applied' : 'failed' }, attempt.durationMs / 1000);
      if (attempt.ok) lastSuccess.set(attempt.at / 1000);
      else failures.inc();
    },
    recordState: (appliedHash, report) => {
      appliedInfo.reset();
      if (appliedHash !== null) appliedInfo.set({ hash: appliedHash }, 1);
      if (report === undefined) return;
      drift.set(report.drift !== undefined && !report.drift.repaired ? 1 : 0);
      for (const tunnel of report.tunnels ?? [])
        tunnelUp.set({ tunnel: tunnel.name }, tunnel.up ? 1 : 0);
    },
    recordReachable: (ok) => {
      reachable.set(ok ? 1 : 0);
    },
    recordRepair: (what, by) => {
      repairs.inc({ what, by });
    },
    recordWatcherRestart: () => {
      watcherRestarts.inc();
    },
  };
}
