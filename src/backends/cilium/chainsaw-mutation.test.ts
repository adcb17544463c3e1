import { spawn } from 'node:child_process';
import { chmodSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { parse, parseAllDocuments } from 'yaml';
import { readHostFacts } from '../../facts/index.js';
import { lowerForHost } from '../../ir/index.js';
import { loadPolicy } from '../../policy/index.js';
import { emitChainsawFromPolicy } from './chainsaw-from-policy.js';
import { createCiliumCompiler, MANIFESTS_ARTIFACT } from './cilium-compiler.js';
import type { CiliumManifest, EgressPeerRule, NetworkPolicyRule } from './cilium-manifests.js';
import { CiliumModel, type ModelPod } from '../../../sim/cilium/cilium-model.js';
import {
  API_SERVICE,
  DNS_POD,
  DNS_SERVICE,
  gatewayLabels,
  gatewayNetwork,
  type Steering,
  workerNode,
} from '../../../sim/cilium/model-cluster.js';

/*
 * The generated chainsaw suite against a MODEL cluster (no cluster runs here): every test must
 * pass on a healthy one, and fail on one where a single layer is broken. The suite's own scripts
 * run under sh as written; `kubectl`, and the probe pods' `nc`, `wget` and `ping`, are shims that
 * ask this process, which answers from the model of Cilium (cilium-model.ts) and a model of the
 * gateway node's units: the tunnel, egressguard's resident (it keeps the Node label while the
 * tunnel is up and takes it off on SIGTERM, docs/kubernetes.md), and the node's Cilium agent,
 * which copies the Node's labels to its CiliumNode (daemon/cmd/local_node_sync.go SyncLocalNode,
 * pkg/nodediscovery mutateNodeResource), the object the egress gateway reads. Time is virtual: a
 * `sleep` shim counts seconds against the script's timeout and ends the script past it.
 */

const EXAMPLE = fileURLToPath(
  new URL('../../../testdata/policies/valid/k3s-vpn-egress/', import.meta.url),
);
// What the echo service beyond the internet sees of traffic that leaves by the site's uplink:
// the site's public NAT address, which is none of the gateway's own addresses.
const SITE_NAT = '198.51.100.200';

/** One broken layer of the model cluster. */
type Mutation =
  | 'resident-keeps-label'
  | 'agent-stale'
  | 'no-node-routing'
  | 'unsteered'
  | 'no-deny-rules'
  | 'lan-allowed'
  | 'no-exclusions'
  | 'far-side-silent';

interface World {
  readonly model: CiliumModel;
  readonly node: string;
  nodeLabels: Record<string, string>;
  /** The CiliumNode's labels: what the egress gateway selects by. */
  ciliumNodeLabels: Record<string, string>;
  readonly setNetwork: (up: boolean) => void;
  tunnelUp: boolean;
  residentRunning: boolean;
  pods: ModelPod[];
  readonly mutation: Mutation | undefined;
  readonly log: string[];
}

const policy = loadPolicy(join(EXAMPLE, 'policy.yaml')).policy;
if (policy === undefined) throw new Error('k3s-vpn-egress is invalid');
const facts = readHostFacts(join(EXAMPLE, 'facts.json'));
const ir = lowerForHost(policy, facts);
const artifacts = createCiliumCompiler().compile(ir, { options: { ciliumVersion: '1.18' } });
const manifests = parseAllDocuments(
  artifacts.find((a) => a.name === MANIFESTS_ARTIFACT)?.content ?? '',
).map((d) => d.toJS() as CiliumManifest);
const steering = parse(
  artifacts.find((a) => a.name === 'gateway-node.steering.json')?.content ?? '{}',
) as Steering;
const exit = ir.cluster?.tunnelExits['tun0'];
if (exit === undefined) throw new Error('the example names no tunnel exit');
const EXIT = exit.addresses[0] as string;
// The far side of the example's UDP probes echoes datagrams (the suite README's assumption).
const UDP_ECHO = new Set(['198.51.100.9:443']);

function createWorld(mutation: Mutation | undefined): World {
  const tunnels = ['tun0'];
  const node = facts.hostname;
  const network = (up: boolean) =>
    gatewayNetwork(
      facts,
      mutation === 'no-node-routing' ? undefined : steering,
      tunnels,
      up ? 'up' : 'down',
    );
  const labels = { 'kubernetes.io/hostname': node, ...gatewayLabels(ir) };
  const model = new CiliumModel(
    {
      nodes: [
        { name: node, labels, internalIPs: ['192.168.1.21'], network: network(true) },
        workerNode(),
      ],
      namespaces: [
        { name: 'default', labels: {} },
        { name: 'kube-system', labels: {} },
        { name: 'egressguard-chainsaw', labels: {} },
      ],
      pods: [{ ...DNS_POD, node }],
      services: [DNS_SERVICE, API_SERVICE('192.168.1.21')],
    },
    { ciliumVersion: '1.18' },
  );
  for (const m of manifests) {
    if (m.kind === 'CiliumEgressGatewayPolicy') {
      if (mutation === 'no-exclusions')
        model.apply({ ...m, spec: { ...m.spec, excludedCIDRs: [] } });
      else if (mutation === 'unsteered') {
        // The steering policy refused by Cilium and no backstop: today's fail-open case.
        if (!m.metadata.name.endsWith('-backstop')) {
          model.apply({
            ...m,
            spec: { ...m.spec, egressGateway: { ...m.spec.egressGateway, egressIP: '10.200.0.2' } },
          });
        }
      } else model.apply(m);
    } else if (mutation === 'no-deny-rules') {
      model.apply({ ...m, specs: (m.specs ?? []).map((r) => ({ ...r, egressDeny: [] })) });
    } else if (mutation === 'lan-allowed') {
      const open = (peer: EgressPeerRule): EgressPeerRule =>
        peer.toCIDRSet === undefined
          ? peer
          : { ...peer, toCIDRSet: peer.toCIDRSet.map((c) => ({ cidr: c.cidr })) };
      const specs: NetworkPolicyRule[] = (m.specs ?? []).map((r) =>
        r.egress === undefined ? r : { ...r, egress: r.egress.map(open) },
      );
      model.apply({ ...m, specs });
    } else model.apply(m);
  }
  return {
    model,
    node,
    nodeLabels: { ...labels },
    ciliumNodeLabels: { ...labels },
    setNetwork: (up) => {
      model.setNodeNetwork(node, network(up));
    },
    tunnelUp: true,
    residentRunning: true,
    pods: [{ ...DNS_POD, node }],
    mutation,
    log: [],
  };
}

/** The gateway node's agent copies the Node's labels to its CiliumNode (unless it is stale). */
function syncCiliumNode(world: World): void {
  if (world.mutation === 'agent-stale') return;
  world.ciliumNodeLabels = { ...world.nodeLabels };
  world.model.setNodeLabels(world.node, world.ciliumNodeLabels);
}

function setLabel(world: World, on: boolean): void {
  const { key, value } = ir.podClasses[0]?.killSwitch?.nodeLabel ?? { key: '', value: '' };
  if (on) world.nodeLabels = { ...world.nodeLabels, [key]: value };
  else
    world.nodeLabels = Object.fromEntries(
      Object.entries(world.nodeLabels).filter(([k]) => k !== key),
    );
  syncCiliumNode(world);
}

function reapplyAll(world: World): void {
  for (const m of manifests) {
    if (m.kind === 'CiliumEgressGatewayPolicy' && !m.metadata.name.endsWith('-backstop')) {
      try {
        world.model.reapplyEgressGatewayPolicy(m.metadata.name);
      } catch {
        // not applied in this world
      }
    }
  }
}

/** systemctl ACTION UNIT on the gateway node, with what the resident does about it. */
function systemctl(world: World, action: string, unit: string): void {
  world.log.push(`systemctl ${action} ${unit}`);
  const residentActs = world.mutation !== 'resident-keeps-label';
  if (unit.startsWith('wg-quick@')) {
    world.tunnelUp = action === 'start';
    world.setNetwork(world.tunnelUp);
    if (world.residentRunning && (world.tunnelUp || residentActs)) {
      setLabel(world, world.tunnelUp);
      if (world.tunnelUp) reapplyAll(world);
    }
  } else if (unit === 'egressguard-gateway.service') {
    if (action === 'stop') {
      world.residentRunning = false;
      // On SIGTERM the resident takes the label off.
      if (residentActs) setLabel(world, false);
    } else {
      world.residentRunning = true;
      setLabel(world, world.tunnelUp || !residentActs);
      if (world.tunnelUp) reapplyAll(world);
    }
  }
}

function matchesSelector(selector: string, labels: Record<string, string>): boolean {
  return selector.split(',').every((part) => {
    const [k, v] = part.split('=');
    return labels[k ?? ''] === v;
  });
}

interface Call {
  readonly tool: string;
  readonly args: string[];
  readonly stdin: string;
  readonly pod: string | undefined;
  readonly world: string;
}
interface Answer {
  readonly stdout: string;
  readonly code: number;
  /** For kubectl exec: a script to run as the pod. */
  readonly exec?: { readonly pod: string; readonly script: string };
}

function kubectl(world: World, args: string[], stdin: string): Answer {
  const rest = args.join(' ');
  const ok = (stdout = ''): Answer => ({ stdout, code: 0 });
  if (args[0] === 'exec') {
    const ns = args[args.indexOf('-n') + 1] ?? '';
    const pod = args[args.indexOf('-n') + 2] ?? '';
    return { stdout: '', code: 0, exec: { pod: `${ns}/${pod}`, script: stdin } };
  }
  if (args[0] === 'wait' && rest.includes('condition=Ready')) {
    const ns = args[args.indexOf('-n') + 1];
    const pod = (args[args.indexOf('-n') + 2] ?? '').replace('pod/', '');
    return world.pods.some((p) => p.namespace === ns && p.name === pod)
      ? ok()
      : { stdout: '', code: 1 };
  }
  if (args[0] === 'get' && (args[1] === 'nodes' || args[1] === 'ciliumnodes')) {
    const selector = args[args.indexOf('-l') + 1] ?? '';
    const labels = args[1] === 'nodes' ? world.nodeLabels : world.ciliumNodeLabels;
    const kind = args[1] === 'nodes' ? 'node' : 'ciliumnode.cilium.io';
    return ok(matchesSelector(selector, labels) ? `${kind}/${world.node}\n` : '');
  }
  if (args.includes('delete') && args.includes('job')) return ok();
  if (args.includes('wait') && rest.includes('condition=complete')) return ok();
  if (args[0] === 'apply' && args[2] === '-') {
    const job = parse(stdin) as {
      spec: { template: { spec: { containers: { command: string[] }[] } } };
    };
    const command = job.spec.template.spec.containers[0]?.command ?? [];
    systemctl(world, command.at(-2) ?? '', command.at(-1) ?? '');
    return ok();
  }
  if (args[0] === 'label' && args[1] === 'node') {
    world.log.push(`label ${rest}`);
    setLabel(world, true);
    return ok();
  }
  if (args[0] === 'annotate' && args[1] === 'ciliumegressgatewaypolicy') {
    world.model.reapplyEgressGatewayPolicy(args[2] ?? '');
    return ok();
  }
  throw new Error(`The model cluster does not implement kubectl ${rest}`);
}

function evaluate(
  world: World,
  pod: string,
  to: string,
  protocol: 'tcp' | 'udp' | 'icmp',
  port?: number,
) {
  const [namespace, name] = pod.split('/') as [string, string];
  return world.model.evaluate({
    from: { namespace, name },
    to,
    protocol,
    ...(port === undefined ? {} : { port }),
    ...(protocol === 'icmp' ? { icmpType: 8 } : {}),
  }).egress;
}

/** What the far side answers a probe pod's nc, wget or ping. */
function inPod(world: World, call: Call): Answer {
  const pod = call.pod ?? '';
  const positional = call.args.filter(
    (a, i) => !a.startsWith('-') && !/^-[wTWc]$/.test(call.args[i - 1] ?? ''),
  );
  if (call.tool === 'wget') {
    const url = new URL(call.args.at(-1) ?? '');
    const egress = evaluate(world, pod, url.hostname, 'tcp', Number(url.port || 80));
    if (egress.kind !== 'leaves') return { stdout: '', code: 1 };
    const seen = egress.path === 'egress-gateway' && egress.device === 'tun0' ? EXIT : SITE_NAT;
    return { stdout: `${seen}\n`, code: 0 };
  }
  if (call.tool === 'ping') {
    const egress = evaluate(world, pod, positional.at(-1) ?? '', 'icmp');
    return { stdout: '', code: egress.kind === 'leaves' || egress.kind === 'in-cluster' ? 0 : 1 };
  }
  // nc [-z] [-u] -w N HOST PORT
  const udp = call.args.includes('-u');
  const [host, portText] = positional.slice(-2) as [string, string];
  const port = Number(portText);
  const egress = evaluate(world, pod, host, udp ? 'udp' : 'tcp', port);
  const through = egress.kind === 'leaves' || egress.kind === 'in-cluster';
  if (!through) return { stdout: '', code: call.args.includes('-z') ? 1 : 0 };
  if (call.args.includes('-z')) return { stdout: '', code: 0 };
  const query = Buffer.from(call.stdin, 'base64');
  if (port === 53) {
    // A resolver answers a query with its id and the QR bit (RFC 1035 §4.1.1).
    const body = udp ? query : query.subarray(2);
    const reply = Buffer.from(body);
    reply[2] = (reply[2] ?? 0) | 0x80;
    const out = udp ? reply : Buffer.concat([Buffer.from([0, reply.length]), reply]);
    return { stdout: out.toString('base64'), code: 0 };
  }
  const echoes = world.mutation !== 'far-side-silent' && UDP_ECHO.has(`${host}:${port}`);
  return { stdout: echoes ? query.toString('base64') : '', code: 0 };
}

// python3 (the lab's own package, scripts/setup.sh) starts in a fraction of node's time, and the
// suite's scripts call these shims hundreds of times.
const SHIM = `#!/usr/bin/python3 -S
# A model-cluster shim: forwards argv and stdin to the test process and prints its answer.
# -S and a bare socket: the suite's scripts call these shims hundreds of times.
import base64, json, os, socket, sys
body = json.dumps({"tool": os.path.basename(sys.argv[0]), "args": sys.argv[1:], "stdin": base64.b64encode(sys.stdin.buffer.read()).decode(), "pod": os.environ.get("EG_POD"), "world": os.environ["EG_WORLD"]}).encode()
s = socket.create_connection(("127.0.0.1", int(os.environ["EG_PORT"])))
s.sendall(b"POST / HTTP/1.0\\r\\nContent-Length: " + str(len(body)).encode() + b"\\r\\n\\r\\n" + body)
data = b""
while True:
    chunk = s.recv(65536)
    if not chunk:
        break
    data += chunk
answer = json.loads(data.split(b"\\r\\n\\r\\n", 1)[1])
out = base64.b64decode(answer["stdout"]) if answer.get("binary") else answer["stdout"].encode()
sys.stdout.buffer.write(out)
sys.stdout.flush()
sys.exit(answer["code"])
`;

// Virtual time: each `sleep` adds its seconds; past the script's timeout the script is ended.
const SLEEP = `#!/bin/sh
n=$(cat "$EG_CLOCK" 2>/dev/null || echo 0)
n=$((n + \${1%s}))
echo "$n" > "$EG_CLOCK"
if [ "$n" -gt "$EG_TIMEOUT" ]; then kill -TERM "$PPID"; fi
exit 0
`;

let dir: string;
let bin: string;
let server: Server;
let serverPort: number;
// One world per test run, found by the id its scripts carry: a run that outlived its test (a
// timeout) can never act on another's.
const worlds = new Map<string, World>();
let current: World | undefined;

/** Runs a script as chainsaw does, or as a pod does (`as`), with the shims first in PATH. */
function runScript(
  script: string,
  options: { timeoutS: number; as?: string; world: string },
): Promise<{ stdout: string; code: number }> {
  const clock = join(dir, `clock-${Math.random().toString(36).slice(2)}`);
  writeFileSync(clock, '0');
  return new Promise((resolve) => {
    // sh -c, never a script on stdin: the script's commands would inherit it and read it.
    const child = spawn('sh', ['-c', script], {
      stdio: ['ignore', 'pipe', 'ignore'],
      env: {
        ...process.env,
        PATH: `${bin}:${process.env['PATH'] ?? ''}`,
        EG_PORT: String(serverPort),
        EG_WORLD: options.world,
        EG_CLOCK: clock,
        EG_TIMEOUT: String(options.timeoutS),
        ...(options.as === undefined ? {} : { EG_POD: options.as }),
      },
    });
    let stdout = '';
    child.stdout.on('data', (c: Buffer) => {
      stdout += c.toString('utf8');
    });
    child.on('close', (code) => {
      resolve({ stdout, code: code ?? 1 });
    });
  });
}

async function handle(call: Call): Promise<Answer & { binary?: boolean }> {
  const world = worlds.get(call.world);
  if (world === undefined) throw new Error(`no model cluster "${call.world}"`);
  if (call.tool === 'kubectl') {
    const answer = kubectl(world, call.args, Buffer.from(call.stdin, 'base64').toString('utf8'));
    if (answer.exec === undefined) return answer;
    const result = await runScript(answer.exec.script, {
      timeoutS: 30,
      as: answer.exec.pod,
      world: call.world,
    });
    return { stdout: result.stdout, code: result.code };
  }
  const answer = inPod(world, call);
  return call.tool === 'nc' ? { ...answer, binary: true } : answer;
}

type Check = Record<string, boolean>;
interface Op {
  description?: string;
  apply?: { file: string };
  script?: { content: string; timeout: string; check: Check };
}
interface Step {
  name: string;
  try: Op[];
  finally?: Op[];
}

/** chainsaw's check: each key is an expression on $error and $stdout, each value its result. */
function holds(check: Check, result: { stdout: string; code: number }): boolean {
  return Object.entries(check).every(([expression, want]) => {
    let got: boolean;
    if (expression === '($error == null)') got = result.code === 0;
    else {
      const contains = /^\(contains\(\$stdout, '(.*)'\)\)$/.exec(expression);
      const regex = /^\(regex_match\('(.*)', \$stdout\)\)$/.exec(expression);
      if (contains !== null) got = result.stdout.includes(contains[1] ?? '');
      else if (regex !== null) got = new RegExp(regex[1] ?? '').test(result.stdout);
      else throw new Error(`The runner does not know the check ${expression}`);
    }
    return got === want;
  });
}

/** Runs one generated test as chainsaw would: steps in order, try then finally, stop at a failure. */
async function runTest(
  testDir: string,
  mutation: Mutation | undefined,
): Promise<{ passed: boolean; failedAt: string | undefined }> {
  const world = createWorld(mutation);
  const id = `${String(worlds.size)}-${mutation ?? 'healthy'}`;
  worlds.set(id, world);
  current = world;
  const test = parse(readFileSync(join(testDir, 'chainsaw-test.yaml'), 'utf8')) as {
    spec: { steps: Step[] };
  };
  const runOp = async (op: Op): Promise<boolean> => {
    if (op.apply !== undefined) {
      const pod = parse(readFileSync(join(testDir, op.apply.file), 'utf8')) as {
        metadata: { name: string; namespace: string; labels: Record<string, string> };
      };
      const { name, namespace, labels } = pod.metadata;
      const added: ModelPod = {
        name,
        namespace,
        labels,
        ips: [`10.42.2.${String(100 + world.pods.length)}`],
        node: 'k3s-worker-1',
      };
      world.pods.push(added);
      world.model.setPods(world.pods);
      return true;
    }
    const script = op.script;
    if (script === undefined) return true;
    const result = await runScript(script.content, {
      timeoutS: Number(script.timeout.replace('s', '')),
      world: id,
    });
    return holds(script.check, result);
  };
  for (const step of test.spec.steps) {
    let failed = false;
    for (const op of step.try) {
      if (!(await runOp(op))) {
        failed = true;
        break;
      }
    }
    for (const op of step.finally ?? []) await runOp(op);
    if (failed) return { passed: false, failedAt: step.name };
  }
  return { passed: true, failedAt: undefined };
}

let suite: string;

beforeAll(async () => {
  dir = mkdtempSync(join(tmpdir(), 'chainsaw-mutation-'));
  bin = join(dir, 'bin');
  mkdirSync(bin);
  for (const tool of ['kubectl', 'nc', 'wget', 'ping']) {
    writeFileSync(join(bin, tool), SHIM);
    chmodSync(join(bin, tool), 0o755);
  }
  writeFileSync(join(bin, 'sleep'), SLEEP);
  chmodSync(join(bin, 'sleep'), 0o755);
  server = createServer((request, response) => {
    const chunks: Buffer[] = [];
    request.on('data', (c: Buffer) => chunks.push(c));
    request.on('end', () => {
      const call = JSON.parse(Buffer.concat(chunks).toString('utf8')) as Call;
      handle(call).then(
        (answer) => response.end(JSON.stringify(answer)),
        (error: unknown) =>
          response.end(JSON.stringify({ stdout: `${(error as Error).message}\n`, code: 97 })),
      );
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  serverPort = (server.address() as AddressInfo).port;
  suite = join(dir, 'suite');
  const { files } = emitChainsawFromPolicy({
    policy: policy,
    ir,
    facts,
    options: {},
  });
  for (const file of files) {
    mkdirSync(dirname(join(suite, file.name)), { recursive: true });
    writeFileSync(join(suite, file.name), file.content);
  }
});

afterAll(async () => {
  await new Promise<void>((resolve) =>
    server.close(() => {
      resolve();
    }),
  );
  rmSync(dir, { recursive: true, force: true });
});

const TESTS = ['r-net-06-l3-safety-critical', 'r-net-07-l3', 'r-net-08-l2'] as const;

// Hundreds of short processes per test: minutes on a loaded machine, so a generous bound (a guard
// against a hang, not a measurement).
describe('the generated chainsaw suite against a model cluster', { timeout: 900_000 }, () => {
  it.each(TESTS)('%s passes on a healthy cluster', async (name) => {
    const result = await runTest(join(suite, name), undefined);
    expect(result, current?.log.join('\n')).toEqual({ passed: true, failedAt: undefined });
  });

  // For each test, the layers it proves: with that one layer broken, it must fail.
  const cases: [string, Mutation, string][] = [
    [
      'r-net-06-l3-safety-critical',
      'resident-keeps-label',
      'the resident never takes the label off',
    ],
    [
      'r-net-06-l3-safety-critical',
      'agent-stale',
      "the gateway's agent never copies the Node's labels to its CiliumNode",
    ],
    [
      'r-net-06-l3-safety-critical',
      'no-node-routing',
      "the gateway node has no policy routing for Cilium's SNAT address",
    ],
    [
      'r-net-06-l3-safety-critical',
      'unsteered',
      'the class leaves unsteered by the site NAT (steering refused, no backstop)',
    ],
    [
      'r-net-06-l3-safety-critical',
      'far-side-silent',
      'the far side of a UDP probe echoes nothing',
    ],
    [
      'r-net-07-l3',
      'no-exclusions',
      'the LAN and the cluster are steered too, so they die with the tunnel',
    ],
    [
      'r-net-07-l3',
      'lan-allowed',
      'the address rules lose their exceptions, so the LAN is allowed',
    ],
    ['r-net-08-l2', 'no-deny-rules', 'mail is not denied'],
  ];
  it.each(cases)('%s fails when %s (%s)', async (name, mutation) => {
    const result = await runTest(join(suite, name), mutation);
    expect(result.passed, current?.log.join('\n')).toBe(false);
  });
});
