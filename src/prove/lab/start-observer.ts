import { EgressguardError } from '../../core/index.js';
import type { RunningCommand } from '../../runner/index.js';
import type { Lab } from './create-lab.js';
import { createNonce, isNonce } from './create-nonce.js';
import { isIcmpError, parsePacket, type ObservedPacket } from './parse-packet.js';
import { PACKET_KINDS, sendPackets, type PacketKind } from './send-packets.js';
import type { LinkRef } from './topology.js';

/** Which packets crossing the interface count: arriving (default), leaving, or both. */
export type Direction = 'in' | 'out' | 'inout';

/**
 * The positive control: a UDP packet that must cross the observed interface in the counted
 * direction, once to arm the observer and once more when it stops. By default the node at the
 * other end of the link sends it to the observed interface's address (for `out`: the observed
 * node to the peer's). Send it from farther away (`from`, `dst`) to prove the probes' whole path
 * leads past this observer, but only where that path stays open until stop(): a fault that
 * closes it would void the measurement.
 */
export interface PositiveControl {
  readonly from?: string;
  readonly dst?: string;
  readonly src?: string;
  /** How long armed() and stop() wait for a control; default 3000 ms. */
  readonly timeoutMs?: number;
}

/** Options of startObserver. */
export interface ObserverOptions {
  readonly node: string;
  /**
   * The interface, or `any`: every interface of the node, which survives a link being deleted and
   * recreated (give control.from and control.dst then).
   */
  readonly iface: string;
  readonly nonce: string;
  readonly direction?: Direction;
  readonly control?: PositiveControl;
}

/** The nonce'd packets an observer saw. */
export interface Observation {
  /** Probes carrying the nonce, in arrival order (ICMP errors quoting a probe excluded). */
  readonly packets: readonly ObservedPacket[];
  readonly counts: Readonly<Record<PacketKind, number>>;
  /** ICMP errors that quote a probe: evidence of where it died, not probes. */
  readonly icmpErrors: readonly ObservedPacket[];
}

/** A capture on one interface of a lab that counts the packets carrying one nonce. */
export interface Observer {
  readonly node: string;
  readonly iface: string;
  readonly nonce: string;
  /** Resolves once a positive control was seen; rejects if none is seen in time. */
  armed(): Promise<void>;
  /** Proves the capture still runs with a closing control, stops it and returns the counts. */
  stop(): Promise<Observation>;
}

// A bound on a hang, not a window: tcpdump takes seconds to start on a loaded machine, and its
// output lags behind the wire. The resend interval grows, so a slow start costs few senders.
const DEFAULT_TIMEOUT_MS = 30_000;
const FIRST_RESEND_MS = 150;
const LAST_RESEND_MS = 1000;
// The closing control leaves after every probe's sendto returned, but a probe can still wait in
// another CPU's backlog queue (net/core/dev.c, enqueue_to_backlog): give it a moment.
const SETTLE_MS = 50;
const CONTROL_PORT = 9; // discard
const SNAPLEN = 1600; // whole 1500-byte frames; probes carry the nonce right after their headers
const BUFFER_KIB = 16384;
const ETHERNET_HEADER = 14;

/**
 * Starts tcpdump on a lab interface, counting packets that carry `nonce`. Call armed() before
 * sending: tcpdump reports "listening" only on stderr, so readiness is proven by a control packet
 * that is seen, never assumed; counts from an observer that was never armed are refused.
 */
export async function startObserver(lab: Lab, options: ObserverOptions): Promise<Observer> {
  const { node, iface, nonce } = options;
  const direction = options.direction ?? 'in';
  if (!isNonce(nonce)) {
    throw new EgressguardError(
      'usage',
      `Cannot observe with nonce "${nonce}": use 8 to 32 characters of a-z and 0-9`,
    );
  }
  if (!['in', 'out', 'inout'].includes(direction)) {
    throw new EgressguardError(
      'usage',
      `Cannot observe in direction "${direction}": use in, out or inout`,
    );
  }
  await checkInterface(lab, { node, iface });
  const control = resolveControl(lab, options, direction);
  const timeoutMs = options.control?.timeoutMs ?? DEFAULT_TIMEOUT_MS;
  const capture = new Capture(nonce);
  const subject = `observer on "${iface}" of lab node "${node}"`;

  const running: RunningCommand = lab.runner(node).start(
    [
      // stderr joins stdout: tcpdump reports the packets its socket dropped only there, at exit.
      ...['sh', '-c', 'exec tcpdump "$@" 2>&1', 'tcpdump'],
      ...['-i', iface, '-Q', direction, '-n', '-q', '-t'],
      // -l: a line at a time; --immediate-mode: no TPACKET_V3 block timeout of up to 1 s.
      ...['-l', '--immediate-mode'],
      // -p: no promiscuous mode, which would change the link; a veth hands its peer every frame.
      '-p',
      // The ring holds buffer / snaplen frames: the default snaplen (262144) leaves room for
      // about 16 in 4 MiB, and a burst of probes overflows it.
      ...['-s', String(SNAPLEN), '-B', String(BUFFER_KIB)],
      // -x: each packet in hex from its IP header on, read by Capture below.
      ...['-x', 'ip or ip6'],
    ],
    { effect: 'read' },
  );
  const reading = capture.consume(running.lines);
  void running.exited.then((code) => {
    capture.end(code);
  });
  const undefer = lab.defer(() => running.stop());

  const sendControl = async (controlNonce: string): Promise<void> => {
    try {
      await sendPackets(lab.runner(control.from), {
        nonce: controlNonce,
        packets: [
          {
            kind: 'udp',
            dst: control.dst,
            dport: CONTROL_PORT,
            ...(control.src === undefined ? {} : { src: control.src }),
          },
        ],
      });
    } catch (error) {
      throw new EgressguardError(
        'command-failed',
        `Cannot send the positive control of the ${subject}: ${messageOf(error)}`,
        { cause: error },
      );
    }
  };
  const describeControl = `UDP from node "${control.from}" to ${control.dst}${control.src === undefined ? '' : ` from ${control.src}`}`;

  let arming: Promise<void> | undefined;
  let isArmed = false;
  const arm = async (): Promise<void> => {
    const deadline = performance.now() + timeoutMs;
    let attempts = 0;
    let resendMs = FIRST_RESEND_MS;
    for (;;) {
      if (capture.exitCode !== undefined) {
        throw new EgressguardError(
          'command-failed',
          `Cannot arm the ${subject}: tcpdump exited with code ${capture.exitCode} before the positive control was seen`,
          {
            hint: `run "ip netns exec ${lab.ns(node)} tcpdump -i ${iface}" to see why`,
          },
        );
      }
      attempts++;
      // Resent until seen: a control sent before tcpdump's socket is bound is lost, and tcpdump
      // says when it is bound only on stderr.
      await sendControl(capture.armingNonce);
      const wait = Math.min(resendMs, deadline - performance.now());
      if (await capture.waitFor('arming', Math.max(wait, 0))) {
        isArmed = true;
        return;
      }
      resendMs = Math.min(resendMs * 2, LAST_RESEND_MS);
      if (performance.now() >= deadline) {
        throw new EgressguardError(
          'io',
          `Cannot arm the ${subject}: its positive control (${describeControl}) was not seen in ${timeoutMs} ms (${attempts} sent)`,
          {
            hint: "the control does not cross this interface in the counted direction: check the interface, or send the control along the probes' path (control.from, control.dst)",
          },
        );
      }
    }
  };

  let stopping: Promise<Observation> | undefined;
  const finish = async (): Promise<Observation> => {
    let closingError: unknown;
    let isClosed = false;
    if (isArmed && capture.exitCode === undefined) {
      try {
        await sendControl(capture.closingNonce);
        isClosed = await capture.waitFor('closing', timeoutMs);
        if (isClosed) await new Promise((r) => setTimeout(r, SETTLE_MS));
      } catch (error) {
        closingError = error;
      }
    }
    await running.stop();
    await reading;
    undefer();
    if (!isArmed) {
      throw new EgressguardError(
        'io',
        `Cannot trust the counts of the ${subject}: it was never armed`,
        {
          hint: 'await observer.armed() before sending probes, and let a failure end the measurement',
        },
      );
    }
    if (capture.readError !== undefined) {
      throw new EgressguardError('io', `Cannot read the capture of the ${subject}`, {
        cause: capture.readError,
      });
    }
    if (capture.kernelDrops !== 0) {
      throw new EgressguardError(
        'io',
        `Cannot trust the counts of the ${subject}: ${capture.kernelDrops === undefined ? 'tcpdump did not report how many packets it dropped' : `tcpdump's socket dropped ${capture.kernelDrops} packets`}`,
        { hint: 'send fewer packets at once, or spread them with intervalMs' },
      );
    }
    if (!isClosed) {
      throw new EgressguardError(
        'io',
        `Cannot trust the counts of the ${subject}: its closing control (${describeControl}) was not seen${capture.exitCode === undefined ? '' : `, tcpdump exited with code ${capture.exitCode}`}${closingError === undefined ? '' : `: ${messageOf(closingError)}`}`,
        { cause: closingError },
      );
    }
    return capture.observation();
  };

  return {
    node,
    iface,
    nonce,
    armed() {
      arming ??= arm();
      return arming;
    },
    stop() {
      stopping ??= finish();
      return stopping;
    },
  };
}

async function checkInterface(lab: Lab, ref: LinkRef): Promise<void> {
  if (ref.iface === 'any') return;
  const runner = lab.runner(ref.node);
  const found = await runner.run(['ip', 'link', 'show', 'dev', ref.iface], {
    effect: 'read',
    allowFailure: true,
  });
  if (found.exitCode === 0) return;
  const { stdout } = await runner.run(['ip', '-j', 'link', 'show'], { effect: 'read' });
  const names = (JSON.parse(stdout) as { ifname: string }[]).map((l) => `"${l.ifname}"`);
  throw new EgressguardError(
    'usage',
    `Cannot observe "${ref.iface}" in lab node "${ref.node}": no such interface; it has ${names.join(', ')}`,
  );
}

function resolveControl(
  lab: Lab,
  options: ObserverOptions,
  direction: Direction,
): { from: string; dst: string; src: string | undefined } {
  const given = options.control ?? {};
  const ref = { node: options.node, iface: options.iface };
  const needsPeer = given.from === undefined || given.dst === undefined;
  let peer: LinkRef | undefined;
  try {
    peer = needsPeer ? lab.peerOf(ref) : undefined;
  } catch (error) {
    throw new EgressguardError(
      'usage',
      `Cannot choose a positive control for "${ref.iface}" in lab node "${ref.node}": ${messageOf(error)}`,
      {
        hint: 'give control.from and control.dst',
        cause: error,
      },
    );
  }
  const outward = direction === 'out';
  const from = given.from ?? (outward ? ref.node : (peer?.node ?? ref.node));
  const target = outward ? peer : ref;
  const dst =
    given.dst ?? (target === undefined ? undefined : firstAddress(lab.addressesOf(target)));
  if (dst === undefined) {
    throw new EgressguardError(
      'usage',
      `Cannot choose a positive control for "${ref.iface}" in lab node "${ref.node}": the ${outward ? 'peer interface' : 'interface'} has no address`,
      {
        hint: 'give control.dst',
      },
    );
  }
  return { from, dst, src: given.src };
}

function firstAddress(addresses: readonly string[]): string | undefined {
  const v4 = addresses.find((a) => !a.includes(':'));
  return (v4 ?? addresses[0])?.split('/')[0];
}

/** The capture's reading side: reassembles tcpdump -x hex dumps and sorts packets by nonce. */
class Capture {
  readonly armingNonce = createNonce();
  readonly closingNonce = createNonce();
  exitCode: number | null | undefined;
  readError: unknown;
  /** What tcpdump reported at exit; undefined until then. */
  kernelDrops: number | undefined;
  private readonly probes: ObservedPacket[] = [];
  private readonly errors: ObservedPacket[] = [];
  private readonly seen = { arming: 0, closing: 0 };
  private readonly marks: { probe: Buffer; arming: Buffer; closing: Buffer };
  private hex: string[] | undefined;
  private readonly waiters = new Set<() => void>();

  constructor(nonce: string) {
    this.marks = {
      probe: Buffer.from(nonce),
      arming: Buffer.from(this.armingNonce),
      closing: Buffer.from(this.closingNonce),
    };
  }

  async consume(lines: AsyncIterable<string>): Promise<void> {
    try {
      for await (const line of lines) this.push(line);
    } catch (error) {
      this.readError = error;
    } finally {
      this.flush();
      this.notify();
    }
  }

  end(code: number | null): void {
    this.exitCode = code;
    this.notify();
  }

  /** Resolves true once a control of that kind was seen, false after `ms` or when tcpdump ended. */
  waitFor(kind: 'arming' | 'closing', ms: number): Promise<boolean> {
    return new Promise((resolve) => {
      const check = (): void => {
        if (this.seen[kind] > 0 || this.exitCode !== undefined) {
          clearTimeout(timer);
          this.waiters.delete(check);
          resolve(this.seen[kind] > 0);
        }
      };
      const timer = setTimeout(() => {
        this.waiters.delete(check);
        resolve(this.seen[kind] > 0);
      }, ms);
      this.waiters.add(check);
      check();
    });
  }

  observation(): Observation {
    const counts = Object.fromEntries(PACKET_KINDS.map((k) => [k, 0])) as Record<
      PacketKind,
      number
    >;
    for (const packet of this.probes) counts[packet.kind]++;
    return { packets: this.probes, counts, icmpErrors: this.errors };
  }

  private push(line: string): void {
    const dropped = /^(\d+) packets? dropped by kernel$/.exec(line);
    if (dropped?.[1] !== undefined) this.kernelDrops = Number(dropped[1]);
    // A hex line is "\t0x0010:  4500 0054 …"; any other line heads the next packet.
    const hex = /^\s+0x[0-9a-f]+:\s+([0-9a-f ]+)$/.exec(line);
    if (hex?.[1] !== undefined && this.hex !== undefined) {
      this.hex.push(hex[1].replaceAll(' ', ''));
      // Flush as soon as the IP length is complete: waiting for the next packet's first line
      // would leave the last packet (often the control awaited) unread.
      const have = this.hex.reduce((sum, h) => sum + h.length / 2, 0);
      const want = ipLength(this.hex[0] ?? '');
      if (want !== undefined && have >= Math.min(want, SNAPLEN - ETHERNET_HEADER)) this.flush();
      return;
    }
    this.flush();
    this.hex = [];
  }

  private flush(): void {
    if (this.hex === undefined || this.hex.length === 0) return;
    const bytes = Buffer.from(this.hex.join(''), 'hex');
    this.hex = undefined;
    const at = bytes.indexOf(this.marks.probe);
    if (at !== -1) {
      const parsed = parsePacket(bytes);
      const tag = readTag(bytes, at + this.marks.probe.length);
      const packet = parsed === undefined || tag === '' ? parsed : { ...parsed, tag };
      if (packet !== undefined) (isIcmpError(packet) ? this.errors : this.probes).push(packet);
    } else if (bytes.includes(this.marks.arming)) {
      this.seen.arming++;
      this.notify();
    } else if (bytes.includes(this.marks.closing)) {
      this.seen.closing++;
      this.notify();
    }
  }

  private notify(): void {
    for (const waiter of [...this.waiters]) waiter();
  }
}

/** The a-z0-9 characters right after the nonce: a sender's tag for telling its probes apart. */
function readTag(bytes: Buffer, from: number): string {
  let end = from;
  while (end < bytes.length && end - from < 16 && isTagByte(bytes[end] ?? 0)) end++;
  return bytes.subarray(from, end).toString('latin1');
}

function isTagByte(byte: number): boolean {
  return (byte >= 0x61 && byte <= 0x7a) || (byte >= 0x30 && byte <= 0x39);
}

/** The length an IP packet declares, read from the hex of its first bytes. */
function ipLength(hex: string): number | undefined {
  if (hex.startsWith('4') && hex.length >= 8) return parseInt(hex.slice(4, 8), 16);
  if (hex.startsWith('6') && hex.length >= 12) return 40 + parseInt(hex.slice(8, 12), 16);
  return undefined;
}

function messageOf(error: unknown): string {
  return error instanceof Error ? error.message : String(error);
}
