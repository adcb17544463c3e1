import { createPcapReader, EgressguardError, formatIpv4, formatIpv6 } from '../../core/index.js';
import type { DropRecord } from '../backend.js';
import { DLT_NFLOG, parseNflog, type NflogPacket } from './nflog.js';

/** What turns a log message into a record: rule id → class, ifindex → name. */
export interface DropContext {
  readonly ruleClasses?: ReadonlyMap<string, string>;
  readonly interfaceNames?: ReadonlyMap<number, string>;
}

/**
 * The action and rule id of a prefix the nft compiler wrote (`"eg drop <id> "`,
 * `"eg audit <id> "`); undefined for anyone else's log prefix.
 */
export function parseLogPrefix(
  prefix: string,
): { action: 'drop' | 'audit'; rule: string } | undefined {
  // The compiler cuts a prefix at 127 characters, so a long id may have lost its final space.
  const match = /^eg (drop|audit) (.+?) ?$/s.exec(prefix);
  if (match?.[1] === undefined || match[2] === undefined) return undefined;
  return { action: match[1] as 'drop' | 'audit', rule: match[2] };
}

/**
 * Rule id → class, from a policy's classes. Ids are stored as the compiler writes them into log
 * prefixes (non-printable characters and quotes replaced), so they compare equal.
 */
export function mapRuleClasses(
  classes: readonly { readonly name: string; readonly rules: readonly { readonly id: string }[] }[],
): ReadonlyMap<string, string> {
  const map = new Map<string, string>();
  for (const cls of classes) {
    for (const rule of cls.rules) map.set(rule.id.replace(/[^\x20-\x7e]|"/g, '_'), cls.name);
  }
  return map;
}

/** The class of a rule id: the policy's answer, else the part before "/" of a generated id. */
export function classOfRule(
  rule: string,
  ruleClasses?: ReadonlyMap<string, string>,
): string | null {
  const known = ruleClasses?.get(rule);
  if (known !== undefined) return known;
  const slash = rule.indexOf('/');
  return slash > 0 ? rule.slice(0, slash) : null;
}

/** A record for one of our log messages; undefined when the prefix is not ours. */
export function toDropRecord(
  packet: NflogPacket,
  timeMs: number,
  context: DropContext = {},
): DropRecord | undefined {
  const parsed = packet.prefix === undefined ? undefined : parseLogPrefix(packet.prefix);
  if (parsed === undefined) return undefined;
  const ip = packet.payload === undefined ? undefined : parseIpPacket(packet.payload);
  const name = (index: number | undefined): string | null =>
    index === undefined ? null : (context.interfaceNames?.get(index) ?? `if${index}`);
  return {
    time: new Date(Math.floor(timeMs)).toISOString(),
    action: parsed.action,
    class: classOfRule(parsed.rule, context.ruleClasses),
    rule: parsed.rule,
    family: ip?.family ?? null,
    src: ip?.src ?? null,
    dst: ip?.dst ?? null,
    protocol: ip === undefined ? null : protocolName(ip.protocol),
    port: ip?.port ?? null,
    sourcePort: ip?.sourcePort ?? null,
    icmp: ip?.icmp ?? null,
    hook: packet.hook ?? null,
    in: name(packet.inIfindex),
    out: name(packet.outIfindex),
  };
}

interface IpSummary {
  readonly family: 4 | 6;
  readonly src: string;
  readonly dst: string;
  readonly protocol: number;
  readonly port: number | null;
  readonly sourcePort: number | null;
  readonly icmp: { readonly type: number; readonly code: number } | null;
}

const PORTED = new Set([6, 17, 132, 136]); // tcp, udp, sctp, udplite: ports in the first 4 bytes
const ICMP = new Set([1, 58]);
// Extension headers walked to find the transport header (RFC 8200 §4); anything else ends it.
const IPV6_EXTENSIONS = new Set([0, 43, 44, 51, 60]);

/** Addresses, protocol and ports of an IPv4 or IPv6 packet; undefined when it is too short. */
export function parseIpPacket(bytes: Uint8Array): IpSummary | undefined {
  const view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  const version = (bytes[0] ?? 0) >> 4;
  if (version === 4) {
    const headerLength = ((bytes[0] ?? 0) & 0x0f) * 4;
    if (bytes.length < 20 || headerLength < 20) return undefined;
    const fragmentOffset = view.getUint16(6, false) & 0x1fff;
    const protocol = bytes[9] ?? 0;
    return {
      family: 4,
      src: formatIpv4(view.getUint32(12, false)),
      dst: formatIpv4(view.getUint32(16, false)),
      protocol,
      // A later fragment carries no transport header.
      ...transport(protocol, fragmentOffset === 0 ? bytes.subarray(headerLength) : undefined),
    };
  }
  if (version === 6) {
    if (bytes.length < 40) return undefined;
    let protocol = bytes[6] ?? 0;
    let offset = 40;
    let rest: Uint8Array | undefined;
    for (;;) {
      if (!IPV6_EXTENSIONS.has(protocol)) {
        rest = bytes.subarray(offset);
        break;
      }
      if (offset + 8 > bytes.length) break;
      const next = bytes[offset] ?? 0;
      if (protocol === 44) {
        if ((view.getUint16(offset + 2, false) & 0xfff8) !== 0) {
          protocol = next;
          break; // a later fragment
        }
        offset += 8;
      } else if (protocol === 51) {
        offset += ((bytes[offset + 1] ?? 0) + 2) * 4;
      } else {
        offset += ((bytes[offset + 1] ?? 0) + 1) * 8;
      }
      protocol = next;
    }
    return {
      family: 6,
      src: formatIpv6(readBigUint128(view, 8)),
      dst: formatIpv6(readBigUint128(view, 24)),
      protocol,
      ...transport(protocol, rest),
    };
  }
  return undefined;
}

function transport(
  protocol: number,
  header: Uint8Array | undefined,
): Pick<IpSummary, 'port' | 'sourcePort' | 'icmp'> {
  const none = { port: null, sourcePort: null, icmp: null };
  if (header === undefined) return none;
  if (PORTED.has(protocol) && header.length >= 4) {
    const view = new DataView(header.buffer, header.byteOffset, header.byteLength);
    return { port: view.getUint16(2, false), sourcePort: view.getUint16(0, false), icmp: null };
  }
  if (ICMP.has(protocol) && header.length >= 2) {
    return { ...none, icmp: { type: header[0] ?? 0, code: header[1] ?? 0 } };
  }
  return none;
}

function readBigUint128(view: DataView, offset: number): bigint {
  return (view.getBigUint64(offset, false) << 64n) | view.getBigUint64(offset + 8, false);
}

const PROTOCOL_NAMES: Record<number, string> = {
  1: 'icmp',
  2: 'igmp',
  6: 'tcp',
  17: 'udp',
  41: 'ipv6',
  47: 'gre',
  50: 'esp',
  51: 'ah',
  58: 'icmpv6',
  132: 'sctp',
  136: 'udplite',
};

function protocolName(protocol: number): string {
  return PROTOCOL_NAMES[protocol] ?? String(protocol);
}

/**
 * Decodes the pcap stream of `tcpdump -i nflog:N -w -` into records of our log messages, chunk
 * by chunk; messages with anyone else's prefix are skipped.
 */
export function createDropDecoder(context: DropContext = {}): {
  push(chunk: Uint8Array): DropRecord[];
} {
  const reader = createPcapReader();
  return {
    push(chunk) {
      return reader.push(chunk).flatMap((record) => {
        if (record.linkType !== DLT_NFLOG) {
          throw new EgressguardError(
            'io',
            `Cannot read drops: the capture has link type ${record.linkType}, not NFLOG (${DLT_NFLOG})`,
            { hint: 'capture with `tcpdump -i nflog:GROUP`' },
          );
        }
        const drop = toDropRecord(
          parseNflog(record.data, record.littleEndian),
          record.timeMs,
          context,
        );
        return drop === undefined ? [] : [drop];
      });
    },
  };
}
