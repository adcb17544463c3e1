#!/usr/bin/env node
// Benchmark of `apply` on Linux, inside a throwaway network namespace:
//  1. `egressguard apply` of a policy with a 100k-prefix blocklist, end to end as a whole CLI
//     process, against the floor: a bare `nft -f` of the same compiled file plus one
//     `nft -j -t list ruleset` (target: ratio <= 1.3); fresh (empty namespace), replace (another
//     list over a live one) and edit (one more rule over a live table, the same list);
//  2. the drift check behind `status` with 1M set elements, measured inside the process
//     (target: < 100 ms).
// Usage: node scripts/bench-apply.mjs [--sizes 100000] [--drift 1000000] [--runs 3]
//        [--out bench-out]   (--drift 0 skips the drift check)
// Needs root (network namespaces) and a build (npm run build). Never touches the root namespace.
import { execFileSync } from 'node:child_process';
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';

const repo = fileURLToPath(new URL('..', import.meta.url));
const bin = join(repo, 'bin/egressguard.js');
const { createRandom } = await import(join(repo, 'dist/core/index.js'));
const args = process.argv.slice(2);
const option = (name, fallback) => {
  const i = args.indexOf(name);
  return i === -1 ? fallback : args[i + 1];
};
const sizes = option('--sizes', '100000').split(',').map(Number);
const driftSize = Number(option('--drift', '1000000'));
const runs = Number(option('--runs', '3'));
const outDir = option('--out', join(repo, 'bench-out'));

const work = mkdtempSync(join(tmpdir(), 'eg-bench-apply-'));
const ns = `egbench-${process.pid}`;
const sh = (file, argv, input) =>
  execFileSync(file, argv, {
    encoding: 'utf8',
    input,
    maxBuffer: 1 << 30,
    stdio: ['pipe', 'pipe', 'pipe'],
  });
const inNs = (argv, input) => sh('ip', ['netns', 'exec', ns, ...argv], input);
const seconds = (fn) => {
  const start = process.hrtime.bigint();
  fn();
  return Number(process.hrtime.bigint() - start) / 1e9;
};
const median = (xs) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];

function prefixes(count, seed) {
  const random = createRandom(seed);
  const lines = [];
  for (let i = 0; i < count; i++) {
    const length = 24 + Math.floor(random() * 9); // /24–/32, like IP reputation lists
    const address = Math.floor(random() * 2 ** 32);
    const start = address - (address % 2 ** (32 - length));
    lines.push(
      `${start >>> 24}.${(start >>> 16) & 255}.${(start >>> 8) & 255}.${start & 255}/${length}`,
    );
  }
  return lines.join('\n') + '\n';
}

/** The floor: a bare `nft -f` of the compiled file plus one read-back listing. */
function floor(out) {
  inNs(['nft', '-f', join(out, 'ruleset.nft')]);
  inNs(['nft', '-j', '-t', 'list', 'ruleset']);
}

function writePolicy(dir, count, seed = count, extraRule = '') {
  mkdirSync(dir, { recursive: true });
  writeFileSync(join(dir, 'blocklist.txt'), prefixes(count, seed));
  writeFileSync(
    join(dir, 'policy.yaml'),
    [
      'apiVersion: egressguard/v1',
      'metadata: { name: bench }',
      'networks:',
      '  blocklist: { files: [blocklist.txt] }',
      'classes:',
      '  ci:',
      '    ingress: [vwl0]',
      '    sources: [10.10.0.0/24]',
      '    rules:',
      '      - { id: deny-blocklist, action: deny, to: blocklist }',
      ...(extraRule === '' ? [] : [extraRule]),
      '    default: allow',
      '',
    ].join('\n'),
  );
  return join(dir, 'policy.yaml');
}

function setUpNamespace() {
  sh('ip', ['netns', 'add', ns]);
  sh('ip', ['-n', ns, 'link', 'set', 'lo', 'up']);
  for (const link of ['eth0', 'vwl0']) {
    sh('ip', ['-n', ns, 'link', 'add', link, 'type', 'veth', 'peer', 'name', `${link}p`]);
    sh('ip', ['-n', ns, 'link', 'set', link, 'up']);
  }
  sh('ip', ['-n', ns, 'addr', 'add', '198.51.100.2/24', 'dev', 'eth0']);
  sh('ip', ['-n', ns, 'addr', 'add', '10.10.0.1/24', 'dev', 'vwl0']);
  sh('ip', ['-n', ns, 'route', 'add', 'default', 'via', '198.51.100.1', 'dev', 'eth0']);
}

const results = {
  machine: { node: process.version, nft: sh('nft', ['--version']).trim() },
  apply: [],
  drift: null,
};
try {
  setUpNamespace();
  const stateDir = join(work, 'state');
  const env = { ...process.env, EGRESSGUARD_STATE_DIR: stateDir, NO_COLOR: '1' };
  const cli = (argv) =>
    execFileSync(process.execPath, [bin, ...argv], { encoding: 'utf8', env, maxBuffer: 1 << 30 });
  const reset = () => {
    inNs(['nft', 'delete', 'table', 'inet', 'egressguard'], undefined);
  };
  const resetQuietly = () => {
    try {
      reset();
    } catch {
      // not there
    }
    rmSync(stateDir, { recursive: true, force: true });
  };

  for (const size of sizes) {
    // Policies of the same size: a fresh apply loads A into an empty namespace; a replace
    // applies B (another list) over a live A; an edit applies C (A's list, one more rule) over a
    // live A: the list is the same, only the rules change.
    const facts = writeFacts(cli, work);
    const policyA = writePolicy(join(work, `a${size}`), size, size);
    const policyB = writePolicy(join(work, `b${size}`), size, size + 1);
    const policyC = writePolicy(
      join(work, `c${size}`),
      size,
      size,
      '      - { id: allow-docs, action: allow, to: [192.0.2.0/24] }',
    );
    const out = {
      A: join(work, `outA${size}`),
      B: join(work, `outB${size}`),
      C: join(work, `outC${size}`),
    };
    for (const [name, policy] of [
      ['A', policyA],
      ['B', policyB],
      ['C', policyC],
    ]) {
      cli(['compile', policy, '--facts', facts, '--out', out[name]]);
    }
    const timings = {
      freshFloor: [],
      freshApply: [],
      replaceFloor: [],
      replaceApply: [],
      editFloor: [],
      editApply: [],
    };
    for (let i = 0; i < runs; i++) {
      resetQuietly();
      timings.freshFloor.push(seconds(() => floor(out.A)));
      timings.replaceFloor.push(seconds(() => floor(out.B)));
      floor(out.A);
      timings.editFloor.push(seconds(() => floor(out.C)));
      resetQuietly();
      timings.freshApply.push(seconds(() => cli(['apply', policyA, '--netns', ns, '--json'])));
      timings.replaceApply.push(seconds(() => cli(['apply', policyB, '--netns', ns, '--json'])));
      cli(['apply', policyA, '--netns', ns, '--json']);
      timings.editApply.push(seconds(() => cli(['apply', policyC, '--netns', ns, '--json'])));
    }
    for (const kind of ['fresh', 'replace', 'edit']) {
      const row = {
        size,
        kind,
        floorS: median(timings[`${kind}Floor`]),
        applyS: median(timings[`${kind}Apply`]),
      };
      row.ratio = row.applyS / row.floorS;
      results.apply.push(row);
      console.log(
        `apply ${size} (${kind}): floor ${row.floorS.toFixed(3)} s, apply ${row.applyS.toFixed(3)} s, ratio ${row.ratio.toFixed(2)} (target <= 1.3)`,
      );
    }
  }

  if (driftSize > 0) {
    resetQuietly();
    const policy = writePolicy(join(work, `drift${driftSize}`), driftSize, driftSize);
    const applyS = seconds(() => cli(['apply', policy, '--netns', ns, '--json']));
    // The same front door as `status --netns`: the target, the backend that recorded the
    // generation, and the apply layer's context for it.
    const { readStatus } = await import(join(repo, 'dist/apply/index.js'));
    const { backendOf, createHostTarget, hostContext } = await import(
      join(repo, 'dist/host/index.js')
    );
    const host = createHostTarget({ netns: ns, stateDir, guard: true });
    const target = hostContext(host, backendOf(host));
    const times = [];
    let condition;
    for (let i = 0; i < 7; i++) {
      const start = process.hrtime.bigint();
      condition = (await readStatus(target)).condition;
      times.push(Number(process.hrtime.bigint() - start) / 1e6);
    }
    const listMs = median(
      Array.from(
        { length: 5 },
        () => seconds(() => inNs(['nft', '-j', '-t', 'list', 'ruleset'])) * 1000,
      ),
    );
    results.drift = {
      size: driftSize,
      applyS,
      statusMs: median(times),
      condition,
      bareListMs: listMs,
    };
    console.log(
      `drift check at ${driftSize} elements: ${median(times).toFixed(1)} ms in-process (${condition}); bare nft -j -t list ruleset ${listMs.toFixed(1)} ms; apply took ${applyS.toFixed(1)} s`,
    );
  }
  mkdirSync(outDir, { recursive: true });
  writeFileSync(join(outDir, 'apply.json'), JSON.stringify(results, null, 2));
} finally {
  try {
    sh('ip', ['netns', 'delete', ns]);
  } catch {
    // already gone
  }
  rmSync(work, { recursive: true, force: true });
}

function writeFacts(cli, dir) {
  const file = join(dir, 'facts.json');
  writeFileSync(file, cli(['facts', '--netns', ns, '--json']));
  return file;
}
