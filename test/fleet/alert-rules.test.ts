import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { execa } from 'execa';
import { describe, expect, it } from 'vitest';
import { parse } from 'yaml';
import { createAgentMetrics } from '../../src/agent/index.js';
import {
  Controller,
  createPolicyDocumentBinder,
  hashPolicyBundle,
  openStore,
} from '../../src/fleet/index.js';
import { createServerMetrics } from '../../src/server/server-metrics.js';
import { REPO } from '../e2e-cli/run-cli.js';

// Debian's prometheus package installs it here (scripts/setup.sh).
const PROMTOOL = '/usr/bin/promtool';
const DIR = join(REPO, 'deploy/prometheus');
const RULES = join(DIR, 'fleet.rules.yml');
const TESTS = join(DIR, 'fleet.rules.test.yml');

interface RuleFile {
  groups: { rules: { alert: string; expr: string }[] }[];
}
interface RuleTests {
  tests: { alert_rule_test: { alertname: string; exp_alerts: unknown[] }[] }[];
}

/** The shipped alert rules, checked by Debian's promtool. */
describe('Prometheus alert rules (deploy/prometheus)', () => {
  const rules = (parse(readFileSync(RULES, 'utf8')) as RuleFile).groups.flatMap((g) => g.rules);

  it('pass promtool check rules', async () => {
    const result = await execa(PROMTOOL, ['check', 'rules', RULES], { reject: false });
    expect(result.exitCode, result.stderr).toBe(0);
    expect(result.stdout).toContain(`SUCCESS: ${rules.length} rules found`);
  });

  it('pass promtool test rules, with each alert shown to fire and not to fire', async () => {
    const result = await execa(PROMTOOL, ['test', 'rules', TESTS], { cwd: DIR, reject: false });
    expect(result.exitCode, result.stdout + result.stderr).toBe(0);
    const cases = (parse(readFileSync(TESTS, 'utf8')) as RuleTests).tests.flatMap(
      (t) => t.alert_rule_test,
    );
    for (const { alert } of rules) {
      const mine = cases.filter((c) => c.alertname === alert);
      expect(
        mine.some((c) => c.exp_alerts.length > 0),
        `${alert} fires`,
      ).toBe(true);
      expect(
        mine.some((c) => c.exp_alerts.length === 0),
        `${alert} stays quiet`,
      ).toBe(true);
    }
    expect(rules.map((r) => r.alert)).toEqual(
      expect.arrayContaining([
        'EgressguardTunnelDown',
        'EgressguardHostSilent',
        'EgressguardDrift',
        'EgressguardRolloutStalled',
        'EgressguardHostDegradedTooLong',
      ]),
    );
  });

  it('fail promtool when an expected alert does not fire (the check can fail)', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'egressguard-rules-'));
    try {
      writeFileSync(
        join(dir, 'fleet.rules.yml'),
        readFileSync(RULES, 'utf8').replace('for: 30m', 'for: 60m'),
      );
      writeFileSync(join(dir, 'fleet.rules.test.yml'), readFileSync(TESTS, 'utf8'));
      const result = await execa(PROMTOOL, ['test', 'rules', 'fleet.rules.test.yml'], {
        cwd: dir,
        reject: false,
      });
      expect(result.exitCode).not.toBe(0);
      expect(result.stdout + result.stderr).toContain('EgressguardHostDegradedTooLong');
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  it('use only metrics the controller and the agent export', async () => {
    const store = await openStore('sqlite::memory:');
    try {
      const controller = new Controller({
        store,
        binder: createPolicyDocumentBinder(hashPolicyBundle),
        caPin: null,
      });
      const exported = new Set([
        ...(await createServerMetrics(controller).registry.getMetricsAsJSON()).map((m) => m.name),
        ...(await createAgentMetrics().registry.getMetricsAsJSON()).map((m) => m.name),
      ]);
      const used = new Set(rules.flatMap((r) => r.expr.match(/egressguard_[a-z_]+/g) ?? []));
      expect(used.size).toBeGreaterThan(4);
      for (const name of used) expect(exported, name).toContain(name);
    } finally {
      await store.close();
    }
  });
});
