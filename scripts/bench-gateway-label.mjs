#!/usr/bin/env node
// Benchmark of the gateway's kill switch: how long `egressguard run --k8s` takes to
// take the egress gateway label off the gateway node after its tunnel goes down, is deleted or
// loses its carrier (target: within 2 s), and to put it back and re-apply the egress gateway
// policy when the tunnel returns. The tunnel is a real link in a lab of network namespaces (never
// the root namespace); the cluster is the MODEL of the Kubernetes API server
// (src/backends/cilium/kube-api-model.ts) over HTTPS on loopback, polled in this process every
// 5 ms. Times run from the moment the fault command is issued (an `ip` process; the kernel's
// change happens while it runs) to the model's first view of the change, and split into steps:
// the resident seeing the link event, waiting for an earlier API call, the PATCH itself, and the
// model's view of it. The resident is the built CLI with its defaults (--gateway-tick 1000).
// Usage: node scripts/bench-gateway-label.mjs [--rounds 5] [--out bench-out]
// Needs root and a build (npm run build). Results in bench-out/gateway-label.json.
import { spawn } from 'node:child_process';
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { loadavg, tmpdir } from 'node:os';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { fileURLToPath } from 'node:url';

const repo = fileURLToPath(new URL('..', import.meta.url));
const { createLab } = await import(join(repo, 'dist/prove/index.js'));
// The Kubernetes API model is a simulator: built into sim/dist, never into the product's dist.
const { buildSim } = await import(join(repo, 'sim/build.mjs'));
await buildSim();
const { startKubeApiModel } = await import(join(repo, 'sim/dist/kube-api-model.mjs'));
const { gatewayLabel } = await import(join(repo, 'dist/ir/index.js'));

const args = process.argv.slice(2);
const option = (name, fallback) => {
  const i = args.indexOf(name);
  return i === -1 ? fallback : args[i + 1];
};
const rounds = Number(option('--rounds', '5'));
const outDir = option('--out', join(repo, 'bench-out'));
const example = join(repo, 'testdata/policies/valid/k3s-vpn-egress');
const label = gatewayLabel('vpn');
const tls = (file) =>
  readFileSync(join(repo, 'src/backends/cilium/testdata/kube-api-tls', file), 'utf8');

/** The gateway node of k3s-vpn-egress/facts.json: an uplink and tun0 to a tunnel peer. */
const topology = {
  nodes: {
    host: { forwarding: true, routes: [{ to: 'default', via: '192.168.1.1' }] },
    lan: {},
    'tunnel-peer': {},
  },
  links: [
    {
      a: { node: 'host', iface: 'eth0', addresses: ['192.168.1.21/24'] },
      b: { node: 'lan', iface: 'eth0', addresses: ['192.168.1.1/24'] },
    },
    {
      a: { node: 'host', iface: 'tun0', addresses: ['10.200.0.2/32'] },
      b: { node: 'tunnel-peer', iface: 'tun0', addresses: ['10.200.0.1/32'] },
      mtu: 1420,
      pointToPoint: true,
    },
  ],
};
const TUNNEL = { node: 'host', iface: 'tun0' };

const stats = (xs) => {
  const sorted = [...xs].sort((a, b) => a - b);
  const at = (q) => sorted[Math.min(sorted.length - 1, Math.ceil(q * sorted.length) - 1)];
  return { n: xs.length, median: at(0.5), p95: at(0.95), max: sorted.at(-1) };
};

const work = mkdtempSync(join(tmpdir(), 'eg-bench-gateway-'));
const lab = await createLab(topology);
const model = await startKubeApiModel({
  users: [
    {
      name: 'gateway',
      token: 'bench-token',
      rules: [
        { verbs: ['get', 'patch'], resource: 'nodes', resourceNames: ['gw-1'] },
        { verbs: ['list', 'patch'], resource: 'ciliumegressgatewaypolicies' },
      ],
    },
  ],
  nodes: [{ name: 'gw-1' }],
  egressGatewayPolicies: [
    {
      apiVersion: 'cilium.io/v2',
      kind: 'CiliumEgressGatewayPolicy',
      metadata: { name: 'egressguard-k3s-vpn-egress-vpn' },
      spec: {
        selectors: [{ podSelector: { matchLabels: { 'egress-class': 'vpn' } } }],
        destinationCIDRs: ['0.0.0.0/0'],
        egressGateway: {
          nodeSelector: { matchLabels: { [label.key]: label.value } },
          interface: 'tun0',
        },
      },
    },
  ],
  tls: { key: tls('server.key'), cert: tls('server.crt'), ca: tls('ca.crt') },
});
const kubeconfig = join(work, 'gateway.kubeconfig');
writeFileSync(kubeconfig, model.kubeconfig('gateway'), { mode: 0o600 });
const labelOf = () => model.node('gw-1').metadata.labels?.[label.key];
const stampOf = () =>
  model.egressGatewayPolicy('egressguard-k3s-vpn-egress-vpn').metadata.annotations?.[
    'egressguard.dev/reapplied-at'
  ];

/** Milliseconds from `start` until `check` holds, polled every 5 ms; Infinity after 60 s. */
const until = async (check, start = performance.now()) => {
  while (!check()) {
    if (performance.now() - start > 60_000) return Infinity;
    await sleep(5);
  }
  return performance.now() - start;
};

const child = spawn(
  process.execPath,
  [
    join(repo, 'bin/egressguard.js'),
    'run',
    join(example, 'policy.yaml'),
    '--facts',
    join(example, 'facts.json'),
    '--k8s',
    '--kubeconfig',
    kubeconfig,
    '--node',
    'gw-1',
    '--json',
    '--netns',
    lab.ns('host'),
    '--state-dir',
    join(work, 'state'),
  ],
  { env: { ...process.env, EGRESSGUARD_ROOTNS_GUARD: '1' }, stdio: ['ignore', 'pipe', 'inherit'] },
);
// The resident's JSON log: its fast path reports, per removal, how long the patch waited for an
// earlier call and how long the request took (steps.wait, steps.patch).
const unmarks = [];
let pending = '';
child.stdout.setEncoding('utf8');
child.stdout.on('data', (chunk) => {
  pending += chunk;
  let newline;
  while ((newline = pending.indexOf('\n')) !== -1) {
    const line = pending.slice(0, newline);
    pending = pending.slice(newline + 1);
    try {
      const entry = JSON.parse(line);
      if (entry.action === 'unmarked' && entry.steps !== undefined) unmarks.push(entry);
    } catch {
      // not a log line
    }
  }
});

const faults = {
  down: { off: () => lab.setLinkDown(TUNNEL), on: () => lab.setLinkUp(TUNNEL) },
  deleted: { off: () => lab.deleteLink(TUNNEL), on: () => lab.recreateLink(TUNNEL) },
  'no carrier': { off: () => lab.setCarrierOff(TUNNEL), on: () => lab.setCarrierOn(TUNNEL) },
};
const removed = Object.fromEntries(Object.keys(faults).map((k) => [k, []]));
// Where a removal's time went, from the fault command issued: the command's own run, the
// resident seeing the link event (ip monitor, the pipe, the event loop), waiting for an earlier
// API call, the PATCH, and the model's view of it (this process polls every 5 ms).
const steps = { command: [], seen: [], wait: [], patch: [], observed: [] };
const restored = Object.fromEntries(Object.keys(faults).map((k) => [k, []]));
const loads = [];
try {
  const start = await until(() => labelOf() === label.value && stampOf() !== undefined);
  if (start === Infinity) throw new Error('the resident never labelled the node');
  for (let round = 1; round <= rounds; round++) {
    for (const [name, fault] of Object.entries(faults)) {
      loads.push(loadavg()[0]);
      const logged = unmarks.length;
      const issued = Date.now();
      const clock = performance.now();
      await fault.off();
      steps.command.push(Date.now() - issued);
      const took = await until(() => labelOf() === undefined, clock);
      removed[name].push(took);
      // The fast path's entry for this removal, if it was the fast path that removed the label.
      const deadline = performance.now() + 5000;
      while (unmarks.length === logged && performance.now() < deadline) await sleep(5);
      const entry = unmarks[logged];
      if (entry !== undefined) {
        const done = Date.parse(entry.time);
        steps.seen.push(done - entry.steps.patch - entry.steps.wait - issued);
        steps.wait.push(entry.steps.wait);
        steps.patch.push(entry.steps.patch);
        steps.observed.push(issued + took - done);
      }
      const before = stampOf();
      await sleep(300); // let the fault settle before the tunnel returns
      const back = performance.now();
      await fault.on();
      restored[name].push(
        await until(() => labelOf() === label.value && stampOf() !== before, back),
      );
      await sleep(300);
    }
  }
} finally {
  child.kill('SIGTERM');
  await new Promise((resolve) => child.once('exit', resolve));
  await model.close();
  await lab.destroy();
  rmSync(work, { recursive: true, force: true });
}

const round = (s) =>
  Object.fromEntries(
    Object.entries(s).map(([k, v]) => [k, typeof v === 'number' ? Math.round(v) : v]),
  );
const result = {
  date: new Date().toISOString(),
  rounds,
  loadAverage: { min: Math.min(...loads), max: Math.max(...loads) },
  removedMs: Object.fromEntries(Object.entries(removed).map(([k, v]) => [k, round(stats(v))])),
  // Removals the fast path did (a link event); the others were done by a periodic pass.
  removedByLinkEvent: steps.patch.length,
  removalStepsMs: Object.fromEntries(Object.entries(steps).map(([k, v]) => [k, round(stats(v))])),
  restoredAndReappliedMs: Object.fromEntries(
    Object.entries(restored).map(([k, v]) => [k, round(stats(v))]),
  ),
};
mkdirSync(outDir, { recursive: true });
writeFileSync(join(outDir, 'gateway-label.json'), `${JSON.stringify(result, null, 2)}\n`);
console.log(JSON.stringify(result, null, 2));
