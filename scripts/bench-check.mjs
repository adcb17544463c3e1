#!/usr/bin/env node
/**
 * Benchmark: `egressguard check` (validate, lower to the IR, evaluate probes) on a policy whose
 * blocklist file holds N pseudo-random IPv4 prefixes, side by side with Debian's python3-capirca
 * (`aclgen`, nftables target) on the same blocklist, as an equivalent Capirca policy. Whole CLI
 * processes, wall time and peak RSS, median of several runs, the tools interleaved run by run so
 * background load hits them alike; plus the phases inside one egressguard process.
 *
 * Usage: npm run build && npm run bench:check -- [options]
 *   --sizes 10000,100000,1000000   list sizes
 *   --runs 3                       runs per tool and size (the median is reported)
 *   --aclgen-max 100000            largest size given to aclgen (it needs minutes and 1 GiB at 1M)
 *   --aclgen-timeout 120           seconds before an aclgen run is killed
 *   --aclgen-modes default,optimize  aclgen as shipped, and with --optimize (merges prefixes,
 *                                  as egressguard does, so both produce the same prefix list)
 *   --seed 1  --keep (keep the generated inputs)  --out bench-out
 * Writes bench-out/bench-check.json and bench-out/bench-check.md; prints the Markdown tables.
 */
import { Buffer } from 'node:buffer';
import { spawn, spawnSync } from 'node:child_process';
import {
  copyFileSync,
  existsSync,
  mkdirSync,
  mkdtempSync,
  readFileSync,
  rmSync,
  writeFileSync,
} from 'node:fs';
import { cpus, loadavg, tmpdir, totalmem } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { performance } from 'node:perf_hooks';
import { clearTimeout, setTimeout } from 'node:timers';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';

const repo = resolve(dirname(fileURLToPath(import.meta.url)), '..');
const TIME = '/usr/bin/time';
const ACLGEN_MODES = { default: [], optimize: ['--optimize'] };

const { values: opts } = parseArgs({
  options: {
    sizes: { type: 'string', default: '10000,100000,1000000' },
    runs: { type: 'string', default: '3' },
    'aclgen-max': { type: 'string', default: '100000' },
    'aclgen-timeout': { type: 'string', default: '120' },
    'aclgen-modes': { type: 'string', default: 'default,optimize' },
    'egressguard-timeout': { type: 'string', default: '60' },
    seed: { type: 'string', default: '1' },
    out: { type: 'string', default: join(repo, 'bench-out') },
    keep: { type: 'boolean', default: false },
  },
});
const sizes = opts.sizes.split(',').map((s) => positiveInt(s, '--sizes'));
const runs = positiveInt(opts.runs, '--runs');
const aclgenMax = positiveInt(opts['aclgen-max'], '--aclgen-max');
const aclgenTimeoutS = positiveInt(opts['aclgen-timeout'], '--aclgen-timeout');
const egTimeoutS = positiveInt(opts['egressguard-timeout'], '--egressguard-timeout');
const seed = positiveInt(opts.seed, '--seed');
const aclgenModes = opts['aclgen-modes'].split(',').filter((m) => m !== '');
for (const mode of aclgenModes) {
  if (!(mode in ACLGEN_MODES)) fail(`Cannot use --aclgen-modes "${mode}": use default, optimize`);
}

function positiveInt(text, flag) {
  const n = Number(text);
  if (!Number.isInteger(n) || n < 1) {
    fail(`Cannot use ${flag} "${text}": expected a positive integer`);
  }
  return n;
}

function fail(message) {
  console.error(`bench-check: ${message}`);
  process.exit(2);
}

function log(message) {
  console.error(`bench-check: ${message}`);
}

// ---------------------------------------------------------------------------------------------
// Preconditions

const cli = join(repo, 'bin', 'egressguard.js');
if (!existsSync(join(repo, 'dist', 'cli', 'main.js'))) {
  fail('Cannot find dist/cli/main.js: run `npm run build` first');
}
ensureGnuTime();
const aclgen = spawnSync('sh', ['-c', 'command -v aclgen'], { encoding: 'utf8' }).stdout.trim();
if (aclgen === '') log('aclgen not found (apt-get install -y python3-capirca): egressguard only');

/** GNU time reports the child's peak RSS (%M); install Debian's `time` when we can. */
function ensureGnuTime() {
  if (existsSync(TIME)) return;
  if (process.getuid?.() === 0 && spawnSync('sh', ['-c', 'command -v apt-get']).status === 0) {
    log('installing GNU time (apt-get install -y time)');
    const r = spawnSync('apt-get', ['install', '-y', '-q', 'time'], { stdio: 'inherit' });
    if (r.status === 0 && existsSync(TIME)) return;
  }
  fail(`Cannot find ${TIME}: install GNU time (Debian: apt-get install -y time)`);
}

// ---------------------------------------------------------------------------------------------
// Inputs: seeded pseudo-random prefixes, an egressguard policy and the equivalent Capirca policy

// core's seeded generator (mulberry32), from the build checked for above.
const { createRandom } = await import(join(repo, 'dist', 'core', 'index.js'));

// Public-looking first octets: no 0/8, 10/8, 100/8 (CGNAT), 127/8, 169/8, 172/8, 192/8, 198/8
// and 203/8 (the probes' and facts' documentation ranges), nothing in 224/3.
const FIRST_OCTETS = [];
for (let o = 1; o <= 223; o++) {
  if (![10, 100, 127, 169, 172, 192, 198, 203].includes(o)) FIRST_OCTETS.push(o);
}

/**
 * Blocklist-shaped lengths: about 64% /32, 25% /24, 10% /25–/31, 0.5% /16–/23 and a few /8–/15
 * (2 in 100k), so merging absorbs only a few percent of the entries, as in real feeds.
 */
function pickLength(r) {
  if (r < 0.00002) return 8 + Math.floor((r / 0.00002) * 8);
  if (r < 0.005) return 16 + Math.floor(((r - 0.00002) / 0.00498) * 8);
  if (r < 0.105) return 25 + Math.floor(((r - 0.005) / 0.1) * 7);
  if (r < 0.355) return 24;
  return 32;
}

function generatePrefixes(n, rand) {
  const out = new Array(n);
  for (let i = 0; i < n; i++) {
    const length = pickLength(rand());
    const first = FIRST_OCTETS[Math.floor(rand() * FIRST_OCTETS.length)];
    const rest = Math.floor(rand() * 16777216);
    const size = 2 ** (32 - length);
    const address = Math.floor((first * 16777216 + rest) / size) * size;
    out[i] =
      `${Math.floor(address / 16777216)}.${Math.floor(address / 65536) % 256}.` +
      `${Math.floor(address / 256) % 256}.${address % 256}/${length}`;
  }
  return out;
}

function writeInputs(dir, n) {
  const prefixes = generatePrefixes(n, createRandom(seed * 1000003 + n));
  const denied = prefixes[0].split('/')[0];

  const eg = join(dir, 'egressguard');
  mkdirSync(eg, { recursive: true });
  writeFileSync(
    join(eg, 'blocklist.txt'),
    `# ${n} pseudo-random IPv4 prefixes (seed ${seed}), one a line\n${prefixes.join('\n')}\n`,
  );
  writeFileSync(join(eg, 'policy.yaml'), egressguardPolicy(n, denied));
  copyFileSync(
    join(repo, 'testdata/policies/valid/linux-vpn-gateway/facts.json'),
    join(eg, 'facts.json'),
  );

  const cap = join(dir, 'capirca');
  for (const sub of ['pol', 'def']) mkdirSync(join(cap, sub), { recursive: true });
  writeFileSync(
    join(cap, 'def', 'NETWORK.net'),
    `# ${n} pseudo-random IPv4 prefixes (seed ${seed})\nBLOCKLIST = ${prefixes.join('\n            ')}\n`,
  );
  writeFileSync(join(cap, 'def', 'SERVICES.svc'), 'HTTPS = 443/tcp\n');
  writeFileSync(join(cap, 'pol', 'bench.pol'), capircaPolicy(n));
  return { eg, cap };
}

function egressguardPolicy(n, denied) {
  return `# bench-check: a class whose traffic may not reach ${n} blocklisted prefixes
apiVersion: egressguard/v1
kind: Policy
metadata:
  name: bench-blocklist-${n}

networks:
  blocklist:
    files: [blocklist.txt]

interfaces:
  uplink: default-route

classes:
  internet:
    ingress: [iwl0]
    sources: [10.10.1.0/24]
    via: uplink
    nat: masquerade
    rules:
      - { id: deny-blocklist, action: deny, to: blocklist }
      - { id: allow-https, action: allow, to: any, proto: tcp, ports: [443] }
    default: deny

requirements:
  - id: R-BENCH-01
    statement: Blocklisted destinations are denied, others reach HTTPS by the uplink
    probes:
      - { from: 10.10.1.5, to: ${denied}, proto: tcp, port: 443, expect: deny }
      - { from: 10.10.1.5, to: 203.0.113.7, proto: tcp, port: 443, expect: allow, via: eth0 }
`;
}

// Capirca's nftables generator accepts only the input and output hooks; "inet" is IPv4 only in
// Capirca's words (capirca/lib/nftables.py).
function capircaPolicy(n) {
  return `header {
  comment:: "bench-check: ${n} blocklisted prefixes"
  target:: nftables inet output
}

term deny-blocklist {
  destination-address:: BLOCKLIST
  action:: deny
}

term allow-https {
  protocol:: tcp
  destination-port:: HTTPS
  action:: accept
}
`;
}

// ---------------------------------------------------------------------------------------------
// Measurement

/** Runs one whole process under GNU time; kills its process group on timeout. */
function measure(command, args, { cwd, timeoutS }) {
  const timeFile = join(tmpdir(), `bench-check-time-${process.pid}-${Date.now()}`);
  return new Promise((done) => {
    const started = process.hrtime.bigint();
    const child = spawn(TIME, ['-f', '%e %M %U %S', '-o', timeFile, command, ...args], {
      cwd,
      detached: true,
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    const stdout = [];
    const stderr = [];
    child.stdout.on('data', (d) => stdout.push(d));
    child.stderr.on('data', (d) => stderr.push(d));
    let timedOut = false;
    const timer = setTimeout(() => {
      timedOut = true;
      try {
        process.kill(-child.pid, 'SIGKILL');
      } catch {
        // Already gone.
      }
    }, timeoutS * 1000);
    child.on('close', (code) => {
      clearTimeout(timer);
      const wallS = Number(process.hrtime.bigint() - started) / 1e9;
      let rssMiB = null;
      let cpuS = null;
      if (existsSync(timeFile)) {
        const last = readFileSync(timeFile, 'utf8').trim().split('\n').at(-1) ?? '';
        const [, kib, user, system] = last.split(' ').map(Number);
        if (Number.isFinite(kib)) rssMiB = kib / 1024;
        if (Number.isFinite(user) && Number.isFinite(system)) cpuS = user + system;
        rmSync(timeFile, { force: true });
      }
      done({
        code,
        timedOut,
        wallS,
        rssMiB,
        cpuS,
        stdout: Buffer.concat(stdout).toString('utf8'),
        stderr: Buffer.concat(stderr).toString('utf8'),
      });
    });
  });
}

async function runEgressguard(eg, n) {
  const r = await measure(process.execPath, [cli, 'check', '--json', 'policy.yaml'], {
    cwd: eg,
    timeoutS: egTimeoutS,
  });
  let problem = null;
  if (r.timedOut) problem = `timed out after ${egTimeoutS} s`;
  else if (r.code !== 0) problem = `exit ${r.code}: ${(r.stdout + r.stderr).slice(0, 500)}`;
  else {
    const report = JSON.parse(r.stdout);
    const file = report.files?.[0];
    if (report.valid !== true) problem = 'policy reported invalid';
    else if (file?.probes?.length !== 2 || !file.probes.every((p) => p.agrees)) {
      problem = `probes did not all agree: ${JSON.stringify(file?.probes)}`;
    }
  }
  if (problem !== null) log(`egressguard at ${n}: ${problem}`);
  return {
    ok: problem === null,
    timedOut: r.timedOut,
    problem,
    wallS: r.wallS,
    rssMiB: r.rssMiB,
    cpuS: r.cpuS,
  };
}

async function runAclgen(cap, n, mode) {
  const out = join(cap, `out-${mode}`);
  rmSync(out, { recursive: true, force: true });
  mkdirSync(out);
  const r = await measure(
    aclgen,
    [
      ...ACLGEN_MODES[mode],
      '--base_directory=pol',
      '--definitions_directory=def',
      `--output_directory=${out}`,
      '--policy_file=pol/bench.pol',
    ],
    { cwd: cap, timeoutS: aclgenTimeoutS },
  );
  const nft = join(out, 'bench.nft');
  let problem = null;
  let prefixes = null;
  if (r.timedOut) problem = `timed out after ${aclgenTimeoutS} s`;
  else if (r.code !== 0) problem = `exit ${r.code}: ${r.stderr.slice(-500)}`;
  else if (!existsSync(nft)) problem = 'no bench.nft written';
  else {
    prefixes = countPrefixes(readFileSync(nft, 'utf8'));
    // Merging shrinks the list (overlaps, adjacent prefixes), but not by an order of magnitude.
    if (prefixes < n / 10 || prefixes > n) problem = `bench.nft holds ${prefixes} prefixes`;
  }
  if (problem !== null) log(`aclgen (${mode}) at ${n}: ${problem}`);
  return {
    ok: problem === null,
    timedOut: r.timedOut,
    problem,
    wallS: r.wallS,
    rssMiB: r.rssMiB,
    cpuS: r.cpuS,
    prefixes,
  };
}

function countPrefixes(text) {
  let count = 0;
  const re = /\d+\.\d+\.\d+\.\d+\/\d+/g;
  while (re.exec(text) !== null) count++;
  return count;
}

// The phases inside one fresh process, as the CLI runs them; `listMs` reads and parses the list
// alone with core's parsePrefixList, the floor for what loadPolicy spends on the file.
const PHASES_SCRIPT = `
const [policyFile, factsFile, listFile, dist] = process.argv.slice(1);
const { readFileSync } = await import('node:fs');
// Wall and CPU (all threads: GC and compiler included) at each mark; CPU is steadier on a busy host.
const marks = [];
const mark = () => { const c = process.cpuUsage(); marks.push([performance.now(), (c.user + c.system) / 1000]); };
mark();
const { loadPolicy } = await import(dist + '/policy/index.js');
const { lowerPolicy, evaluateProbes, createHostView, irDigest } = await import(dist + '/ir/index.js');
const { readHostFacts } = await import(dist + '/facts/index.js');
const { parsePrefixList } = await import(dist + '/core/index.js');
mark();
const parsed = loadPolicy(policyFile);
mark();
if (parsed.policy === undefined) throw new Error('invalid policy: ' + JSON.stringify(parsed.issues.slice(0, 3)));
const facts = readHostFacts(factsFile);
const ir = lowerPolicy(parsed.policy, facts);
mark();
const results = evaluateProbes(ir, createHostView(facts), parsed.policy.requirements);
mark();
irDigest(ir);
mark();
const list = parsePrefixList(readFileSync(listFile, 'utf8'), () => {});
mark();
const span = (a, b) => ({ wall: marks[b][0] - marks[a][0], cpu: marks[b][1] - marks[a][1] });
const set = ir.classes[0].rules[0].match.destination.set;
console.log(JSON.stringify({
  import: span(0, 1), loadPolicy: span(1, 2), lower: span(2, 3), probes: span(3, 4),
  irDigest: span(4, 5), listAlone: span(5, 6), policyToIr: span(1, 3),
  cidrs: set.toCidrs(4).length,
  sameAsList: list.intervalCount() === set.intervalCount(),
  agree: results.every((r) => r.mismatches.length === 0),
}));
`;

function runPhases(eg) {
  const r = spawnSync(
    process.execPath,
    [
      '--input-type=module',
      '-e',
      PHASES_SCRIPT,
      join(eg, 'policy.yaml'),
      join(eg, 'facts.json'),
      join(eg, 'blocklist.txt'),
      join(repo, 'dist'),
    ],
    { encoding: 'utf8', timeout: egTimeoutS * 1000 },
  );
  if (r.status !== 0) {
    log(`in-process phases failed: ${(r.stderr ?? '').slice(0, 500)}`);
    return null;
  }
  const phases = JSON.parse(r.stdout);
  if (!phases.agree || !phases.sameAsList) log(`in-process phases disagree: ${r.stdout}`);
  return phases;
}

function median(values) {
  const v = values.filter((x) => x !== null && Number.isFinite(x)).sort((a, b) => a - b);
  if (v.length === 0) return null;
  const mid = v.length >> 1;
  return v.length % 2 === 1 ? v[mid] : (v[mid - 1] + v[mid]) / 2;
}

function summarize(results) {
  const ok = results.filter((r) => r.ok);
  const walls = ok.map((r) => r.wallS);
  return {
    runs: results.length,
    ok: ok.length,
    medianWallS: median(walls),
    minWallS: walls.length > 0 ? Math.min(...walls) : null,
    maxWallS: walls.length > 0 ? Math.max(...walls) : null,
    maxRssMiB: ok.length > 0 ? Math.max(...ok.map((r) => r.rssMiB ?? 0)) : null,
    medianCpuS: median(ok.map((r) => r.cpuS)),
    problems: results.filter((r) => !r.ok).map((r) => r.problem),
    timedOut: results.some((r) => r.timedOut),
    prefixes: ok[0]?.prefixes ?? null,
    all: results.map(({ wallS, rssMiB, cpuS, ok: good }) => ({ wallS, rssMiB, cpuS, ok: good })),
  };
}

// ---------------------------------------------------------------------------------------------
// Main

const work = mkdtempSync(join(tmpdir(), 'egressguard-bench-'));
const rows = [];
const benchStarted = Date.now();
const loadAtStart = loadavg();
try {
  for (const n of sizes) {
    const genStart = performance.now();
    const { eg, cap } = writeInputs(join(work, String(n)), n);
    log(`N=${n}: inputs written in ${((performance.now() - genStart) / 1000).toFixed(1)} s`);

    const modes = aclgen === '' || n > aclgenMax ? [] : aclgenModes;
    const egRuns = [];
    const phaseRuns = [];
    const capRuns = Object.fromEntries(modes.map((m) => [m, []]));
    for (let i = 0; i < runs; i++) {
      egRuns.push(await runEgressguard(eg, n));
      phaseRuns.push(runPhases(eg));
      for (const mode of modes) {
        // A timed-out tool is not run again: a second timeout tells nothing new.
        if (capRuns[mode].some((r) => r.timedOut)) continue;
        capRuns[mode].push(await runAclgen(cap, n, mode));
      }
    }
    const phases = phaseRuns.filter((p) => p !== null);
    const phase = (key) => ({
      wall: median(phases.map((p) => p[key].wall)),
      cpu: median(phases.map((p) => p[key].cpu)),
    });
    const row = {
      n,
      egressguard: summarize(egRuns),
      phasesMs: Object.fromEntries(
        ['import', 'loadPolicy', 'lower', 'policyToIr', 'probes', 'irDigest', 'listAlone'].map(
          (k) => [k, phase(k)],
        ),
      ),
      egressguardPrefixes: phases[0]?.cidrs ?? null,
      aclgen: Object.fromEntries(modes.map((m) => [m, summarize(capRuns[m])])),
      aclgenSkipped:
        aclgen === ''
          ? 'aclgen not installed'
          : n > aclgenMax
            ? `not run (above --aclgen-max ${aclgenMax})`
            : null,
    };
    rows.push(row);
    log(
      `N=${n}: egressguard ${fmtS(row.egressguard.medianWallS)} s; ` +
        modes.map((m) => `aclgen ${m} ${fmtS(row.aclgen[m].medianWallS)} s`).join('; '),
    );
  }
} finally {
  if (opts.keep) log(`inputs kept in ${work}`);
  else rmSync(work, { recursive: true, force: true });
}
const loadAtEnd = loadavg();

function fmtS(s) {
  return s === null || s === undefined ? '–' : s.toFixed(2);
}
function fmtMiB(m) {
  return m === null || m === undefined ? '–' : m.toFixed(0);
}
function fmtMs(ms) {
  return ms === null || ms === undefined ? '–' : ms.toFixed(0);
}
function fmtPhase(p) {
  return `${fmtMs(p.wall)} (${fmtMs(p.cpu)})`;
}

/** The Python that runs aclgen: its shebang's, not whichever python3 is first on PATH. */
function aclgenPython() {
  if (aclgen === '') return 'none';
  const shebang = /^#!\s*(\S+)/.exec(readFileSync(aclgen, 'utf8').split('\n', 1)[0] ?? '');
  const python = shebang?.[1] ?? 'python3';
  return (spawnSync(python, ['--version'], { encoding: 'utf8' }).stdout ?? '').trim();
}

function gitDescribe() {
  const r = spawnSync('git', ['describe', '--always', '--dirty'], { cwd: repo, encoding: 'utf8' });
  return r.status === 0 ? r.stdout.trim() : 'unknown';
}

const machine = {
  cpus: cpus().length,
  cpuModel: cpus()[0]?.model ?? 'unknown',
  memoryGiB: Math.round(totalmem() / 2 ** 30),
  node: process.version,
  aclgen:
    spawnSync('dpkg-query', ['-W', '-f', '${Version}', 'python3-capirca'], {
      encoding: 'utf8',
    }).stdout?.trim() || 'unknown',
  python: aclgenPython(),
  egressguard: gitDescribe(),
  loadAverage: {
    start: loadAtStart.map((x) => +x.toFixed(2)),
    end: loadAtEnd.map((x) => +x.toFixed(2)),
  },
  date: new Date().toISOString(),
};

/** The aclgen mode to compare with: the fastest that succeeded (the harder comparison). */
function fastestAclgen(row) {
  const done = Object.entries(row.aclgen).filter(([, s]) => s.medianWallS !== null);
  done.sort((a, b) => a[1].medianWallS - b[1].medianWallS);
  return done[0] ?? null;
}

// Targets from the issue: ≥ 10× faster than aclgen at 100k; 1M under 5 s and 1 GiB;
// time(1M) / time(100k) ≤ 15.
const byN = new Map(rows.map((r) => [r.n, r]));
const targets = [];
const at100k = byN.get(100000);
const at1m = byN.get(1000000);
const fastest100k = at100k === undefined ? null : fastestAclgen(at100k);
if (fastest100k !== null && at100k.egressguard.medianWallS !== null) {
  const ratio = fastest100k[1].medianWallS / at100k.egressguard.medianWallS;
  const cpuRatio = fastest100k[1].medianCpuS / at100k.egressguard.medianCpuS;
  targets.push({
    target: `≥ 10× faster than aclgen at 100k (vs aclgen ${fastest100k[0]}, its faster mode)`,
    value: `${ratio.toFixed(1)}× wall, ${cpuRatio.toFixed(1)}× cpu`,
    met: ratio >= 10,
  });
}
if (at1m !== undefined && at1m.egressguard.medianWallS !== null) {
  targets.push({
    target: '1M: wall < 5 s',
    value: `${fmtS(at1m.egressguard.medianWallS)} s`,
    met: at1m.egressguard.medianWallS < 5,
  });
  targets.push({
    target: '1M: peak RSS < 1 GiB',
    value: `${fmtMiB(at1m.egressguard.maxRssMiB)} MiB`,
    met: at1m.egressguard.maxRssMiB < 1024,
  });
  if (at100k?.egressguard.medianWallS) {
    const ratio = at1m.egressguard.medianWallS / at100k.egressguard.medianWallS;
    targets.push({
      target: 'time(1M) / time(100k) ≤ 15',
      value: ratio.toFixed(1),
      met: ratio <= 15,
    });
  }
}

function cell(summary) {
  if (summary.ok === 0) return `failed: ${summary.problems[0] ?? 'no run'}`;
  const spread = runs > 1 ? ` (${fmtS(summary.minWallS)}–${fmtS(summary.maxWallS)})` : '';
  return `${fmtS(summary.medianWallS)} s${spread}, ${fmtMiB(summary.maxRssMiB)} MiB, cpu ${fmtS(summary.medianCpuS)} s`;
}

const lines = [];
lines.push(
  `Machine: ${machine.cpus} × ${machine.cpuModel}, ${machine.memoryGiB} GiB; Node ${machine.node}; ` +
    `python3-capirca ${machine.aclgen} (${machine.python}); egressguard ${machine.egressguard}; ` +
    `load average ${machine.loadAverage.start[0]} at start, ${machine.loadAverage.end[0]} at end.`,
);
lines.push(
  `Whole processes, ${runs} run${runs === 1 ? '' : 's'} each, interleaved: median wall (min–max), ` +
    'the largest peak RSS of the runs, and median CPU time (user + system).',
);
lines.push('');
const modeHeads = aclgenModes.map(
  (m) => `aclgen ${m === 'default' ? '(as shipped)' : '--optimize'}`,
);
lines.push(
  `| prefixes | egressguard \`check\` | ${modeHeads.join(' | ')} | aclgen ÷ egressguard (fastest aclgen mode) | prefixes out (egressguard / ${aclgenModes.map((m) => `aclgen ${m}`).join(' / ')}) |`,
);
lines.push(`| ---: | ---: | ${aclgenModes.map(() => '---: | ').join('')}---: | ---: |`);
for (const r of rows) {
  const capCells = aclgenModes.map((m) =>
    r.aclgen[m] === undefined ? (r.aclgenSkipped ?? '–') : cell(r.aclgen[m]),
  );
  const fastest = fastestAclgen(r);
  const ratio =
    fastest === null || r.egressguard.medianWallS === null
      ? '–'
      : `${(fastest[1].medianWallS / r.egressguard.medianWallS).toFixed(1)}× ` +
        `(cpu ${(fastest[1].medianCpuS / r.egressguard.medianCpuS).toFixed(1)}×)`;
  const outs = [r.egressguardPrefixes, ...aclgenModes.map((m) => r.aclgen[m]?.prefixes)]
    .map((x) => (x === null || x === undefined ? '–' : x.toLocaleString('en-US')))
    .join(' / ');
  lines.push(
    `| ${r.n.toLocaleString('en-US')} | ${cell(r.egressguard)} | ${capCells.join(' | ')} | ${ratio} | ${outs} |`,
  );
}
lines.push('');
lines.push(
  'Inside one egressguard process, median wall ms (CPU ms, all threads): module imports; ' +
    'loadPolicy (YAML, schema, network list); lowerPolicy; policy → IR (the two together); ' +
    'probes; irDigest; and the list file alone, read and parsed by core `parsePrefixList`.',
);
lines.push('');
lines.push(
  '| prefixes | imports | loadPolicy | lowerPolicy | policy → IR | probes | irDigest | list alone |',
);
lines.push('| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |');
for (const r of rows) {
  const p = r.phasesMs;
  const cells = ['import', 'loadPolicy', 'lower', 'policyToIr', 'probes', 'irDigest', 'listAlone'];
  lines.push(
    `| ${r.n.toLocaleString('en-US')} | ${cells.map((k) => fmtPhase(p[k])).join(' | ')} |`,
  );
}
if (targets.length > 0) {
  lines.push('');
  lines.push('| target | measured | met |');
  lines.push('| --- | ---: | :---: |');
  for (const t of targets) lines.push(`| ${t.target} | ${t.value} | ${t.met ? 'yes' : '**no**'} |`);
}
const markdown = lines.join('\n');
console.log(markdown);

const totalS = (Date.now() - benchStarted) / 1000;
mkdirSync(opts.out, { recursive: true });
writeFileSync(
  join(opts.out, 'bench-check.json'),
  `${JSON.stringify({ machine, seed, runs, aclgenMax, aclgenTimeoutS, aclgenModes, rows, targets, totalS }, null, 2)}\n`,
);
writeFileSync(join(opts.out, 'bench-check.md'), `${markdown}\n`);
log(`wrote ${join(opts.out, 'bench-check.json')} (${totalS.toFixed(0)} s in all)`);

// Failing runs fail the script; an aclgen timeout is a result, not a failure.
const failed = rows.some(
  (r) =>
    r.egressguard.ok < r.egressguard.runs ||
    Object.values(r.aclgen).some((s) => s.ok < s.runs && !s.timedOut),
);
process.exitCode = failed ? 1 : 0;
