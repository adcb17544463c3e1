import { spawn } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, unlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';
import { execa } from 'execa';
import { afterAll, beforeAll, expect } from 'vitest';
import { readStatus, type HostStatus } from '../../../src/apply/index.js';
import { backendOf, createHostTarget, hostContext } from '../../../src/host/index.js';
import {
  createLab,
  sendPackets,
  type Lab,
  type LinkRef,
  type PacketSpec,
  type Topology,
} from '../../../src/prove/index.js';

/**
 * A lab shaped like testdata/policies/valid/linux-vpn-gateway/facts.json, so the example policy
 * and its facts apply unchanged: a gateway ("host") with the uplink eth0, the LAN lan0, the tunnel
 * tun0 and the two workload interfaces vwl0 (class vpn) and iwl0 (class internet). Every address
 * beyond the host is from the documentation ranges; nothing exists outside the lab's namespaces.
 */
export const EXAMPLE = fileURLToPath(
  new URL('../../../testdata/policies/valid/linux-vpn-gateway/', import.meta.url),
);
export const POLICY_A = join(EXAMPLE, 'policy.yaml');
export const FACTS = join(EXAMPLE, 'facts.json');

export const VPN_SRC4 = '10.10.0.5';
export const VPN_SRC6 = '2001:db8:10::5';
export const INET_SRC4 = '10.10.1.5';
/** An internet destination the vpn class must reach only through the tunnel. */
export const DST4 = '203.0.113.7';
export const DST6 = '2001:db8:ff::7';
export const HOST = 'host';
export const TUNNEL: LinkRef = { node: HOST, iface: 'tun0' };

export const gatewayTopology: Topology = {
  nodes: {
    vpnwl: {
      routes: [
        { to: 'default', via: '10.10.0.1' },
        { to: 'default', via: '2001:db8:10::1' },
      ],
    },
    inetwl: { routes: [{ to: 'default', via: '10.10.1.1' }] },
    host: {
      forwarding: true,
      routes: [
        { to: 'default', via: '198.51.100.1' },
        { to: 'default', via: '2001:db8:ffff::1' },
      ],
    },
    internet: {},
    'tunnel-peer': {},
    lan: { routes: [{ to: 'default', via: '192.168.1.1' }] },
  },
  links: [
    {
      a: { node: HOST, iface: 'vwl0', addresses: ['10.10.0.1/24', '2001:db8:10::1/64'] },
      b: { node: 'vpnwl', iface: 'eth0', addresses: [`${VPN_SRC4}/24`, `${VPN_SRC6}/64`] },
    },
    {
      a: { node: HOST, iface: 'iwl0', addresses: ['10.10.1.1/24'] },
      b: { node: 'inetwl', iface: 'eth0', addresses: [`${INET_SRC4}/24`] },
    },
    {
      a: { node: HOST, iface: 'eth0', addresses: ['198.51.100.2/24', '2001:db8:ffff::2/64'] },
      b: { node: 'internet', iface: 'eth0', addresses: ['198.51.100.1/24', '2001:db8:ffff::1/64'] },
    },
    {
      // The VPN assigns both families (without an IPv6 address, the masquerade would give the
      // class's IPv6 another interface's address: src/ir/masquerade-source.ts).
      a: { node: HOST, iface: 'tun0', addresses: ['10.200.0.2/32', '2001:db8:200::2/128'] },
      b: {
        node: 'tunnel-peer',
        iface: 'tun0',
        addresses: ['10.200.0.1/32', '2001:db8:200::1/128'],
      },
      mtu: 1420,
      // Like a real L3 tunnel: the steering route `default dev tun0` has no gateway.
      pointToPoint: true,
    },
    {
      a: { node: HOST, iface: 'lan0', addresses: ['192.168.1.1/24'] },
      b: { node: 'lan', iface: 'eth0', addresses: ['192.168.1.10/24'] },
    },
  ],
};

/** The far side of the uplink: a vpn packet seen here has leaked. */
export const UPLINK_FAR: LinkRef = { node: 'internet', iface: 'eth0' };
/** The far side of the tunnel: vpn traffic must arrive here. */
export const TUNNEL_FAR: LinkRef = { node: 'tunnel-peer', iface: 'tun0' };

/** Builds the gateway lab; destroy it in a `finally` (or `afterAll`). */
export function createGatewayLab(): Promise<Lab> {
  return createLab(gatewayTopology);
}

/** A temporary state directory (and room for policy variants), removed by `dispose`. */
export function createTempDir(prefix: string): { path: string; dispose(): void } {
  const path = mkdtempSync(join(tmpdir(), `${prefix}-`));
  return {
    path,
    dispose() {
      rmSync(path, { recursive: true, force: true });
    },
  };
}

/**
 * One gateway lab for a describe block (created before its tests, destroyed after, also on
 * failure), and `fresh(name)`: a state directory of its own for a case, with nothing of ours live.
 */
export function useGatewayLab(prefix: string): {
  readonly lab: () => Lab;
  readonly fresh: (name: string) => Promise<string>;
  /** A state directory of its own, removed after the block; live state is left as it is. */
  readonly tempDir: (name: string) => string;
} {
  let lab: Lab | undefined;
  const dirs: ReturnType<typeof createTempDir>[] = [];
  beforeAll(async () => {
    lab = await createGatewayLab();
  });
  afterAll(async () => {
    await lab?.destroy();
    for (const dir of dirs) dir.dispose();
  });
  const current = (): Lab => {
    if (lab === undefined) throw new Error('the gateway lab is not up (beforeAll failed)');
    return lab;
  };
  const tempDir = (name: string): string => {
    const dir = createTempDir(`${prefix}-${name}`);
    dirs.push(dir);
    return dir.path;
  };
  return {
    lab: current,
    tempDir,
    fresh: async (name) => {
      const path = tempDir(name);
      expect((await cli(['remove', ...target(current(), path)])).exitCode).toBe(0);
      return path;
    },
  };
}

/**
 * Policy B: the example with one more network excepted from the kill switch, so both the table
 * (the exception set) and the routing (one more throw route) differ from policy A.
 */
export function writePolicyB(dir: string): string {
  const text = readFileSync(POLICY_A, 'utf8');
  const changed = text.replace('lan: [192.168.0.0/16]', 'lan: [192.168.0.0/16, 172.16.0.0/12]');
  if (changed === text) throw new Error('Cannot derive policy B: the example policy changed');
  const file = join(dir, 'policy-b.yaml');
  writeFileSync(file, changed);
  return file;
}

const BIN = fileURLToPath(new URL('../../../bin/egressguard.js', import.meta.url));

/** The environment of every CLI child: the root-namespace guard on, faults only when given. */
export function cliEnv(faults?: string): Record<string, string> {
  return {
    NO_COLOR: '1',
    EGRESSGUARD_ROOTNS_GUARD: '1',
    EGRESSGUARD_FAULTS: faults ?? '',
  };
}

export interface CliResult {
  readonly exitCode: number | undefined;
  readonly signal: string | undefined;
  readonly stdout: string;
  readonly stderr: string;
}

/** Runs the built CLI (`npm run build` first) against the lab's host namespace. */
export async function cli(
  args: readonly string[],
  options: { readonly faults?: string } = {},
): Promise<CliResult> {
  const result = await execa(process.execPath, [BIN, ...args], {
    env: cliEnv(options.faults),
    reject: false,
    timeout: 110_000, // inside the 120 s test timeout: a bound on a hang, not a target
  });
  return {
    exitCode: result.exitCode,
    signal: result.signal,
    stdout: result.stdout,
    stderr: result.stderr,
  };
}

/** A CLI child still running: its result, and a handshake on what it has said on stderr. */
export interface RunningCli {
  readonly result: Promise<CliResult>;
  /** Resolves with stderr once it matches `pattern`; rejects if the CLI exits before it does. */
  stderrMatching(pattern: RegExp): Promise<string>;
}

/** Starts the built CLI; like cli(), but the test can wait for a line before the CLI exits. */
export function startCli(
  args: readonly string[],
  options: { readonly faults?: string } = {},
): RunningCli {
  const child = execa(process.execPath, [BIN, ...args], {
    env: cliEnv(options.faults),
    reject: false,
    timeout: 110_000, // as cli()
  });
  let stderr = '';
  const waiters: (() => void)[] = [];
  child.stderr.on('data', (chunk: Buffer) => {
    stderr += chunk.toString();
    for (const wake of waiters) wake();
  });
  const result = child.then((r) => ({
    exitCode: r.exitCode,
    signal: r.signal,
    stdout: r.stdout,
    stderr: r.stderr,
  }));
  return {
    result,
    stderrMatching(pattern) {
      return new Promise((resolve, reject) => {
        const check = (): void => {
          if (pattern.test(stderr)) resolve(stderr);
        };
        waiters.push(check);
        check();
        void result.then((r) => {
          if (pattern.test(stderr)) resolve(stderr);
          else
            reject(
              new Error(
                `The CLI exited (${String(r.exitCode)}) before saying ${String(pattern)}: ${r.stderr}`,
              ),
            );
        });
      });
    },
  };
}

/** `--netns`/`--state-dir` for the lab's gateway. */
export function target(lab: Lab, stateDir: string): string[] {
  return ['--netns', lab.ns(HOST), '--state-dir', stateDir];
}

/** Applies a policy with the example's facts; throws with the CLI's output when it fails. */
export async function apply(
  lab: Lab,
  stateDir: string,
  policy: string,
  extra: readonly string[] = [],
): Promise<{ generation: number; hash: string; changed: boolean; deferred: string[] }> {
  const result = await cli([
    'apply',
    policy,
    '--facts',
    FACTS,
    '--json',
    ...extra,
    ...target(lab, stateDir),
  ]);
  if (result.exitCode !== 0) {
    throw new Error(`apply ${policy} exited ${result.exitCode}: ${result.stderr}`);
  }
  return JSON.parse(result.stdout) as {
    generation: number;
    hash: string;
    changed: boolean;
    deferred: string[];
  };
}

/** `status --json` and its exit code. */
export async function status(
  lab: Lab,
  stateDir: string,
): Promise<HostStatus & { exitCode: number | undefined }> {
  const result = await cli(['status', '--json', ...target(lab, stateDir)]);
  if (result.stdout.trim() === '') {
    throw new Error(`status exited ${result.exitCode} without output: ${result.stderr}`);
  }
  return { ...(JSON.parse(result.stdout) as HostStatus), exitCode: result.exitCode };
}

/**
 * `status` in this process: the very function the CLI runs (readStatus on the CLI's target),
 * without a node start-up, for polling that must resolve to tens of milliseconds.
 */
export async function statusInProcess(lab: Lab, stateDir: string): Promise<HostStatus> {
  const target = createHostTarget({ netns: lab.ns(HOST), stateDir });
  return readStatus(hostContext(target, backendOf(target)));
}

/**
 * The host config hash the CLI compiles a policy to with the example's facts (`plan --json`):
 * the built CLI's, so it matches what `apply` stamps even while src/ and dist/ differ.
 */
export async function hashOf(lab: Lab, stateDir: string, policy: string): Promise<string> {
  const result = await cli(['plan', policy, '--facts', FACTS, '--json', ...target(lab, stateDir)]);
  if (result.stdout.trim() === '') {
    throw new Error(`plan ${policy} exited ${result.exitCode}: ${result.stderr}`);
  }
  return (JSON.parse(result.stdout) as { hash: string }).hash;
}

/** The hash stamped in our live table, or null when the table is gone (~20 ms, no CLI). */
export async function liveStamp(lab: Lab): Promise<string | null> {
  return /eg-hash:([0-9a-f]{64})/.exec(await ownTableJson(lab))?.[1] ?? null;
}

/** Everything of our table as the kernel lists it (terse: no set elements), as text. */
export async function ownTableJson(lab: Lab): Promise<string> {
  const { stdout } = await lab
    .runner(HOST)
    .run(['nft', '-j', '-t', 'list', 'ruleset'], { effect: 'read' });
  const items = (JSON.parse(stdout) as { nftables: Record<string, Record<string, unknown>>[] })
    .nftables;
  return JSON.stringify(
    items.filter((item) => {
      const body = Object.values(item)[0];
      const name = 'table' in item ? body?.['name'] : body?.['table'];
      return body?.['family'] === 'inet' && name === 'egressguard';
    }),
  );
}

/** What a packet counter of our table had counted when listed. */
export interface CounterReading {
  readonly packets: number;
  readonly bytes: number;
}

/** Our table in full, split into what a load can change and what packets change. */
export interface TableSnapshot {
  /** The listing with set elements and handles, every counter's values taken out. */
  readonly ruleset: string;
  /** Each counter's values by where it is: "counter n_vpn/default", "rule 131.expr[2].counter". */
  readonly counters: ReadonlyMap<string, CounterReading>;
}

/**
 * Our table as the kernel lists it with set elements (`nft -j list ruleset`), for "nothing
 * changed" checks: compare `ruleset` exactly and the counters with `countersGoneBack`.
 *
 * Counter values are not configuration: the kernel counts whatever reaches a rule while the test
 * runs, also packets nobody in the test sends. The lab's nodes keep sending IPv6 router
 * solicitations to ff02::2, which the forwarding gateway has joined, and our input chains count
 * them as neighbour discovery: since Linux commit bd11f0741fa5 (RFC 7559 backoff, 4.9) the default
 * router_solicitations is -1, unlimited, every 4 s, 8 s, 16 s… up to an hour (seen in this lab:
 * +3 s, +10 s, +23 s after the links came up). On a loaded machine one lands between two listings
 * now and then. A reload or a recreated counter still shows: a new handle in `ruleset`, or a value
 * that went back.
 */
export async function ownTableSnapshot(lab: Lab): Promise<TableSnapshot> {
  const { stdout } = await lab
    .runner(HOST)
    .run(['nft', '-j', 'list', 'ruleset'], { effect: 'read' });
  const items = (JSON.parse(stdout) as { nftables: Record<string, Record<string, unknown>>[] })
    .nftables;
  const counters = new Map<string, CounterReading>();
  const strip = (value: unknown, at: string): unknown => {
    if (Array.isArray(value)) return value.map((v, i) => strip(v, `${at}[${i}]`));
    if (typeof value !== 'object' || value === null) return value;
    const { packets, bytes, ...rest } = value as Record<string, unknown>;
    const counted = typeof packets === 'number' && typeof bytes === 'number';
    if (counted) counters.set(at, { packets, bytes });
    return Object.fromEntries(
      Object.entries(counted ? rest : (value as Record<string, unknown>)).map(([k, v]) => [
        k,
        strip(v, `${at}.${k}`),
      ]),
    );
  };
  const ours = items.filter((item) => {
    const body = Object.values(item)[0];
    const name = 'table' in item ? body?.['name'] : body?.['table'];
    return body?.['family'] === 'inet' && name === 'egressguard';
  });
  const ruleset = ours.map((item) => {
    const [kind = '', body = {}] = Object.entries(item)[0] ?? [];
    const label = `${kind} ${String(body['name'] ?? body['handle'])}`;
    return { [kind]: strip(body, label) };
  });
  return { ruleset: JSON.stringify(ruleset), counters };
}

/** The counters that counted less in `after` than in `before`, or are gone: empty if none. */
export function countersGoneBack(before: TableSnapshot, after: TableSnapshot): string[] {
  return [...before.counters].flatMap(([at, was]) => {
    const now = after.counters.get(at);
    if (now === undefined) return [`${at}: gone`];
    return now.packets < was.packets || now.bytes < was.bytes
      ? [`${at}: ${was.packets} → ${now.packets} packets, ${was.bytes} → ${now.bytes} bytes`]
      : [];
  });
}

/** The routing rules and the routes of one table, both families, one line each. */
export async function routingListing(lab: Lab, table: number): Promise<string> {
  const runner = lab.runner(HOST);
  const lines: string[] = [];
  for (const family of ['-4', '-6']) {
    const rules = await runner.run(['ip', family, 'rule', 'show'], { effect: 'read' });
    const routes = await runner.run(['ip', family, 'route', 'show', 'table', String(table)], {
      effect: 'read',
      allowFailure: true,
    });
    lines.push(rules.stdout.trim(), routes.stdout.trim());
  }
  return lines.join('\n');
}

/**
 * Nonce'd traffic from one node until stopped or `maxMs` is over: back-to-back batches of the
 * lab's sender. Each batch starts a new sender process, so `lanes` loops run staggered to cover
 * one another's start-up gaps (the gaps would otherwise inflate a measured recovery).
 */
export function startTraffic(
  lab: Lab,
  options: {
    readonly node: string;
    readonly nonce: string;
    readonly packets: readonly PacketSpec[];
    readonly maxMs: number;
    readonly lanes?: number;
  },
): {
  /**
   * Resolves once a whole batch sent after this call is out: the handshake that traffic really
   * ran in the state the test set up (starting a sender takes seconds on a loaded machine).
   */
  flowing(): Promise<void>;
  stop(): Promise<{ sent: number; failed: number; batches: number }>;
} {
  let stopping = false;
  const finished: { startedAt: number; wake(): void }[] = [];
  const started = performance.now();
  const totals = { sent: 0, failed: 0, batches: 0 };
  const lanes = options.lanes ?? 1;
  const batchMs = options.packets.reduce(
    (sum, p) => sum + ((p.count ?? 1) - 1) * (p.intervalMs ?? 0),
    0,
  );
  const lane = async (index: number): Promise<void> => {
    await sleep((index * batchMs) / lanes);
    while (!stopping && performance.now() - started < options.maxMs) {
      const batchStart = performance.now();
      const result = await sendPackets(lab.runner(options.node), {
        nonce: options.nonce,
        packets: options.packets,
        allowFailures: true,
      });
      totals.sent += result.sent;
      totals.failed += result.failed;
      totals.batches++;
      for (const waiter of finished.filter((w) => w.startedAt <= batchStart)) waiter.wake();
    }
  };
  let failure: unknown;
  const loops = Promise.all(Array.from({ length: lanes }, (_, i) => lane(i))).catch(
    (error: unknown) => {
      stopping = true;
      failure = error;
    },
  );
  // A test that fails half-way still ends its traffic before the lab goes.
  lab.defer(async () => {
    stopping = true;
    await loops;
  });
  return {
    flowing() {
      return new Promise((resolve, reject) => {
        const waiter = {
          startedAt: performance.now(),
          wake: () => {
            finished.splice(finished.indexOf(waiter), 1);
            resolve();
          },
        };
        finished.push(waiter);
        void loops.then(() => {
          if (finished.includes(waiter)) {
            reject(new Error('The traffic ended before a batch went out', { cause: failure }));
          }
        });
      });
    },
    async stop() {
      stopping = true;
      await loops;
      if (failure !== undefined) throw new Error('The traffic sender failed', { cause: failure });
      return totals;
    },
  };
}

/** One packet the arrival clock saw: tcpdump's own -tt stamp, in ms since the epoch. */
export interface Arrival {
  readonly at: number;
  readonly family: 4 | 6;
}

/**
 * Wall-clock arrival times of UDP packets to one destination port entering one interface of a
 * node: a stopwatch for recovery, not a counter (the lab kit's observers count, by nonce, behind
 * positive controls). It captures on "any", so it keeps running while the interface is deleted and
 * recreated. The port is unique to one test, so nothing else starts the clock.
 */
export function startArrivalClock(
  lab: Lab,
  options: { readonly node: string; readonly iface: string; readonly dport: number },
): {
  readonly arrivals: readonly Arrival[];
  firstAfter(ms: number, family: 4 | 6, timeoutMs: number): Promise<number | undefined>;
} {
  const running = lab
    .runner(options.node)
    .start(
      [
        'tcpdump',
        '-i',
        'any',
        '-Q',
        'in',
        '-n',
        '-l',
        '-q',
        '-tt',
        '--immediate-mode',
        `udp and dst port ${options.dport}`,
      ],
      { effect: 'read' },
    );
  lab.defer(() => running.stop());
  const arrivals: Arrival[] = [];
  void (async () => {
    // Read until tcpdump ends; if it fails, the clock simply sees no more arrivals.
    for await (const line of running.lines) {
      // "1764434000.123456 tun0  In  IP 10.200.0.2.40001 > 203.0.113.7.20001: UDP, length 40"
      const stamp = /^(\d+)\.(\d{6}) (\S+)\s+In\s+(IP6?) /.exec(line);
      if (stamp?.[1] !== undefined && stamp[2] !== undefined && stamp[3] === options.iface) {
        arrivals.push({
          at: Number(stamp[1]) * 1000 + Number(stamp[2]) / 1000,
          family: stamp[4] === 'IP6' ? 6 : 4,
        });
      }
    }
  })().catch(() => undefined);
  return {
    arrivals,
    async firstAfter(ms, family, timeoutMs) {
      return pollUntil(
        () => Promise.resolve(arrivals.find((a) => a.at >= ms && a.family === family)?.at),
        { timeoutMs, everyMs: 20 },
      );
    },
  };
}

/** `egressguard run` as a child process, its JSON log lines stamped as they arrive. */
export interface Resident {
  readonly log: readonly {
    readonly at: number;
    readonly action: string;
    readonly message: string;
  }[];
  /** Resolves once a log line with this action arrives after `since` (ms since the epoch). */
  waitFor(action: string, since: number, timeoutMs: number): Promise<number | undefined>;
  /** SIGTERM, then the exit code and signal. */
  stop(): Promise<{ code: number | null; signal: string | null; stderr: string }>;
}

export function startResident(
  lab: Lab,
  stateDir: string,
  options: {
    readonly policy: string;
    readonly tickMs: number;
    /** Gather facts from the lab's host, as on a real host, instead of the facts file. */
    readonly liveFacts?: boolean;
  },
): Resident {
  const child = spawn(
    process.execPath,
    [
      BIN,
      'run',
      options.policy,
      ...(options.liveFacts === true ? [] : ['--facts', FACTS]),
      '--tick',
      String(options.tickMs),
      '--json',
      ...target(lab, stateDir),
    ],
    { env: { ...process.env, ...cliEnv() }, stdio: ['ignore', 'pipe', 'pipe'] },
  );
  const exited = new Promise<{ code: number | null; signal: string | null }>((resolve) => {
    child.once('exit', (code, signal) => {
      resolve({ code, signal });
    });
  });
  const log: { at: number; action: string; message: string }[] = [];
  let stderr = '';
  child.stderr.on('data', (chunk: Buffer) => {
    stderr += chunk.toString();
  });
  void (async () => {
    for await (const line of createInterface({ input: child.stdout })) {
      try {
        const entry = JSON.parse(line) as { action: string; message: string };
        log.push({ at: Date.now(), action: entry.action, message: entry.message });
      } catch {
        log.push({ at: Date.now(), action: 'unparsed', message: line });
      }
    }
  })().catch(() => undefined);
  // Whatever happens to the test, the resident process does not outlive the lab.
  lab.defer(async () => {
    if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL');
    await exited;
  });
  return {
    log,
    waitFor(action, since, timeoutMs) {
      return pollUntil(
        () => Promise.resolve(log.find((e) => e.action === action && e.at >= since)?.at),
        { timeoutMs, everyMs: 20 },
      );
    },
    async stop() {
      if (child.exitCode === null && child.signalCode === null) child.kill('SIGTERM');
      return { ...(await exited), stderr };
    },
  };
}

/**
 * Holds the host lock of the lab's gateway state as another live egressguard would: the lock file
 * names a live process (a `sleep`) of this boot with its real start time, so it is not stale.
 */
export function holdHostLock(
  lab: Lab,
  stateDir: string,
  purpose = 'repair the applied state',
): { release(): void } {
  const holder = spawn('sleep', ['120'], { stdio: 'ignore' });
  const pid = holder.pid ?? 0;
  const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
  const lock = join(stateDir, 'netns', lab.ns(HOST), 'lock');
  writeFileSync(
    lock,
    JSON.stringify({
      pid,
      start: stat.slice(stat.lastIndexOf(')') + 2).split(' ')[19],
      boot: readFileSync('/proc/sys/kernel/random/boot_id', 'utf8').trim(),
      token: '0123456789abcdef',
      purpose,
      since: new Date().toISOString(),
    }),
  );
  let released = false;
  const release = (): void => {
    if (released) return;
    released = true;
    try {
      unlinkSync(lock);
    } catch {
      // Already gone.
    }
    holder.kill('SIGKILL');
  };
  lab.defer(() => {
    release();
    return Promise.resolve();
  });
  return { release };
}

/** Polls `check` every `everyMs` until it returns a value other than undefined, or times out. */
export async function pollUntil<T>(
  check: () => Promise<T | undefined>,
  options: { readonly timeoutMs: number; readonly everyMs?: number },
): Promise<T | undefined> {
  const deadline = Date.now() + options.timeoutMs;
  for (;;) {
    const value = await check();
    if (value !== undefined) return value;
    if (Date.now() > deadline) return undefined;
    await sleep(options.everyMs ?? 50);
  }
}

export function sleep(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms));
}
