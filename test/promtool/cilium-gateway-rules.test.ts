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
    // Every metric but the re-apply counter, whose series exists only after its first increment.
    expect([...known].filter((name) => !used.has(name))).toEqual([
      GATEWAY_METRICS.policyReapplied.name,
    ]);
  });

  it('alerts on a label back without a re-apply by time, which exists before the first re-apply', () => {
    const rule = alerts.find((a) => a.alert === 'EgressguardEgressPolicyNotReapplied');
    expect(rule?.expr).toContain(GATEWAY_METRICS.lastReapplied.name);
    expect(rule?.expr).not.toContain(GATEWAY_METRICS.policyReapplied.name);
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
