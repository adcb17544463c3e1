import { describe, expect, it } from 'vitest';
import { createAgentMetrics } from './agent-metrics.js';

describe('createAgentMetrics', () => {
  it('exports the applied hash, apply durations, the last success, drift, its repairs, watcher restarts and tunnels', async () => {
    const metrics = createAgentMetrics();
    metrics.recordAttempt({ hash: 'a'.repeat(64), ok: false, durationMs: 40, at: 1_000 });
    metrics.recordAttempt({ hash: 'a'.repeat(64), ok: true, durationMs: 120, at: 2_000 });
    metrics.recordState('a'.repeat(64), {
      agentVersion: 'x',
      desiredHash: 'a'.repeat(64),
      appliedHash: 'a'.repeat(64),
      liveHash: null,
      drift: { detectedHash: null, repaired: false, message: 'table gone' },
      tunnels: [{ name: 'tun0', up: false }],
    });
    metrics.recordReachable(true);
    metrics.recordRepair('table', 'watcher');
    metrics.recordRepair('table', 'watcher');
    metrics.recordRepair('generation', 'round');
    metrics.recordWatcherRestart();
    const text = await metrics.registry.metrics();
    expect(text).toContain(`egressguard_agent_applied_hash_info{hash="${'a'.repeat(64)}"} 1`);
    expect(text).toContain('egressguard_agent_apply_duration_seconds_count{outcome="applied"} 1');
    expect(text).toContain('egressguard_agent_apply_duration_seconds_count{outcome="failed"} 1');
    expect(text).toContain('egressguard_agent_last_successful_apply_timestamp_seconds 2');
    expect(text).toContain('egressguard_agent_apply_failures_total 1');
    expect(text).toContain('egressguard_agent_drift 1');
    expect(text).toContain('egressguard_agent_tunnel_up{tunnel="tun0"} 0');
    expect(text).toContain('egressguard_agent_controller_reachable 1');
    expect(text).toContain('egressguard_agent_drift_repairs_total{what="table",by="watcher"} 2');
    expect(text).toContain('egressguard_agent_drift_repairs_total{what="generation",by="round"} 1');
    expect(text).toContain('egressguard_agent_watcher_restarts_total 1');
  });
});
