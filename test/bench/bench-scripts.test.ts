import { existsSync, mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { execa } from 'execa';
import { afterAll, describe, expect, it } from 'vitest';

// Every benchmark script under scripts/ runs here in a small smoke mode (the smallest sizes its
// options allow, one run), so that none can rot between the times someone measures with it: a
// script that crashes, or writes results without the numbers its docs quote, fails the suite.
// The figures themselves are not judged (docs/benchmarks.md holds the measured ones). Needs root
// and a build (`npm run build`): the scripts run the built CLI, in namespaces of their own.

const REPO = fileURLToPath(new URL('../..', import.meta.url));
const out = mkdtempSync(join(tmpdir(), 'egtest-bench-'));

afterAll(() => {
  rmSync(out, { recursive: true, force: true });
});

/** Each script's smoke arguments, and what its results file must hold. */
const SMOKE: Record<string, { args: string[]; check(dir: string): void }> = {
  'bench-apply.mjs': {
    args: ['--sizes', '200', '--drift', '400', '--runs', '1'],
    check(dir) {
      const r = readJson(dir, 'apply.json') as {
        apply: { kind: string; applyS: number; floorS: number }[];
        drift: { statusMs: number; condition: string };
      };
      expect(r.apply.map((a) => a.kind)).toEqual(['fresh', 'replace', 'edit']);
      for (const a of r.apply) expect(a.applyS).toBeGreaterThan(0);
      expect(r.drift.condition).toBe('InSync');
      expect(r.drift.statusMs).toBeGreaterThan(0);
    },
  },
  'bench-check.mjs': {
    args: ['--sizes', '500', '--runs', '1', '--aclgen-modes', 'default', '--aclgen-max', '500'],
    check(dir) {
      const r = readJson(dir, 'bench-check.json') as {
        rows: { n: number; egressguard: { ok: number; runs: number } }[];
      };
      expect(r.rows).toHaveLength(1);
      expect(r.rows[0]?.egressguard).toMatchObject({ ok: 1, runs: 1 });
    },
  },
  'bench-fleet.mjs': {
    args: [
      ...['--agents', '3', '--stores', 'sqlite,postgres', '--rounds', '1'],
      ...['--poll-seconds', '1', '--window-seconds', '2'],
    ],
    check(dir) {
      const r = readJson(dir, 'fleet.json') as {
        results: { store: string; convergence: { p95: number }[] }[];
      };
      expect(r.results.map((s) => s.store)).toEqual(['sqlite', 'postgres']);
      for (const s of r.results) expect(s.convergence[0]?.p95).toBeGreaterThan(0);
    },
  },
  'bench-gateway-label.mjs': {
    args: ['--rounds', '1'],
    check(dir) {
      const r = readJson(dir, 'gateway-label.json') as {
        removedMs: Record<string, { n: number }>;
        restoredAndReappliedMs: Record<string, { n: number }>;
      };
      expect(Object.keys(r.removedMs).sort()).toEqual(['deleted', 'down', 'no carrier']);
      for (const s of Object.values(r.removedMs)) expect(s.n).toBe(1);
      for (const s of Object.values(r.restoredAndReappliedMs)) expect(s.n).toBe(1);
    },
  },
  'bench-prove.mjs': {
    args: [
      ...['--runs', '1', '--reapplies', '2', '--scenarios', 'tunnel-down,reapply-under-traffic'],
      '--capture',
    ],
    check(dir) {
      const r = readJson(dir, 'prove.json') as {
        summary: { runs: number; falseFailures: number; unmeasuredRuns: number };
        results: {
          reapplies: number;
          reapplyMedianMs: number;
          recoveryMs: object;
          outcome: string;
        }[];
      };
      expect(r.summary).toMatchObject({ runs: 1 });
      expect(['proven', 'failed', 'unmeasured']).toContain(r.results[0]?.outcome);
      expect(r.results[0]).toMatchObject({ reapplies: 2 });
      expect(r.results[0]?.reapplyMedianMs).toBeGreaterThan(0);
      expect(Object.keys(r.results[0]?.recoveryMs ?? {})).toContain('tunnel-down');
      // The packets of a run are kept only when it is not proven.
      const kept = existsSync(join(dir, 'prove-captures', 'run-1'))
        ? readdirSync(join(dir, 'prove-captures', 'run-1'))
        : [];
      if (r.results[0]?.outcome === 'proven') expect(kept).toEqual([]);
      else expect(kept).toContain('host.pcap');
    },
  },
};

function readJson(dir: string, file: string): unknown {
  return JSON.parse(readFileSync(join(dir, file), 'utf8'));
}

describe('benchmark scripts in smoke mode', () => {
  it('covers every benchmark script', () => {
    const scripts = readdirSync(join(REPO, 'scripts')).filter((f) => /^bench-.*\.mjs$/.test(f));
    expect(scripts.sort()).toEqual(Object.keys(SMOKE).sort());
  });

  // Concurrent: the file takes as long as its slowest script, not their sum. The timeout is a
  // bound on a hang, not a target: at load 15 on 2 cores the slowest took about 2 minutes.
  it.concurrent.each(Object.keys(SMOKE))(
    '%s runs and writes its results',
    { timeout: 600_000 },
    async (script) => {
      const smoke = SMOKE[script];
      if (smoke === undefined) throw new Error(`no smoke mode for ${script}`);
      const dir = join(out, script);
      const result = await execa(
        process.execPath,
        [join(REPO, 'scripts', script), ...smoke.args, '--out', dir],
        { cwd: REPO, reject: false, env: { EGRESSGUARD_ROOTNS_GUARD: '1', NO_COLOR: '1' } },
      );
      expect(result.exitCode, `${script} failed: ${result.stderr.slice(-2000)}`).toBe(0);
      smoke.check(dir);
    },
  );
});
