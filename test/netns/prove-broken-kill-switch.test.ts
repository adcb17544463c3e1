import { describe, expect, it } from 'vitest';
import { runProve } from './support/prove-cli.js';

// A deliberately broken build (the test fault compile.disable-kill-switch: tables without the
// kill-switch drop) with steering intact. Every tunnel fault still passes behind the blackhole;
// only the layer-alone proof can see it, and prove must fail naming the layer and requirement.

describe('prove --lab against a build whose kill switch never fires', () => {
  it('fails through the layer-alone scenario, naming layer nftables and R-VPN-01', async () => {
    const run = await runProve(['--scenarios', 'layer-nftables,tunnel-down', '--strict'], {
      faults: 'compile.disable-kill-switch=on',
    });
    expect(run.exitCode).toBe(1);
    const report = run.report;
    if (report === undefined) throw new Error(`no evidence: ${run.stderr}`);

    // The steady state and the tunnel fault cannot tell: the blackhole drops first.
    const byId = Object.fromEntries(report.scenarios.map((s) => [s.id, s]));
    expect(byId['steady-state']?.status).toBe('passed');
    expect(byId['tunnel-down']?.status).toBe('passed');

    const alone = byId['layer-nftables'];
    expect(alone?.status).toBe('failed');
    const failed = alone?.judgements.filter((j) => !j.passed) ?? [];
    expect(failed.length).toBeGreaterThanOrEqual(3);
    // Both kill-switch classes leak: the workloads' (R-VPN-01) and the host resolver's (R-VPN-03).
    const requirementOf: Record<string, string> = { vpn: 'R-VPN-01', 'host-vpn': 'R-VPN-03' };
    expect([...new Set(failed.map((j) => j.className))].sort()).toEqual(['host-vpn', 'vpn']);
    for (const j of failed) {
      expect(j.failingLayers).toEqual(['nftables']);
      expect(j.origins.map((o) => o.requirement)).toContain(requirementOf[j.className]);
      expect(j.counts.find((c) => c.role === 'uplink')?.raw ?? 0).toBeGreaterThan(0);
      expect(j.oracles.find((o) => o.oracle === 'enforcer')?.detail).toContain(
        `counter ${j.className}/kill-switch +0`,
      );
    }
    expect(report.coverage.find((c) => c.id === 'R-VPN-01')?.level).not.toBe('L3');
    expect(report.strictProblems.join('\n')).toMatch(/R-VPN-01: it is safety-critical/);

    // The summary says it in words: the layer, the requirement, the leak.
    expect(run.stdout).toMatch(/nftables: did NOT hold alone in layer-nftables/);
    expect(run.stdout).toMatch(
      /layer-nftables\/routing removed: R-VPN-01 "10\.10\.0\.5 > 203\.0\.113\.7 tcp\/443 \(tunnel down\)": layer nftables did not hold/,
    );
    expect(run.junit).toMatch(
      /<failure message="[^"]*layer nftables did not hold[^"]*" type="nftables"\/>/,
    );
  }, 300_000);
});
