import {
  EgressguardError,
  formatAddress,
  parseAddress,
  type Family,
} from '../../src/core/index.js';
import { REASSEMBLY_ID, type EvaluationState } from '../../src/ir/index.js';
import type { Protocol } from '../../src/policy/index.js';
import type { Runner, RunningCommand } from '../../src/runner/index.js';
import type {
  ConformanceHarness,
  LabAccess,
  LabPacket,
  Observed,
  TestPacket,
} from '../../src/backends/backend.js';

/** Options of createKernelHarness. */
export interface KernelHarnessOptions {
  readonly lab: LabAccess;
  /** The lab node whose kernel holds our table (the host). */
  readonly node: string;
  /** Our table (`table inet NAME`). */
  readonly table: string;
  /** The lab node that sends the packets arriving on a host interface: its far side. */
  readonly senderFor: (ingress: string) => string;
  /**
   * The sending node's interface that faces the host's `ingress`: with it, IPv6 packets to or
   * from link-local and multicast addresses can be sent (by that interface's scope).
   */
  readonly linkOf?: (ingress: string) => string;
  /** Puts the lab into a state (tunnel up or down) before that state's packets are sent. */
  readonly enterState: (state: EvaluationState) => Promise<void>;
  /** Packets sent before waiting for their traces; default 1500. */
  readonly chunkSize?: number;
}

/** What the kernel did with one packet, read from its trace through our table. */
export interface KernelObserved extends Observed {
  /** The base chain of ours the packet entered; null when routing dropped it before any. */
  readonly hook: 'forward' | 'input' | 'output' | null;
  /** The output interface routing chose (forward only). */
  readonly oif: string | null;
  /** Whether it left every filter hook accepted (seen by a marker chain after ours). */
  readonly passed: boolean;
  /** Routing dropped it before any filter hook (a martian, say): neither verdict nor id apply. */
  readonly vanished: boolean;
  /** The trace lines of the packet, for reports. */
  readonly trace: readonly string[];
}

/** One measurement: per packet what the kernel did, and how our named counters moved. */
export interface KernelMeasurement {
  /** In the order of the packets measured. */
  readonly observed: readonly KernelObserved[];
  /** Packet deltas of our named counters by policy id, per state measured. */
  readonly counterDeltas: ReadonlyMap<EvaluationState['tunnel'], ReadonlyMap<string, number>>;
  /** Traced packets on the probes' interfaces that no probe explains (lab noise). */
  readonly strays: readonly string[];
  readonly durationMs: number;
}

/** A ConformanceHarness on the real kernel: our table in a lab node decides. */
export interface KernelHarness extends ConformanceHarness {
  observe(packets: readonly TestPacket[]): Promise<readonly KernelObserved[]>;
  measure(packets: readonly TestPacket[]): Promise<KernelMeasurement>;
}

const TRACE_TABLE = 'eg_difftrace';
const CONTROL_DST = '127.0.0.1';
const FIRST_CONTROL_PORT = 60_000;
// Bounds on a hang, not windows: `nft monitor trace` formats every event on one core and lags
// far behind the packets on a loaded machine (1,014 of 1,060 packets traced after 5 s at load 10,
// none lost), so a wait fails only once the trace has stopped moving for this long.
const TRACE_STALL_MS = 60_000;
const FIRST_RESEND_MS = 150;
const LAST_RESEND_MS = 2000;
const FIRST_SPORT = 10_000;
// IANA "IPv6 Extension Header Types": the lab sender refuses them as a payload.
const IPV6_EXTENSION_HEADERS = new Set([0, 43, 44, 51, 60, 135, 139, 140, 253, 254]);
// The names nft prints for IP protocols (from /etc/protocols); any other prints as a number.
const PROTOCOL_NUMBERS: Readonly<Record<string, number>> = {
  icmp: 1,
  igmp: 2,
  tcp: 6,
  udp: 17,
  dccp: 33,
  gre: 47,
  esp: 50,
  ah: 51,
  'ipv6-icmp': 58,
  comp: 108,
  sctp: 132,
  udplite: 136,
};

/**
 * Why the lab sender cannot send a packet (it refuses unspecified addresses, link-local and
 * multicast ones unless it knows the interface to send by, and IPv6 extension headers as
 * payload), or undefined when it can.
 */
export function unsendableReason(
  tp: TestPacket,
  options: { readonly linkScoped?: boolean } = {},
): string | undefined {
  const { packet } = tp;
  for (const [what, value] of [
    ['source', packet.source],
    ['destination', packet.destination],
  ] as const) {
    const reason = unsendableAddress(packet.family, value, options.linkScoped === true);
    if (reason !== undefined) return `${what} ${formatAddress(packet.family, value)} is ${reason}`;
  }
  if (packet.ingress === undefined) return 'it has no ingress interface (host-originated)';
  const kind = kindOf(packet.protocol);
  if ((kind === 'tcp' || kind === 'udp' || kind === 'sctp') && packet.port === undefined) {
    return `${kind} without a port`;
  }
  const number = Number(packet.protocol);
  if (kind === 'ip' && packet.family === 6 && IPV6_EXTENSION_HEADERS.has(number)) {
    return `protocol ${number} is an IPv6 extension header`;
  }
  // The sender builds these headers only by name; as a number it would send a bare payload.
  if (kind === 'ip' && [1, 6, 17, 58].includes(number)) {
    return `protocol ${number} is given by number, not by name`;
  }
  return undefined;
}

/**
 * A harness that sends each packet from the lab node behind its ingress interface and reads what
 * our table did from `nft monitor trace`: a test-only table sets `meta nftrace` in prerouting at
 * priority -300, after the kernel reassembled fragments (ours is untouched), marks with empty chains at priority 400 that a packet left
 * forward or input accepted, and drops everything the host itself sends (its replies and ICMP
 * errors), so our counters count only probes. Packets of one state are sent in chunks, each
 * awaited in the trace; trace ids are matched to probes by what the evaluator reads (ingress,
 * addresses, protocol, ports), so packets that look alike are interchangeable. Counters are read
 * before and after each state.
 */
export function createKernelHarness(options: KernelHarnessOptions): KernelHarness {
  const { lab, node, table } = options;
  const host = lab.runner(node);
  const chunkSize = options.chunkSize ?? 1500;

  const measure = async (packets: readonly TestPacket[]): Promise<KernelMeasurement> => {
    const started = performance.now();
    packets.forEach((tp, i) => {
      const reason = unsendableReason(tp, { linkScoped: options.linkOf !== undefined });
      if (reason !== undefined) {
        throw new EgressguardError(
          'usage',
          `Cannot measure packet ${i}: the lab sender cannot send it: ${reason}`,
        );
      }
    });
    const probes = packets.map((tp, i) => toProbe(tp, i, options.linkOf));
    const ingresses = [...new Set(probes.map((p) => p.ingress))].sort();
    await installTraceTable(host, ingresses);
    const undoTable = lab.defer(() => removeTraceTable(host));
    const trace = new TraceReader(table);
    const running: RunningCommand = host.start(
      // stderr joins stdout: nft reports lost netlink events only there.
      ['sh', '-c', 'exec nft monitor trace 2>&1'],
      { effect: 'read' },
    );
    const reading = trace.consume(running.lines);
    const undoMonitor = lab.defer(() => running.stop());
    const observed = new Array<KernelObserved | undefined>(packets.length);
    const counterDeltas = new Map<EvaluationState['tunnel'], Map<string, number>>();
    const strays: string[] = [];
    try {
      await sendControl(lab, node, trace, 'arm');
      for (const state of ['up', 'down'] as const) {
        const indexes = probes.filter((p) => p.state.tunnel === state).map((p) => p.index);
        if (indexes.length === 0) continue;
        await options.enterState({ tunnel: state });
        const before = await readCounters(host, table);
        trace.reset();
        // Chunks of equal size: a small last one would cost a sender start of its own.
        const size = Math.ceil(indexes.length / Math.ceil(indexes.length / chunkSize));
        let traced = 0;
        for (let at = 0; at < indexes.length; at += size) {
          const chunk = indexes.slice(at, at + size).map((i) => probes[i] as Probe);
          await sendChunk(lab, options.senderFor, chunk);
          // A fragment whose datagram never completes is held before any hook: nothing to trace.
          traced += chunk.filter((p) => !p.isLoneFragment).length;
          await trace.waitForProbes(traced, TRACE_STALL_MS);
        }
        await sendControl(lab, node, trace, 'close');
        const after = await readCounters(host, table);
        counterDeltas.set(state, subtractCounters(after, before));
        const matched = trace.match(indexes.map((i) => probes[i] as Probe));
        for (const [index, record] of matched.assigned) observed[index] = toObserved(record);
        for (const index of matched.held) observed[index] = HELD_FOR_REASSEMBLY;
        strays.push(...matched.strays.map((r) => r.lines[0] ?? ''));
        if (matched.missing.length > 0) {
          const sample = matched.missing.slice(0, 5).map((i) => probes[i]?.key ?? '');
          throw new EgressguardError(
            'io',
            `Cannot read what the kernel did with ${matched.missing.length} of ${indexes.length} packets (tunnel ${state}): the trace never showed them${trace.lostEvents ? ' (nft lost netlink events)' : ''}; first: ${sample.join('; ')}`,
            { hint: 'send fewer packets at once (chunkSize)' },
          );
        }
      }
    } finally {
      undoMonitor();
      await running.stop();
      await reading;
      undoTable();
      await removeTraceTable(host);
    }
    if (trace.lostEvents) {
      throw new EgressguardError('io', 'Cannot trust the trace: nft lost netlink events', {
        hint: 'send fewer packets at once (chunkSize)',
      });
    }
    return {
      observed: observed.map((o, i) => {
        if (o === undefined) throw new Error(`Packet ${i} was not observed`); // match() covers all
        return o;
      }),
      counterDeltas,
      strays,
      durationMs: Math.round(performance.now() - started),
    };
  };

  return {
    name: `nftables kernel (lab node "${node}")`,
    measure,
    async observe(packets) {
      return (await measure(packets)).observed;
    },
  };
}

/** What a lone fragment gets when no hook saw it: the kernel held it for reassembly. */
const HELD_FOR_REASSEMBLY: KernelObserved = {
  verdict: 'deny',
  decidedBy: REASSEMBLY_ID,
  hook: null,
  oif: null,
  passed: false,
  vanished: false,
  trace: [],
};

interface Probe {
  readonly index: number;
  /** Sent as non-first fragments only: no hook may see it (the kernel holds it). */
  readonly isLoneFragment: boolean;
  readonly state: EvaluationState;
  readonly ingress: string;
  readonly key: string;
  readonly spec: LabPacket;
}

function toProbe(
  tp: TestPacket,
  index: number,
  linkOf: ((ingress: string) => string) | undefined,
): Probe {
  const { packet } = tp;
  const ingress = packet.ingress ?? '';
  const kind = kindOf(packet.protocol);
  const isPorted = kind === 'tcp' || kind === 'udp' || kind === 'sctp';
  // A source port of its own per probe: more probes tell apart in the trace.
  const sport = isPorted ? FIRST_SPORT + (index % 50_000) : undefined;
  const isLoneFragment = packet.fragment === 'alone';
  const spec: LabPacket = {
    kind,
    src: formatAddress(packet.family, packet.source),
    dst: formatAddress(packet.family, packet.destination),
    ...(sport === undefined || packet.port === undefined ? {} : { sport, dport: packet.port }),
    ...(kind === 'ip' ? { protocol: Number(packet.protocol) } : {}),
    ...(packet.icmpType === undefined ? {} : { icmpType: packet.icmpType }),
    ...(linkOf !== undefined &&
    packet.family === 6 &&
    (isLinkScoped6(packet.source as bigint) || isLinkScoped6(packet.destination as bigint))
      ? { link: linkOf(ingress) }
      : {}),
    // A first or non-first fragment of a datagram that completes: the whole datagram goes in
    // fragments, and the trace sees it reassembled. A lone one: only the later fragments.
    ...(packet.fragment === undefined
      ? {}
      : { fragment: isLoneFragment ? ('non-first' as const) : ('all' as const) }),
  };
  return {
    index,
    isLoneFragment,
    state: tp.state,
    ingress,
    spec,
    key: probeKey({
      ingress,
      family: packet.family,
      source: packet.source,
      destination: packet.destination,
      protocol: protocolNumber(packet.protocol, packet.family),
      // Were a lone fragment traced, it would show without ports: no transport header.
      sport: isLoneFragment ? undefined : sport,
      dport: isPorted && !isLoneFragment ? packet.port : undefined,
    }),
  };
}

function kindOf(protocol: Protocol): LabPacket['kind'] {
  switch (protocol) {
    case 'tcp':
    case 'udp':
    case 'icmp':
      return protocol;
    case 47:
      return 'gre';
    case 50:
      return 'esp';
    case 132:
      return 'sctp';
    default:
      return 'ip';
  }
}

function protocolNumber(protocol: Protocol, family: Family): number {
  if (protocol === 'icmp') return family === 4 ? 1 : 58;
  if (protocol === 'tcp') return 6;
  if (protocol === 'udp') return 17;
  return protocol;
}

function probeKey(p: {
  ingress: string;
  family: Family;
  source: number | bigint;
  destination: number | bigint;
  protocol: number;
  sport: number | undefined;
  dport: number | undefined;
}): string {
  return [
    p.ingress,
    `ipv${p.family}`,
    formatAddress(p.family, p.source),
    formatAddress(p.family, p.destination),
    `proto ${p.protocol}`,
    `sport ${p.sport ?? '-'}`,
    `dport ${p.dport ?? '-'}`,
  ].join(' ');
}

function unsendableAddress(
  family: Family,
  value: number | bigint,
  linkScoped: boolean,
): string | undefined {
  if (family === 4) {
    const v = value as number;
    if (v === 0) return 'unspecified';
    if (v >= 0xe0000000 && v <= 0xefffffff) return 'multicast';
    if (v >= 0xa9fe0000 && v <= 0xa9feffff) return 'link-local (the lab sender refuses it)';
    return undefined;
  }
  const v = value as bigint;
  if (v === 0n) return 'unspecified';
  if (linkScoped) return undefined;
  if (isLinkScoped6(v)) return v >> 120n === 0xffn ? 'multicast' : 'link-local';
  return undefined;
}

async function sendChunk(
  lab: LabAccess,
  senderFor: (ingress: string) => string,
  chunk: readonly Probe[],
): Promise<void> {
  const bySender = new Map<string, Probe[]>();
  for (const probe of chunk) {
    const sender = senderFor(probe.ingress);
    bySender.set(sender, [...(bySender.get(sender) ?? []), probe]);
  }
  await Promise.all(
    [...bySender].map(([sender, probes]) =>
      lab.send(sender, {
        nonce: lab.createNonce(),
        packets: probes.map((p) => p.spec),
      }),
    ),
  );
}

/**
 * Sends host-local UDP that only the trace table sees (it traces, then drops it before our
 * output chain), until the trace shows it. bash's /dev/udp starts in milliseconds, the Python
 * sender in hundreds; the port tells the controls apart.
 */
async function sendControl(
  lab: LabAccess,
  node: string,
  trace: TraceReader,
  purpose: 'arm' | 'close',
): Promise<void> {
  const port = trace.nextControlPort();
  let resendMs = FIRST_RESEND_MS;
  let waited = 0;
  let progress = trace.progress();
  for (;;) {
    // The write fails with EPERM, as the trace table drops it: expected.
    await lab.runner(node).run(['bash', '-c', `echo control >/dev/udp/${CONTROL_DST}/${port}`], {
      effect: 'change',
      allowFailure: true,
    });
    if (await trace.waitForControl(port, resendMs)) return;
    // A trace still catching up on earlier packets is not stuck: only its silence counts.
    waited = trace.progress() === progress ? waited + resendMs : 0;
    progress = trace.progress();
    if (waited >= TRACE_STALL_MS) {
      throw new EgressguardError(
        'io',
        `Cannot ${purpose === 'arm' ? 'start' : 'finish'} the kernel trace in lab node "${node}": its control packet was not traced, and the trace showed nothing else for ${TRACE_STALL_MS} ms`,
        { hint: `run "ip netns exec ${lab.ns(node)} nft monitor trace" to see why` },
      );
    }
    resendMs = Math.min(resendMs * 2, LAST_RESEND_MS);
  }
}

async function installTraceTable(runner: Runner, ingresses: readonly string[]): Promise<void> {
  const names = ingresses.map((i) => `"${i}"`).join(', ');
  const ruleset = [
    `table inet ${TRACE_TABLE} {}`,
    `delete table inet ${TRACE_TABLE}`,
    `table inet ${TRACE_TABLE} {`,
    '\tchain pre {',
    // -300: after the kernel's reassembly (-400, NF_IP_PRI_CONNTRACK_DEFRAG), so a fragmented
    // datagram is traced once, whole, as our hooks see it.
    '\t\ttype filter hook prerouting priority -300; policy accept;',
    // A policy whose classes are all host-originated forwards nothing to trace here.
    ...(ingresses.length === 0 ? [] : [`\t\tiifname { ${names} } meta nftrace set 1`]),
    '\t}',
    '\tchain fwd_late {',
    '\t\ttype filter hook forward priority 400; policy accept;',
    '\t}',
    '\tchain in_late {',
    '\t\ttype filter hook input priority 400; policy accept;',
    '\t}',
    '\tchain out {',
    '\t\ttype filter hook output priority -400; policy accept;',
    `\t\tip daddr ${CONTROL_DST} udp dport >= ${FIRST_CONTROL_PORT} meta nftrace set 1`,
    '\t\tdrop',
    '\t}',
    '}',
    '',
  ].join('\n');
  await runner.run(['nft', '-f', '-'], { effect: 'change', input: ruleset });
}

async function removeTraceTable(runner: Runner): Promise<void> {
  await runner.run(['nft', 'delete', 'table', 'inet', TRACE_TABLE], {
    effect: 'change',
    allowFailure: true,
  });
}

/** Packets of our named counters, by the policy id in each counter's comment. */
async function readCounters(runner: Runner, table: string): Promise<Map<string, number>> {
  const { stdout } = await runner.run(['nft', '-j', 'list', 'counters', 'table', 'inet', table], {
    effect: 'read',
  });
  const parsed = JSON.parse(stdout) as {
    nftables?: { counter?: { name: string; comment?: string; packets?: number } }[];
  };
  const out = new Map<string, number>();
  for (const item of parsed.nftables ?? []) {
    const c = item.counter;
    if (c === undefined) continue;
    const id = c.comment ?? c.name;
    out.set(id, (out.get(id) ?? 0) + (c.packets ?? 0));
  }
  return out;
}

function subtractCounters(
  after: ReadonlyMap<string, number>,
  before: ReadonlyMap<string, number>,
): Map<string, number> {
  return new Map([...after].map(([id, n]) => [id, n - (before.get(id) ?? 0)]));
}

interface TraceRecord {
  readonly lines: string[];
  key: string | undefined;
  controlPort: number | undefined;
  hook: KernelObserved['hook'];
  oif: string | null;
  decision: { id: string; verdict: 'accept' | 'drop' } | undefined;
  passed: boolean;
}

const LINE = /^trace id ([0-9a-f]+) (\S+) (\S+) (\S+) (.*)$/;
// Every verdict rule of ours carries a named counter; NAT and MSS rules do not.
const VERDICT =
  /\bcounter name "[^"]*" (?:accept|drop) comment "([^"]*)" \(verdict (accept|drop)\)$/;

/** Reads `nft monitor trace` lines into one record per traced packet. */
class TraceReader {
  lostEvents = false;
  private readonly open = new Map<string, TraceRecord>();
  private records: TraceRecord[] = [];
  private readonly controls = new Set<number>();
  private controlPort = FIRST_CONTROL_PORT;
  private readonly waiters = new Set<() => void>();
  private ended = false;
  private lines = 0;

  constructor(private readonly table: string) {}

  async consume(lines: AsyncIterable<string>): Promise<void> {
    try {
      for await (const line of lines) this.push(line);
    } finally {
      this.ended = true;
      this.notify();
    }
  }

  nextControlPort(): number {
    return this.controlPort++;
  }

  /** Forgets the packets traced so far (those of an earlier state). */
  reset(): void {
    this.records = [];
    this.open.clear();
  }

  waitForControl(port: number, ms: number): Promise<boolean> {
    return this.waitUntil(() => this.controls.has(port), ms);
  }

  /** How many lines the trace has read: it moves while the monitor catches up. */
  progress(): number {
    return this.lines;
  }

  /**
   * Resolves once `count` probe packets were traced since the last reset; fails when the trace
   * stops moving for `stallMs` before that (a hang bound: a slow trace is not a stuck one).
   */
  async waitForProbes(count: number, stallMs: number): Promise<void> {
    for (;;) {
      const before = this.lines;
      const seen = await this.waitUntil(
        () => this.records.length >= count || this.lines !== before,
        stallMs,
      );
      if (this.records.length >= count) return;
      if (!seen || this.ended || this.lostEvents) {
        throw new EgressguardError(
          'io',
          `Cannot read the kernel trace: ${this.records.length} of ${count} packets were traced, then ${this.ended ? 'the monitor ended' : `nothing for ${stallMs} ms`}${this.lostEvents ? ' (nft lost netlink events)' : ''}`,
          { hint: 'send fewer packets at once (chunkSize)' },
        );
      }
    }
  }

  /**
   * Pairs traced packets with probes of the same key, lone fragments last (no hook should see
   * them: a record left over for one is a fragment that went through unassembled); the rest are
   * strays, or missing. Lone fragments no record pairs with were held, as they should be.
   */
  match(probes: readonly Probe[]): {
    assigned: [number, TraceRecord][];
    held: number[];
    strays: TraceRecord[];
    missing: number[];
  } {
    const queue = (list: readonly Probe[]): Map<string, number[]> => {
      const waiting = new Map<string, number[]>();
      for (const probe of list)
        waiting.set(probe.key, [...(waiting.get(probe.key) ?? []), probe.index]);
      return waiting;
    };
    const waiting = queue(probes.filter((p) => !p.isLoneFragment));
    const lone = queue(probes.filter((p) => p.isLoneFragment));
    const assigned: [number, TraceRecord][] = [];
    const strays: TraceRecord[] = [];
    for (const record of this.records) {
      const key = record.key;
      const index =
        key === undefined ? undefined : (waiting.get(key)?.shift() ?? lone.get(key)?.shift());
      if (index === undefined) strays.push(record);
      else assigned.push([index, record]);
    }
    return {
      assigned,
      held: [...lone.values()].flat(),
      strays,
      missing: [...waiting.values()].flat(),
    };
  }

  private push(line: string): void {
    this.lines++;
    if (/lost some netlink events/i.test(line)) {
      this.lostEvents = true;
      return;
    }
    const m = LINE.exec(line);
    if (m === null) return;
    const [, id = '', , table = '', chain = '', rest = ''] = m;
    const isPacket = rest.startsWith('packet: ');
    let record = this.open.get(id);
    // Trace ids come from the skb and are reused: a packet line in the first chain starts anew.
    if (isPacket && table === TRACE_TABLE && (chain === 'pre' || chain === 'out')) {
      record = {
        lines: [],
        key: undefined,
        controlPort: undefined,
        hook: null,
        oif: null,
        decision: undefined,
        passed: false,
      };
      this.open.set(id, record);
      if (chain === 'pre') {
        record.key = traceKey(rest);
        this.records.push(record);
      } else {
        record.controlPort = Number(/udp dport (\d+)/.exec(rest)?.[1] ?? NaN);
        this.controls.add(record.controlPort);
      }
    }
    if (record === undefined) return;
    record.lines.push(line);
    if (table === this.table) {
      if (isPacket && record.hook === null) {
        record.hook = chain === 'forward' || chain === 'input' || chain === 'output' ? chain : null;
        record.oif = /\boif "([^"]*)"/.exec(rest)?.[1] ?? null;
      }
      const verdict = VERDICT.exec(rest);
      if (rest.startsWith('rule ') && verdict !== null && record.decision === undefined) {
        record.decision = { id: verdict[1] ?? '', verdict: verdict[2] as 'accept' | 'drop' };
      }
    } else if (table === TRACE_TABLE && (chain === 'fwd_late' || chain === 'in_late')) {
      record.passed = true;
    }
    this.notify();
  }

  private waitUntil(done: () => boolean, ms: number): Promise<boolean> {
    return new Promise((resolve) => {
      const check = (): void => {
        if (done() || this.ended) {
          clearTimeout(timer);
          this.waiters.delete(check);
          resolve(done());
        }
      };
      const timer = setTimeout(
        () => {
          this.waiters.delete(check);
          resolve(done());
        },
        Math.max(ms, 0),
      );
      this.waiters.add(check);
      check();
    });
  }

  private notify(): void {
    for (const waiter of [...this.waiters]) waiter();
  }
}

/** The probe key of a traced packet line: the fields probeKey is made of. */
function traceKey(packetLine: string): string | undefined {
  const iif = /\biif "([^"]*)"/.exec(packetLine)?.[1];
  const v4 = /\bip saddr (\S+) ip daddr (\S+)/.exec(packetLine);
  const v6 = /\bip6 saddr (\S+) ip6 daddr (\S+)/.exec(packetLine);
  const addresses = v4 ?? v6;
  const family: Family = v4 === null ? 6 : 4;
  const protocolName = (family === 4 ? /\bip protocol (\S+)/ : /\bip6 nexthdr (\S+)/).exec(
    packetLine,
  )?.[1];
  if (iif === undefined || addresses === null || protocolName === undefined) return undefined;
  const protocol = PROTOCOL_NUMBERS[protocolName] ?? Number(protocolName);
  const source = parseFamily(family, addresses[1] ?? '');
  const destination = parseFamily(family, addresses[2] ?? '');
  if (source === undefined || destination === undefined || Number.isNaN(protocol)) return undefined;
  const ports = /\b(?:tcp|udp|sctp) sport (\d+) (?:tcp|udp|sctp) dport (\d+)/.exec(packetLine);
  return probeKey({
    ingress: iif,
    family,
    source,
    destination,
    protocol,
    sport: ports === null ? undefined : Number(ports[1]),
    dport: ports === null ? undefined : Number(ports[2]),
  });
}

function parseFamily(family: Family, text: string): number | bigint | undefined {
  const parsed = parseAddress(text);
  return parsed?.family === family ? parsed.value : undefined;
}

function toObserved(record: TraceRecord): KernelObserved {
  const base = {
    hook: record.hook,
    oif: record.oif,
    passed: record.passed,
    trace: record.lines,
  };
  if (record.decision !== undefined) {
    return {
      ...base,
      verdict: record.decision.verdict === 'accept' ? 'allow' : 'deny',
      decidedBy: record.decision.id,
      vanished: false,
    };
  }
  // No rule of ours decided: unmanaged if it went on, else something else dropped it.
  return {
    ...base,
    verdict: record.passed ? 'allow' : 'deny',
    decidedBy: null,
    vanished: record.hook === null && !record.passed,
  };
}

/** IPv6 link-local (fe80::/10) or multicast (ff00::/8): sent by an interface's scope. */
function isLinkScoped6(value: bigint): boolean {
  return value >> 120n === 0xffn || value >> 118n === 0x3fan;
}
