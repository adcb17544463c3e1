#!/usr/bin/env node
// Fleet scale benchmark: N simulated agents, the real agent client code (enrollment,
// CA pinning, long poll, status reports) over HTTPS on loopback with a recording engine instead
// of a firewall, against one controller (`egressguard server`, its own process, with its own
// host-IR binder: each push lowered once, compiled per distinct binding facts), on SQLite and on
// a private PostgreSQL cluster. The simulated agents share one bundle hasher, so their compile of
// a push (what a real agent does on its own host) runs once per push in this process, not 1,000
// times. Each round pushes another steering priority (`options.rulePriority`): a change that is
// enforced, so every host's hash changes (a comment alone would not). Measures:
//  1. convergence: time from a push (one wave) until each agent applied its new hash, and until
//     the controller saw every host converged (target p95 < 10 s at 1,000 agents);
//  2. sustained check-ins per second with agents long-polling at a short interval, and the
//     controller's CPU and memory meanwhile (target: 10,000 hosts at a 30 s poll = 333/s).
// Usage: node scripts/bench-fleet.mjs [--agents 1000] [--stores sqlite,postgres] [--rounds 3]
//        [--poll-seconds 3] [--window-seconds 30] [--out bench-out]
// Needs a build (npm run build); PostgreSQL's server binaries for the postgres store (run as
// root: the cluster runs as the postgres user). Loopback only; stops by itself.
import { execFile, execFileSync, spawn } from 'node:child_process';
import {
  chownSync,
  chmodSync,
  existsSync,
  mkdirSync,
  mkdtempSync,
  readdirSync,
  readFileSync,
  rmSync,
  writeFileSync,
} from 'node:fs';
import { setMaxListeners } from 'node:events';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { setTimeout as delay } from 'node:timers/promises';

const repo = fileURLToPath(new URL('..', import.meta.url));
const bin = join(repo, 'bin/egressguard.js');
const { createBundleHasher, createRecordingEngine, runAgent } = await import(
  join(repo, 'dist/agent/index.js')
);
const { createRandom } = await import(join(repo, 'dist/core/index.js'));
const { parseHostFacts } = await import(join(repo, 'dist/facts/index.js'));
const { createOperatorClient } = await import(join(repo, 'dist/server/index.js'));
const { StateDir } = await import(join(repo, 'dist/state/index.js'));

const args = process.argv.slice(2);
const option = (name, fallback) => {
  const i = args.indexOf(name);
  return i === -1 ? fallback : args[i + 1];
};
const agentCount = Number(option('--agents', '1000'));
const stores = option('--stores', 'sqlite,postgres').split(',');
const rounds = Number(option('--rounds', '3'));
const pollSeconds = Number(option('--poll-seconds', '3'));
const windowSeconds = Number(option('--window-seconds', '30'));
const outDir = option('--out', join(repo, 'bench-out'));

const policy = readFileSync(
  join(repo, 'testdata/policies/valid/linux-vpn-gateway/policy.yaml'),
  'utf8',
);
const baseFacts = JSON.parse(
  readFileSync(join(repo, 'testdata/policies/valid/linux-vpn-gateway/facts.json'), 'utf8'),
);
const sleep = (ms) => delay(ms);
const quantile = (xs, q) => {
  const sorted = [...xs].sort((a, b) => a - b);
  return sorted[Math.min(sorted.length - 1, Math.ceil(q * sorted.length) - 1)];
};
const CLK_TCK = Number(execFileSync('getconf', ['CLK_TCK'], { encoding: 'utf8' }).trim());

/** CPU seconds (user + system) and resident memory of a process, from /proc. */
function usage(pid) {
  const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
  const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
  const cpu = (Number(fields[11]) + Number(fields[12])) / CLK_TCK;
  const rss =
    Number(/VmRSS:\s+(\d+) kB/.exec(readFileSync(`/proc/${pid}/status`, 'utf8'))?.[1] ?? 0) / 1024;
  return { cpu, rssMiB: rss };
}
const selfCpu = () => {
  const u = process.cpuUsage();
  return (u.user + u.system) / 1e6;
};

function freePort() {
  return new Promise((resolve, reject) => {
    const probe = createServer();
    probe.once('error', reject);
    probe.listen(0, '127.0.0.1', () => {
      const { port } = probe.address();
      probe.close(() => resolve(port));
    });
  });
}

/** A private PostgreSQL cluster on a unix socket (as test/fleet/support/postgres-cluster.ts). */
async function startPostgres(dir) {
  const root = '/usr/lib/postgresql';
  const version = readdirSync(root)
    .sort((a, b) => Number(b) - Number(a))
    .find((v) => existsSync(join(root, v, 'bin/initdb')));
  const pgBin = join(root, version, 'bin');
  const uid = Number(execFileSync('id', ['-u', 'postgres'], { encoding: 'utf8' }));
  const gid = Number(execFileSync('id', ['-g', 'postgres'], { encoding: 'utf8' }));
  mkdirSync(dir, { recursive: true });
  chmodSync(dir, 0o755);
  chownSync(dir, uid, gid);
  const asPostgres = (command, argv) =>
    execFileSync('runuser', ['-u', 'postgres', '--', join(pgBin, command), ...argv], {
      cwd: dir,
      stdio: 'ignore',
    });
  asPostgres('initdb', [
    '-D',
    join(dir, 'data'),
    '-A',
    'trust',
    '-U',
    'postgres',
    '--no-sync',
    '-E',
    'UTF8',
  ]);
  asPostgres('pg_ctl', [
    '-D',
    join(dir, 'data'),
    '-l',
    join(dir, 'server.log'),
    '-w',
    '-o',
    `-k ${dir} -c listen_addresses= -c max_connections=200`,
    'start',
  ]);
  asPostgres('createdb', ['-h', dir, 'fleet']);
  return {
    url: `postgres:///fleet?host=${encodeURIComponent(dir)}&user=postgres`,
    stop: () => asPostgres('pg_ctl', ['-D', join(dir, 'data'), '-m', 'fast', '-w', 'stop']),
    // The postmaster (first line of postmaster.pid) and its children: backends, writer, WAL.
    pids: () => {
      const postmaster = Number(
        readFileSync(join(dir, 'data/postmaster.pid'), 'utf8').split('\n')[0],
      );
      const children = execFileSync('pgrep', ['-P', String(postmaster)], { encoding: 'utf8' })
        .trim()
        .split('\n')
        .map(Number);
      return [postmaster, ...children];
    },
  };
}

async function benchStore(kind) {
  const work = mkdtempSync(join(tmpdir(), `eg-bench-fleet-${kind}-`));
  chmodSync(work, 0o755); // the postgres user must reach its cluster directory
  const pg = kind === 'postgres' ? await startPostgres(join(work, 'pg')) : undefined;
  const store = pg?.url ?? `sqlite:${join(work, 'fleet.db')}`;
  const stateDir = join(work, 'server');
  const port = await freePort();
  const url = `https://127.0.0.1:${port}`;
  const server = spawn(
    process.execPath,
    [
      bin,
      'server',
      '--store',
      store,
      '--listen',
      `127.0.0.1:${port}`,
      '--state-dir',
      stateDir,
      '--poll-interval',
      String(pollSeconds),
    ],
    { stdio: ['ignore', 'ignore', 'pipe'] },
  );
  let serverLog = '';
  server.stderr.on('data', (chunk) => (serverLog += chunk));
  while (!serverLog.includes('listening on')) {
    if (server.exitCode !== null) throw new Error(`server exited: ${serverLog}`);
    await sleep(100);
  }
  const operator = createOperatorClient({ server: url, stateDir });
  const token = (await operator.createToken({ uses: agentCount, ttlSeconds: 3600 })).token;
  const tokenFile = join(work, 'bootstrap.token');
  writeFileSync(tokenFile, token, { mode: 0o600 });

  // The agents: real client code, recording engines that timestamp each successful apply.
  const stop = new globalThis.AbortController();
  setMaxListeners(0, stop.signal); // every agent waits on it
  const applied = Array.from({ length: agentCount }, () => []);
  const agents = [];
  const hashBundle = createBundleHasher();
  const enrollStart = performance.now();
  for (let i = 0; i < agentCount; i++) {
    const name = `sim-${String(i).padStart(5, '0')}`;
    const engine = createRecordingEngine({
      facts: parseHostFacts({ ...baseFacts, hostname: name }, name),
      hashBundle,
    });
    const timed = {
      ...engine,
      apply: async (prepared) => {
        const outcome = await engine.apply(prepared);
        if (outcome.ok) applied[i].push({ hash: prepared.hash, at: performance.now() });
        return outcome;
      },
    };
    agents.push(
      runAgent({
        serverUrl: url,
        tokenFile,
        stateDir: new StateDir({ root: join(work, 'agents', name) }),
        engine: timed,
        hostname: name,
        agentVersion: 'bench',
        signal: stop.signal,
        random: createRandom(i + 1),
        startJitterMs: Math.min(20_000, agentCount * 10),
      }).catch((error) => console.error(`${name}: ${error.message}`)),
    );
  }
  for (;;) {
    const { hosts } = await operator.listHosts();
    if (hosts.length === agentCount) break;
    await sleep(500);
  }
  const enrollSeconds = (performance.now() - enrollStart) / 1000;
  const afterEnroll = usage(server.pid);

  // 1. Convergence, round by round: one wave, no bake, every agent long-polling.
  const convergence = [];
  for (let round = 1; round <= rounds; round++) {
    await sleep(2 * pollSeconds * 1000); // every agent back in its long poll
    const t0 = performance.now();
    const pushed = await operator.push({
      policy,
      source: 'policy.yaml',
      rollout: { canary: 0, maxUnavailable: agentCount, bakeMs: 0 },
      options: { rulePriority: String(7400 + round) },
    });
    let controllerSeconds;
    for (;;) {
      const { hosts } = await operator.listHosts();
      const done = hosts.filter(
        (h) =>
          h.desiredPushId === pushed.pushId &&
          h.appliedHash === h.desiredHash &&
          h.liveHash === h.desiredHash,
      );
      if (done.length === agentCount) {
        controllerSeconds = (performance.now() - t0) / 1000;
        break;
      }
      if (performance.now() - t0 > 300_000) {
        const stuck = hosts.filter((h) => !done.includes(h)).slice(0, 3);
        server.kill('SIGTERM');
        throw new Error(
          `round ${round}: ${done.length} of ${agentCount} converged after 300 s; for example ${JSON.stringify(stuck, null, 1)}`,
        );
      }
      await sleep(100);
    }
    const perAgent = applied
      .map((list) => (list.find((a) => a.at >= t0)?.at ?? Number.NaN) - t0)
      .map((ms) => ms / 1000);
    convergence.push({
      round,
      first: Math.min(...perAgent),
      p50: quantile(perAgent, 0.5),
      p95: quantile(perAgent, 0.95),
      max: Math.max(...perAgent),
      controllerSawAll: controllerSeconds,
    });
    console.error(
      `${kind} round ${round}: p95 ${quantile(perAgent, 0.95).toFixed(2)} s, controller saw all at ${controllerSeconds.toFixed(2)} s`,
    );
  }

  // 1b. PostgreSQL: a second replica takes the push while every agent long-polls the first; the
  // wake-up crosses replicas by LISTEN/NOTIFY (target: each agent applies within 2 s).
  let replicaWakeup;
  if (pg !== undefined) {
    const portB = await freePort();
    const replica = spawn(
      process.execPath,
      [
        bin,
        'server',
        '--store',
        store,
        '--listen',
        `127.0.0.1:${portB}`,
        '--state-dir',
        stateDir,
        '--poll-interval',
        String(pollSeconds),
      ],
      { stdio: ['ignore', 'ignore', 'pipe'] },
    );
    let replicaLog = '';
    replica.stderr.on('data', (chunk) => (replicaLog += chunk));
    while (!replicaLog.includes('listening on')) {
      if (replica.exitCode !== null) throw new Error(`replica exited: ${replicaLog}`);
      await sleep(100);
    }
    const viaB = createOperatorClient({ server: `https://127.0.0.1:${portB}`, stateDir });
    replicaWakeup = [];
    for (let round = 1; round <= rounds; round++) {
      await sleep(2 * pollSeconds * 1000);
      const t0 = performance.now();
      await viaB.push({
        policy,
        source: 'policy.yaml',
        rollout: { canary: 0, maxUnavailable: agentCount, bakeMs: 0 },
        options: { rulePriority: String(7500 + round) },
      });
      while (
        applied.some((list) => !list.some((a) => a.at >= t0)) &&
        performance.now() - t0 < 120_000
      )
        await sleep(100);
      const perAgent = applied.map(
        (list) => ((list.find((a) => a.at >= t0)?.at ?? Number.NaN) - t0) / 1000,
      );
      replicaWakeup.push({
        round,
        first: Math.min(...perAgent),
        p50: quantile(perAgent, 0.5),
        p95: quantile(perAgent, 0.95),
        max: Math.max(...perAgent),
      });
      console.error(`${kind} replica round ${round}: p95 ${quantile(perAgent, 0.95).toFixed(2)} s`);
    }
    viaB.close();
    replica.kill('SIGTERM');
    await new Promise((resolve) => replica.once('exit', resolve));
  }

  // 2. Sustained check-ins with every agent long-polling at the poll interval.
  const metric = async () => {
    const answer = await new Promise((resolve, reject) =>
      execFile(
        'curl',
        ['-s', '--cacert', join(stateDir, 'ca.pem'), `${url}/metrics`],
        { maxBuffer: 1 << 28 },
        (error, stdout) => (error ? reject(error) : resolve(stdout)),
      ),
    );
    return Number(/^egressguard_fleet_checkins_total (\d+)/m.exec(answer)?.[1] ?? Number.NaN);
  };
  await sleep(2 * pollSeconds * 1000);
  const c0 = await metric();
  const u0 = usage(server.pid);
  const pg0 = pg === undefined ? 0 : pg.pids().reduce((sum, pid) => sum + usage(pid).cpu, 0);
  const s0 = selfCpu();
  const w0 = performance.now();
  await sleep(windowSeconds * 1000);
  const c1 = await metric();
  const u1 = usage(server.pid);
  const pg1 = pg === undefined ? 0 : pg.pids().reduce((sum, pid) => sum + usage(pid).cpu, 0);
  const elapsed = (performance.now() - w0) / 1000;
  const checkinsPerSecond = (c1 - c0) / elapsed;
  const result = {
    store: kind,
    agents: agentCount,
    pollSeconds,
    enrollSeconds,
    convergence,
    replicaWakeup: replicaWakeup ?? null,
    checkins: {
      perSecond: checkinsPerSecond,
      controllerCpuPercent: (100 * (u1.cpu - u0.cpu)) / elapsed,
      postgresCpuPercent: pg === undefined ? null : (100 * (pg1 - pg0)) / elapsed,
      agentsProcessCpuPercent: (100 * (selfCpu() - s0)) / elapsed,
      // The controller's CPU per check-in, scaled to 10,000 hosts at a 30 s poll (333/s).
      controllerCpuPercentAt10kHosts30s:
        ((100 * (u1.cpu - u0.cpu)) / elapsed) * (10_000 / 30 / checkinsPerSecond),
    },
    controllerRssMiB: { afterEnroll: afterEnroll.rssMiB, end: u1.rssMiB },
  };

  stop.abort();
  await Promise.all(agents);
  operator.close();
  server.kill('SIGTERM');
  await new Promise((resolve) => server.once('exit', resolve));
  pg?.stop();
  rmSync(work, { recursive: true, force: true });
  return result;
}

const machine = {
  node: process.version,
  cpus: Number(execFileSync('nproc', { encoding: 'utf8' }).trim()),
  loadAverage: readFileSync('/proc/loadavg', 'utf8').split(' ').slice(0, 3).join(' '),
  commit: execFileSync('git', ['rev-parse', '--short', 'HEAD'], {
    cwd: repo,
    encoding: 'utf8',
  }).trim(),
};
mkdirSync(outDir, { recursive: true });
const results = [];
for (const kind of stores) {
  results.push(await benchStore(kind));
  writeFileSync(join(outDir, 'fleet.json'), `${JSON.stringify({ machine, results }, null, 2)}\n`);
}
console.log(JSON.stringify({ machine, results }, null, 2));
