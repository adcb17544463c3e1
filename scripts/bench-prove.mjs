#!/usr/bin/env node
// Benchmark of `prove --lab` on the linux-vpn-gateway example, in its own lab of
// network namespaces (never the root namespace):
//  1. reapply under traffic: the median in-process reapply (target <= 150 ms on 2 cores under the
//     scenario's traffic), with the median of each step (lock, read live, stage sets, swap,
//     routing, read back, state write);
//  2. recovery: how long the resident mode takes to re-converge after each fault is undone
//     (target: within 2 s; the tests only check a generous bound);
//  3. false results: the example is correct, so every run that is not proven is a false one,
//     split into enforcement reported failed (a false failure) and measurements the lab could not
//     take (target: 0 of either), beside `--busy N` processes that spin on the CPU (`--busy 2`
//     on 2 cores: the loaded machine a proof must hold on).
// Usage: node scripts/bench-prove.mjs [--runs 3] [--reapplies 200] [--scenarios a,b] [--busy 0]
//        [--capture] [--out bench-out]
// --capture records every lab node's packets (prove --capture) and keeps them, in
// bench-out/prove-captures/run-N/, for each run that is not proven.
// Needs root and a build (npm run build). Results in bench-out/prove.json.
import { spawn, spawnSync } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { loadavg, tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';

const repo = fileURLToPath(new URL('..', import.meta.url));
const bin = join(repo, 'bin/egressguard.js');
const policy = join(repo, 'testdata/policies/valid/linux-vpn-gateway/policy.yaml');
if (!existsSync(join(repo, 'dist/bundle/egressguard.cjs'))) {
  // Without it every run would fail alike and read as 20 false failures.
  console.error('bench-prove: the CLI is not built: run `npm run build` first');
  process.exit(2);
}
const args = process.argv.slice(2);
const option = (name, fallback) => {
  const i = args.indexOf(name);
  return i === -1 ? fallback : args[i + 1];
};
const runs = Number(option('--runs', '3'));
const reapplies = option('--reapplies', '200');
const scenarioIds = option('--scenarios', undefined);
const outDir = option('--out', join(repo, 'bench-out'));
const busy = Number(option('--busy', '0'));
const capture = args.includes('--capture');
const median = (xs) => {
  const sorted = [...xs].sort((a, b) => a - b);
  const mid = Math.floor(sorted.length / 2);
  return sorted.length % 2 === 1 ? sorted[mid] : (sorted[mid - 1] + sorted[mid]) / 2;
};

// The load: processes that only spin, stopped by pid when the runs end (or this script does).
const spinners = Array.from({ length: busy }, () =>
  spawn('sh', ['-c', 'while :; do :; done'], { stdio: 'ignore' }),
);
const stopSpinners = () => {
  for (const child of spinners) if (child.exitCode === null) child.kill('SIGKILL');
};
process.on('exit', stopSpinners);
for (const signal of ['SIGINT', 'SIGTERM']) {
  process.on(signal, () => {
    stopSpinners();
    process.exit(130);
  });
}

/** What made a run not proven, one line each: failed probes, flows, findings; unmeasured ones. */
function reasonsOf(report) {
  const failed = [];
  const unmeasured = [];
  for (const s of report.scenarios) {
    if (s.status === 'error') failed.push(`${s.id}: error: ${s.reason}`);
    for (const j of s.judgements) {
      const where = `${s.id}/${j.phase}: ${j.key}`;
      if (j.outcome === 'failed') {
        failed.push(
          `${where}: ${j.oracles
            .filter((o) => !o.agrees)
            .map((o) => `${o.oracle}: ${o.detail}`)
            .join('; ')}`,
        );
      } else if (j.outcome === 'unmeasured') {
        unmeasured.push(`${where}: ${j.unmeasured}`);
      }
    }
    for (const st of s.streams) {
      if (st.outcome === 'failed')
        failed.push(`${s.id}: flow ${st.what}: lost ${st.lost}, leaked ${st.leaked}`);
      else if (st.outcome === 'unmeasured')
        unmeasured.push(`${s.id}: flow ${st.what}: ${st.unmeasured}`);
    }
    for (const f of s.findings) {
      (f.severity === 'unmeasured' ? unmeasured : failed).push(
        `${s.id}: ${f.severity}: ${f.message}`,
      );
    }
  }
  return { failed, unmeasured };
}

const work = mkdtempSync(join(tmpdir(), 'eg-bench-prove-'));
const results = [];
try {
  for (let run = 1; run <= runs; run++) {
    const evidence = join(work, `proof-${run}.json`);
    const captures = join(outDir, 'prove-captures', `run-${run}`);
    const load = loadavg()[0];
    const started = performance.now();
    const proved = spawnSync(
      process.execPath,
      [
        bin,
        'prove',
        policy,
        '--lab',
        '--json',
        evidence,
        '--reapplies',
        reapplies,
        ...(scenarioIds === undefined ? [] : ['--scenarios', scenarioIds]),
        ...(capture ? ['--capture', captures] : []),
      ],
      {
        env: { ...process.env, EGRESSGUARD_ROOTNS_GUARD: '1' },
        stdio: ['ignore', 'ignore', 'pipe'],
        encoding: 'utf8',
        maxBuffer: 1 << 26,
      },
    );
    const wallMs = Math.round(performance.now() - started);
    let report;
    try {
      report = JSON.parse(readFileSync(evidence, 'utf8'));
    } catch {
      // No evidence: prove itself failed (a runtime error); a false result like any other.
      const why = proved.stderr.trim().split('\n').slice(-3).join(' ');
      results.push({
        run,
        loadBefore: Number(load.toFixed(2)),
        wallMs,
        exitCode: proved.status,
        outcome: 'error',
        failed: [`no evidence: ${why}`],
        unmeasured: [],
      });
      console.log(
        `run ${run}: load ${load.toFixed(2)}, exit ${proved.status}, no evidence: ${why}`,
      );
      continue;
    }
    if (report.outcome === 'proven') rmSync(captures, { recursive: true, force: true });
    const byId = new Map(report.scenarios.map((s) => [s.id, s]));
    const reapply = byId.get('reapply-under-traffic')?.metrics ?? {};
    const steps = Object.fromEntries(
      Object.entries(reapply)
        .filter(([k]) => k.startsWith('step ') && k.endsWith(' medianMs'))
        .map(([k, v]) => [k.slice(5, -9), v]),
    );
    const recovery = Object.fromEntries(
      report.scenarios
        .filter((s) => typeof s.metrics?.recoveryMs === 'number')
        .map((s) => [s.id, s.metrics.recoveryMs]),
    );
    results.push({
      run,
      loadBefore: Number(load.toFixed(2)),
      wallMs,
      exitCode: proved.status,
      outcome: report.outcome,
      ...reasonsOf(report),
      reapplies: reapply.reapplies,
      reapplyMedianMs: reapply.reapplyMedianMs,
      reapplyMaxMs: reapply.reapplyMaxMs,
      steps,
      recoveryMs: recovery,
    });
    const last = results.at(-1);
    console.log(
      `run ${run}: load ${last.loadBefore}, ${(wallMs / 1000).toFixed(1)} s, ${last.outcome} (exit ${last.exitCode}), reapply median ${last.reapplyMedianMs} ms (max ${last.reapplyMaxMs}), recovery max ${Math.max(...Object.values(recovery))} ms`,
    );
    for (const line of [...last.failed, ...last.unmeasured]) console.log(`  ${line.slice(0, 400)}`);
  }
} finally {
  stopSpinners();
  rmSync(work, { recursive: true, force: true });
}

const stepNames = [...new Set(results.flatMap((r) => Object.keys(r.steps ?? {})))];
const scenarios = [...new Set(results.flatMap((r) => Object.keys(r.recoveryMs ?? {})))];
const measured = results.filter((r) => r.steps !== undefined);
const summary = {
  runs,
  busy,
  loadBefore: results.map((r) => r.loadBefore),
  proven: results.filter((r) => r.outcome === 'proven').length,
  falseFailures: results.filter((r) => r.outcome === 'failed' || r.outcome === 'error').length,
  unmeasuredRuns: results.filter((r) => r.outcome === 'unmeasured').length,
  reapplyMedianMs: median(measured.map((r) => r.reapplyMedianMs)),
  steps: Object.fromEntries(
    stepNames.map((s) => [s, median(measured.map((r) => r.steps[s] ?? 0))]),
  ),
  recoveryMedianMs: Object.fromEntries(
    scenarios.map((s) => [
      s,
      median(measured.map((r) => r.recoveryMs[s]).filter((x) => x !== undefined)),
    ]),
  ),
  recoveryMaxMs: Math.max(...measured.flatMap((r) => Object.values(r.recoveryMs))),
};
console.log('\nreapply median (of run medians): %d ms (target <= 150 ms)', summary.reapplyMedianMs);
for (const [step, ms] of Object.entries(summary.steps))
  console.log(`  ${step.padEnd(16)} ${ms} ms`);
console.log('recovery after each fault (median of runs):');
for (const [id, ms] of Object.entries(summary.recoveryMedianMs))
  console.log(`  ${id.padEnd(20)} ${ms} ms`);
console.log('recovery max over all runs: %d ms (target <= 2000 ms)', summary.recoveryMaxMs);
console.log(
  `false results beside ${busy} busy processes: ${summary.falseFailures} of ${runs} runs reported enforcement failed, ${summary.unmeasuredRuns} could not measure everything (target 0 and 0); ${summary.proven} proven`,
);
mkdirSync(outDir, { recursive: true });
writeFileSync(join(outDir, 'prove.json'), JSON.stringify({ summary, results }, null, 2));
