import { existsSync } from 'node:fs';
import { EgressguardError, packagePath, parseAddress } from '../../core/index.js';
import type { Runner } from '../../runner/index.js';
import { isNonce } from './create-nonce.js';
import { labPython } from './lab-python.js';

/** What a probe packet is; `icmp` is an echo request, ICMPv6 for an IPv6 destination. */
export type PacketKind = 'tcp' | 'udp' | 'dns' | 'icmp' | 'gre' | 'esp' | 'sctp' | 'ip';

/** `count` packets of one kind; any source address works, also one not on the sender. */
export interface PacketSpec {
  readonly kind: PacketKind;
  readonly dst: string;
  /** Default: the source the kernel would pick for `dst`. */
  readonly src?: string;
  /** Default: 10000 + sequence number (below the lab nodes' ephemeral ports). */
  readonly sport?: number;
  /** Required for tcp, udp and sctp; 53 for dns. */
  readonly dport?: number;
  /** The IP protocol number, for kind `ip` only. */
  readonly protocol?: number;
  readonly count?: number;
  readonly intervalMs?: number;
  /**
   * Each datagram in IP fragments: `all` of them, or only the `non-first` (a datagram that can
   * never be reassembled). Every fragment carries the nonce.
   */
  readonly fragment?: 'all' | 'non-first';
  /** Bytes of IP payload per fragment, a multiple of 8; default 512. */
  readonly fragmentSize?: number;
  /** The datagram's payload, padded; default three fragments' worth. */
  readonly length?: number;
  /** The interface to send by: allows link-local and multicast IPv6 addresses. */
  readonly link?: string;
  /** For kind `icmp`: this ICMP type (neighbour discovery types get RFC 4861's layout). */
  readonly icmpType?: number;
  /** Hop limit or TTL; default 64, 255 for neighbour discovery. */
  readonly hopLimit?: number;
}

/** How many packets of each spec left the sender's socket. */
export interface SendResult {
  readonly sent: number;
  readonly failed: number;
  readonly specs: readonly { sent: number; failed: number; error: string | null }[];
}

/** Every packet kind, in the order counts are listed. */
export const PACKET_KINDS: readonly PacketKind[] = [
  'tcp',
  'udp',
  'dns',
  'icmp',
  'gre',
  'esp',
  'sctp',
  'ip',
];

// IANA "IPv6 Extension Header Types": a packet with one of these as its payload is malformed.
const IPV6_EXTENSION_HEADERS = new Set([0, 43, 44, 51, 60, 135, 139, 140, 253, 254]);
const MAX_PACKETS = 10_000;
const MAX_DURATION_MS = 60_000;
const SENDER = packagePath('scripts', 'lab', 'sender.py');

/**
 * Sends nonce-stamped packets from the namespace `runner` acts in, through scripts/lab/sender.py
 * (Node has no raw sockets). Throws when a packet could not be sent, unless `allowFailures`.
 */
export async function sendPackets(
  runner: Runner,
  batch: {
    readonly nonce: string;
    readonly packets: readonly PacketSpec[];
    readonly allowFailures?: boolean;
  },
): Promise<SendResult> {
  if (runner.netns === undefined) {
    throw new EgressguardError(
      'usage',
      "Refusing to send probe packets from the machine's own network namespace",
      { hint: 'send from a lab node: sendPackets(lab.runner(node), …)' },
    );
  }
  checkBatch(batch.nonce, batch.packets);
  if (!existsSync(SENDER)) {
    throw new EgressguardError('io', `Cannot find the packet sender "${SENDER}"`, {
      hint: 'run egressguard from a checkout of its repository, which has scripts/lab/sender.py',
    });
  }
  const durationMs = batch.packets.reduce(
    (sum, p) => sum + ((p.count ?? 1) - 1) * (p.intervalMs ?? 0),
    0,
  );
  const { stdout } = await runner.run([await labPython(runner), SENDER], {
    effect: 'change',
    input: JSON.stringify({ nonce: batch.nonce, packets: batch.packets }),
    timeoutMs: durationMs + 15_000,
  });
  const specs = parseResults(stdout, batch.packets.length);
  const result = {
    sent: specs.reduce((sum, s) => sum + s.sent, 0),
    failed: specs.reduce((sum, s) => sum + s.failed, 0),
    specs,
  };
  const firstFailed = specs.findIndex((s) => s.failed > 0);
  const spec = batch.packets[firstFailed];
  if (firstFailed !== -1 && spec !== undefined && batch.allowFailures !== true) {
    throw new EgressguardError(
      'command-failed',
      `Cannot send ${specs[firstFailed]?.failed} of ${spec.count ?? 1} "${spec.kind}" packets from namespace "${runner.netns}" to "${spec.dst}"${spec.src === undefined ? '' : ` from "${spec.src}"`}: ${specs[firstFailed]?.error}`,
      {
        hint: 'a local firewall or a missing route refuses them; pass allowFailures to count them instead',
      },
    );
  }
  return result;
}

function checkBatch(nonce: string, packets: readonly PacketSpec[]): void {
  const problems: string[] = [];
  if (!isNonce(nonce)) problems.push(`nonce "${nonce}" must be 8 to 32 characters of a-z and 0-9`);
  if (packets.length === 0) problems.push('packets: give at least one');
  let total = 0;
  let durationMs = 0;
  packets.forEach((p, i) => {
    const where = `packets[${i}]`;
    const dst = parseAddress(p.dst);
    if (!PACKET_KINDS.includes(p.kind)) problems.push(`${where}.kind "${p.kind}" is unknown`);
    if (dst === undefined) problems.push(`${where}.dst "${p.dst}" is not an address`);
    if (p.src !== undefined) {
      const src = parseAddress(p.src);
      if (src === undefined) problems.push(`${where}.src "${p.src}" is not an address`);
      else if (dst !== undefined && src.family !== dst.family) {
        problems.push(`${where}: src "${p.src}" and dst "${p.dst}" are of different families`);
      }
    }
    const ported = p.kind === 'tcp' || p.kind === 'udp' || p.kind === 'sctp';
    if (ported && p.dport === undefined) problems.push(`${where}.dport is required for ${p.kind}`);
    for (const key of ['sport', 'dport'] as const) {
      const port = p[key];
      if (port !== undefined && !isIntegerIn(port, 1, 65535)) {
        problems.push(`${where}.${key} ${port} must be an integer from 1 to 65535`);
      }
    }
    if (p.kind === 'ip' && (p.protocol === undefined || !isIntegerIn(p.protocol, 0, 255))) {
      problems.push(`${where}.protocol must be an integer from 0 to 255 for kind "ip"`);
    } else if (
      p.kind === 'ip' &&
      dst?.family === 6 &&
      IPV6_EXTENSION_HEADERS.has(p.protocol ?? 0)
    ) {
      problems.push(`${where}.protocol ${p.protocol} is an IPv6 extension header, not a payload`);
    }
    const count = p.count ?? 1;
    if (!isIntegerIn(count, 1, MAX_PACKETS)) {
      problems.push(`${where}.count ${count} must be an integer from 1 to ${MAX_PACKETS}`);
    }
    const interval = p.intervalMs ?? 0;
    if (!isIntegerIn(interval, 0, 10_000)) {
      problems.push(`${where}.intervalMs ${interval} must be an integer from 0 to 10000`);
    }
    if (p.fragment !== undefined && !['all', 'non-first'].includes(p.fragment)) {
      problems.push(`${where}.fragment "${p.fragment}" must be all or non-first`);
    }
    const size = p.fragmentSize ?? 512;
    if (p.fragment !== undefined && (!isIntegerIn(size, 64, 1400) || size % 8 !== 0)) {
      problems.push(`${where}.fragmentSize ${size} must be a multiple of 8 from 64 to 1400`);
    }
    total += count;
    durationMs += (count - 1) * interval;
  });
  if (total > MAX_PACKETS) problems.push(`${total} packets in one batch, at most ${MAX_PACKETS}`);
  if (durationMs > MAX_DURATION_MS) {
    problems.push(`the batch would take ${durationMs} ms, at most ${MAX_DURATION_MS}`);
  }
  if (problems.length > 0) {
    throw new EgressguardError('usage', `Cannot send packets: ${problems.join('; ')}`);
  }
}

function parseResults(stdout: string, expected: number): SendResult['specs'] {
  try {
    const parsed = JSON.parse(stdout) as { results?: unknown };
    const results = parsed.results;
    if (
      Array.isArray(results) &&
      results.length === expected &&
      results.every(
        (r: unknown) =>
          typeof r === 'object' &&
          r !== null &&
          typeof (r as { sent?: unknown }).sent === 'number' &&
          typeof (r as { failed?: unknown }).failed === 'number',
      )
    ) {
      return results as SendResult['specs'];
    }
  } catch {
    // reported below
  }
  throw new EgressguardError(
    'command-failed',
    `Cannot read the packet sender's report: expected ${expected} results, got "${stdout.slice(0, 200)}"`,
  );
}

function isIntegerIn(value: number, low: number, high: number): boolean {
  return Number.isInteger(value) && value >= low && value <= high;
}
