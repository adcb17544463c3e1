import { spawnSync } from 'node:child_process';
import { copyFileSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, describe, expect, it } from 'vitest';
import { parse } from 'yaml';
import { GATEWAY_METRICS } from '../../src/backends/cilium/gateway-metrics.js';

// The shipped alert rules for the Cilium egress gateway, checked with Debian's promtool
// (package prometheus, installed by scripts/setup.sh).
const folder = fileURLToPath(new URL('../../deploy/prometheus/', import.meta.url));
const RULES = 'cilium-gateway.rules.yml';
const TESTS = 'cilium-gateway.rules.test.yml';

function promtool(args: string[], cwd: string): { status: number | null; output: string } {
  const result = spawnSync('promtool', args, { cwd, encoding: 'utf8' });
  if (result.error !== undefined) {
    throw new Error(
      `Cannot run promtool (install it with scripts/setup.sh): ${result.error.message}`,
    );
  }
  return { status: result.status, output: `${result.stdout}${result.stderr}` };
}

interface RuleFile {
  groups: { rules: { alert?: string; expr: string }[] }[];
}
interface TestFile {
  tests: { alert_rule_test?: { alertname: string; exp_alerts: unknown[] }[] }[];
}

const rules = parse(readFileSync(join(folder, RULES), 'utf8')) as RuleFile;
const alerts = rules.groups.flatMap((g) => g.rules).filter((r) => r.alert !== undefined);
const scratch = mkdtempSync(join(tmpdir(), 'promtool-'));
afterAll(() => {
  rmSync(scratch, { recursive: true, force: true });
});

describe('deploy/prometheus/cilium-gateway.rules.yml', () => {
  it('passes promtool check rules', () => {
    const result = promtool(['check', 'rules', RULES], folder);
    expect(result.output).toContain(`SUCCESS: ${String(alerts.length)} rules found`);
    expect(result.status).toBe(0);
  });

  it('passes promtool test rules', () => {
    const result = promtool(['test', 'rules', TESTS], folder);
    expect(result.output).toContain('SUCCESS');
    expect(result.status).toBe(0);
  });

  it('alerts when no node carries the gateway label', () => {
    const rule = alerts.find((a) => a.alert === 'EgressguardNoGatewayNode');
    expect(rule?.expr).toContain(GATEWAY_METRICS.labelPresent.name);
  });

  it('has a unit test where each alert fires and one where it does not', () => {
    const cases = (parse(readFileSync(join(folder, TESTS), 'utf8')) as TestFile).tests.flatMap(
      (t) => t.alert_rule_test ?? [],
    );
    for (const { alert } of alerts) {
      const mine = cases.filter((c) => c.alertname === alert);
      expect(
        mine.some((c) => c.exp_alerts.length > 0),
        `${String(alert)} fires`,
      ).toBe(true);
      expect(
        mine.some((c) => c.exp_alerts.length === 0),
        `${String(alert)} stays quiet`,
      ).toBe(true);
    }
  });

  it('uses only the metrics the gateway resident exports', () => {
    const known = new Set<string>(Object.values(GATEWAY_METRICS).map((m) => m.name));
    const used = new Set(alerts.flatMap((a) => a.expr.match(/egressguard_[a-z_]+/g) ?? []));
    expect([...used].filter((name) => !known.has(name))).toEqual([]);
    // Every metric but two for dashboards: the re-apply counter, whose series exists only after
    // its first increment, and the exit's last-seen time (the alert reads the gauge beside it).
    expect([...known].filter((name) => !used.has(name))).toEqual([
      GATEWAY_METRICS.policyReapplied.name,
      GATEWAY_METRICS.exitLastSeen.name,
    ]);
  });

  it('alerts on a label back without a re-apply by time, which exists before the first re-apply', () => {
    const rule = alerts.find((a) => a.alert === 'EgressguardEgressPolicyNotReapplied');
    expect(rule?.expr).toContain(GATEWAY_METRICS.lastReapplied.name);
    expect(rule?.expr).not.toContain(GATEWAY_METRICS.policyReapplied.name);
  });

  it("shows the field report's three forms alerting within 5 minutes and at 82, and a healthy pair of clusters silent", () => {
    interface Case {
      input_series: { series: string }[];
      alert_rule_test?: {
        eval_time: string;
        alertname: string;
        exp_alerts: { exp_labels: Record<string, string> }[];
      }[];
    }
    const cases = (parse(readFileSync(join(folder, TESTS), 'utf8')) as { tests: Case[] }).tests;
    const twoClusters = cases.filter(
      (c) =>
        c.input_series.some((s) => s.series.includes('cluster="dev"')) &&
        c.input_series.some((s) => s.series.includes('cluster="prod"')) &&
        c.input_series.some((s) => s.series.startsWith('up{')),
    );
    const healthy = twoClusters.filter((c) =>
      (c.alert_rule_test ?? []).every((t) => t.exp_alerts.length === 0),
    );
    expect(healthy).toHaveLength(1);
    for (const time of ['5m', '82m']) {
      expect(
        new Set(
          (healthy[0]?.alert_rule_test ?? [])
            .filter((t) => t.eval_time === time)
            .map((t) => t.alertname),
        ),
      ).toEqual(new Set(alerts.map((a) => a.alert)));
    }
    const failing = twoClusters.filter((c) => !healthy.includes(c));
    expect(failing).toHaveLength(3);
    for (const c of failing) {
      for (const time of ['5m', '82m']) {
        const critical = (c.alert_rule_test ?? [])
          .filter((t) => t.eval_time === time)
          .flatMap((t) => t.exp_alerts)
          .filter((a) => a.exp_labels['severity'] === 'critical');
        expect(critical.length, time).toBeGreaterThan(0);
        for (const a of critical) expect(a.exp_labels['cluster']).toBe('dev');
      }
    }
  });

  it('has unit tests that fail when a rule is wrong (a 10-minute wait instead of 3)', () => {
    const broken = readFileSync(join(folder, RULES), 'utf8').replace('for: 3m', 'for: 10m');
    writeFileSync(join(scratch, RULES), broken);
    copyFileSync(join(folder, TESTS), join(scratch, TESTS));
    const result = promtool(['test', 'rules', TESTS], scratch);
    expect(result.status).not.toBe(0);
    expect(result.output).toContain('EgressguardNoGatewayNode');
  });
});
