import { mkdtempSync, openSync, readSync, closeSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createPcapReader, EgressguardError, type PcapReader } from '../../core/index.js';
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
// How often the capture file is read while a control is awaited.
const POLL_MS = 20;

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
  // tcpdump writes to a file, not to a pipe this process reads: a pipe read by a process that
  // is busy (applying, judging) blocks tcpdump, its ring overflows and the counts are void; a
  // file takes every packet at once, and is read here when a control is awaited and at the end.
  const dir = mkdtempSync(join(tmpdir(), 'egressguard-observer-'));
  const file = join(dir, 'capture.pcap');
  const capture = new Capture(nonce, file);
  const subject = `observer on "${iface}" of lab node "${node}"`;

  const running: RunningCommand = lab.runner(node).start(
    [
      // stderr joins stdout: tcpdump reports the packets its socket dropped only there, at exit.
      ...['sh', '-c', 'exec tcpdump "$@" 2>&1', 'tcpdump'],
      ...['-i', iface, '-Q', direction, '-n'],
      // --immediate-mode: no TPACKET_V3 block timeout of up to 1 s; -U: each packet written to
      // the file as it comes, so that a control is readable at once.
      ...['--immediate-mode', '-U'],
      // -p: no promiscuous mode, which would change the link; a veth hands its peer every frame.
      '-p',
      // The ring holds buffer / snaplen frames: the default snaplen (262144) leaves room for
      // about 16 in 4 MiB, and a burst of probes overflows it.
      ...['-s', String(SNAPLEN), '-B', String(BUFFER_KIB)],
      // -Z root: keep root to write into this process's private directory.
      ...['-Z', 'root', '-w', file, 'ip or ip6'],
    ],
    { effect: 'read' },
  );
  const reading = capture.consume(running.lines);
  void running.exited.then((code) => {
    capture.end(code);
  });
  const removeFile = (): void => {
    rmSync(dir, { recursive: true, force: true });
  };
  const undefer = lab.defer(async () => {
    await running.stop();
    removeFile();
  });

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
    capture.readFile();
    removeFile();
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

/** The capture's reading side: reads tcpdump's pcap file as it grows and sorts packets by nonce. */
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
  private readonly reader: PcapReader = createPcapReader();
  private offset = 0;
  private readonly waiters = new Set<() => void>();

  constructor(
    nonce: string,
    private readonly file: string,
  ) {
    this.marks = {
      probe: Buffer.from(nonce),
      arming: Buffer.from(this.armingNonce),
      closing: Buffer.from(this.closingNonce),
    };
  }

  /** tcpdump's own output: with -w only its messages, the kernel drops among them at exit. */
  async consume(lines: AsyncIterable<string>): Promise<void> {
    try {
      for await (const line of lines) {
        const dropped = /^(\d+) packets? dropped by kernel$/.exec(line);
        if (dropped?.[1] !== undefined) this.kernelDrops = Number(dropped[1]);
      }
    } catch (error) {
      this.readError = error;
    } finally {
      this.notify();
    }
  }

  end(code: number | null): void {
    this.exitCode = code;
    this.notify();
  }

  /** Reads what tcpdump appended to the file since the last read. */
  readFile(): void {
    let fd: number;
    try {
      fd = openSync(this.file, 'r');
    } catch {
      return; // not created yet: tcpdump is still starting
    }
    try {
      const chunk = Buffer.alloc(1 << 16);
      for (;;) {
        const n = readSync(fd, chunk, 0, chunk.length, this.offset);
        if (n === 0) break;
        this.offset += n;
        // A copy: the reader keeps unfinished records, and the chunk is read into again.
        for (const record of this.reader.push(Uint8Array.from(chunk.subarray(0, n)))) {
          const ip = networkLayer(record.linkType, record.data);
          if (ip !== undefined) this.sort(Buffer.from(ip));
        }
      }
    } catch (error) {
      this.readError ??= error;
    } finally {
      closeSync(fd);
    }
  }

  /** Resolves true once a control of that kind was seen, false after `ms` or when tcpdump ended. */
  async waitFor(kind: 'arming' | 'closing', ms: number): Promise<boolean> {
    const deadline = performance.now() + ms;
    for (;;) {
      this.readFile();
      if (this.seen[kind] > 0) return true;
      if (this.exitCode !== undefined || performance.now() >= deadline) return false;
      await new Promise<void>((resolve) => {
        const wake = (): void => {
          clearTimeout(timer);
          this.waiters.delete(wake);
          resolve();
        };
        const timer = setTimeout(
          wake,
          Math.min(POLL_MS, Math.max(deadline - performance.now(), 0)),
        );
        this.waiters.add(wake);
      });
    }
  }

  observation(): Observation {
    const counts = Object.fromEntries(PACKET_KINDS.map((k) => [k, 0])) as Record<
      PacketKind,
      number
    >;
    for (const packet of this.probes) counts[packet.kind]++;
    return { packets: this.probes, counts, icmpErrors: this.errors };
  }

  private sort(bytes: Buffer): void {
    const at = bytes.indexOf(this.marks.probe);
    if (at !== -1) {
      const parsed = parsePacket(bytes);
      const tag = readTag(bytes, at + this.marks.probe.length);
      const packet = parsed === undefined || tag === '' ? parsed : { ...parsed, tag };
      if (packet !== undefined) (isIcmpError(packet) ? this.errors : this.probes).push(packet);
    } else if (bytes.includes(this.marks.arming)) {
      this.seen.arming++;
    } else if (bytes.includes(this.marks.closing)) {
      this.seen.closing++;
    }
  }

  private notify(): void {
    for (const waiter of [...this.waiters]) waiter();
  }
}

// pcap link types (https://www.tcpdump.org/linktypes.html) and where their IP header starts.
const LINKTYPE_ETHERNET = 1;
const LINKTYPE_RAW = 101;
const LINKTYPE_LINUX_SLL = 113;
const LINKTYPE_LINUX_SLL2 = 276;
const ETHERTYPES_IP = new Set([0x0800, 0x86dd]);

/** The packet from its IP header on, or undefined for a frame that carries no IP. */
function networkLayer(linkType: number, data: Uint8Array): Uint8Array | undefined {
  const at = (offset: number, typeAt: number): Uint8Array | undefined => {
    if (data.length <= offset) return undefined;
    const type = ((data[typeAt] ?? 0) << 8) | (data[typeAt + 1] ?? 0);
    return ETHERTYPES_IP.has(type) ? data.subarray(offset) : undefined;
  };
  switch (linkType) {
    case LINKTYPE_ETHERNET:
      return at(14, 12);
    case LINKTYPE_LINUX_SLL:
      return at(16, 14);
    case LINKTYPE_LINUX_SLL2:
      return at(20, 0);
    case LINKTYPE_RAW:
      return data;
    default:
      return undefined;
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

function messageOf(error: unknown): string {
  return error instanceof Error ? error.message : String(error);
}
