import { EgressguardError } from '../../core/index.js';

/** pcap link type of netfilter log messages (`tcpdump -i nflog:N`). */
export const DLT_NFLOG = 239;

/** One record of a pcap stream. */
export interface PcapRecord {
  /** Capture time, milliseconds since the epoch (microseconds kept as a fraction). */
  readonly timeMs: number;
  readonly linkType: number;
  /** Whether the writer was little-endian: NFLOG TLV headers follow it (libpcap pcap-common.c). */
  readonly littleEndian: boolean;
  readonly data: Uint8Array;
}

/** Reads a pcap stream (the classic format `tcpdump -w -` writes) chunk by chunk. */
export interface PcapReader {
  /** Feeds bytes; returns the records completed by them. */
  push(chunk: Uint8Array): PcapRecord[];
  /** Bytes held back waiting for the rest of a record. */
  readonly pending: number;
}

const GLOBAL_HEADER = 24;
const RECORD_HEADER = 16;
const MAX_RECORD = 16 * 1024 * 1024;

export function createPcapReader(): PcapReader {
  let buffer: Uint8Array = new Uint8Array(0);
  let header: { littleEndian: boolean; nanoseconds: boolean; linkType: number } | undefined;
  return {
    get pending() {
      return buffer.length;
    },
    push(chunk) {
      buffer = buffer.length === 0 ? chunk : concat(buffer, chunk);
      const records: PcapRecord[] = [];
      let offset = 0;
      const view = new DataView(buffer.buffer, buffer.byteOffset, buffer.byteLength);
      if (header === undefined) {
        if (buffer.length < GLOBAL_HEADER) return records;
        header = parseGlobalHeader(view);
        offset = GLOBAL_HEADER;
      }
      const le = header.littleEndian;
      while (buffer.length - offset >= RECORD_HEADER) {
        const seconds = view.getUint32(offset, le);
        const fraction = view.getUint32(offset + 4, le);
        const captured = view.getUint32(offset + 8, le);
        if (captured > MAX_RECORD) {
          throw new EgressguardError(
            'io',
            `Cannot read pcap stream: a record claims ${captured} bytes`,
          );
        }
        if (buffer.length - offset - RECORD_HEADER < captured) break;
        const start = offset + RECORD_HEADER;
        records.push({
          timeMs: seconds * 1000 + fraction / (header.nanoseconds ? 1e6 : 1e3),
          linkType: header.linkType,
          littleEndian: le,
          data: buffer.slice(start, start + captured),
        });
        offset = start + captured;
      }
      buffer = buffer.slice(offset);
      return records;
    },
  };
}

function parseGlobalHeader(view: DataView): {
  littleEndian: boolean;
  nanoseconds: boolean;
  linkType: number;
} {
  const magic = view.getUint32(0, false);
  const known: Record<number, { littleEndian: boolean; nanoseconds: boolean }> = {
    0xa1b2c3d4: { littleEndian: false, nanoseconds: false },
    0xd4c3b2a1: { littleEndian: true, nanoseconds: false },
    0xa1b23c4d: { littleEndian: false, nanoseconds: true },
    0x4d3cb2a1: { littleEndian: true, nanoseconds: true },
  };
  const format = known[magic];
  if (format === undefined) {
    throw new EgressguardError(
      'io',
      `Cannot read pcap stream: unknown magic number 0x${magic.toString(16).padStart(8, '0')}`,
      { hint: 'expected the classic pcap format that `tcpdump -w -` writes' },
    );
  }
  return { ...format, linkType: view.getUint32(20, format.littleEndian) & 0x0fffffff };
}

function concat(a: Uint8Array, b: Uint8Array): Uint8Array {
  const out = new Uint8Array(a.length + b.length);
  out.set(a, 0);
  out.set(b, a.length);
  return out;
}

/** The netfilter hooks, as NFULA_PACKET_HDR numbers them (NF_INET_*). */
const HOOKS = ['prerouting', 'input', 'forward', 'output', 'postrouting'] as const;
export type NetfilterHook = (typeof HOOKS)[number];

/** One netfilter log message: the attributes egressguard uses. */
export interface NflogPacket {
  /** NFPROTO_* of the logging chain: 2 IPv4, 10 IPv6, 7 bridge. */
  readonly family: number;
  /** The nflog group. */
  readonly group: number;
  readonly hook: NetfilterHook | undefined;
  readonly prefix: string | undefined;
  readonly inIfindex: number | undefined;
  readonly outIfindex: number | undefined;
  /** The packet from its network header on (NFULA_PAYLOAD). */
  readonly payload: Uint8Array | undefined;
}

// linux/netfilter/nfnetlink_log.h
const NFULA_PACKET_HDR = 1;
const NFULA_IFINDEX_INDEV = 4;
const NFULA_IFINDEX_OUTDEV = 5;
const NFULA_PAYLOAD = 9;
const NFULA_PREFIX = 10;

/**
 * Parses one DLT_NFLOG record: a 4-byte header (family, version, group in network order) and
 * TLVs whose length and type are in the writer's byte order, each padded to 4 bytes; attribute
 * values are netlink's (ifindexes big-endian). https://www.tcpdump.org/linktypes/LINKTYPE_NFLOG.html
 */
export function parseNflog(data: Uint8Array, littleEndian: boolean): NflogPacket {
  if (data.length < 4) {
    throw new EgressguardError(
      'io',
      `Cannot parse NFLOG record: ${data.length} bytes, shorter than its header`,
    );
  }
  const view = new DataView(data.buffer, data.byteOffset, data.byteLength);
  let hook: NetfilterHook | undefined;
  let prefix: string | undefined;
  let inIfindex: number | undefined;
  let outIfindex: number | undefined;
  let payload: Uint8Array | undefined;
  let offset = 4;
  while (offset + 4 <= data.length) {
    const length = view.getUint16(offset, littleEndian);
    const type = view.getUint16(offset + 2, littleEndian) & 0x7fff; // NLA_F_NESTED etc.
    if (length < 4 || offset + length > data.length) {
      throw new EgressguardError(
        'io',
        `Cannot parse NFLOG record: attribute ${type} at byte ${offset} claims ${length} bytes`,
      );
    }
    const value = data.subarray(offset + 4, offset + length);
    const valueView = new DataView(value.buffer, value.byteOffset, value.byteLength);
    switch (type) {
      case NFULA_PACKET_HDR:
        if (value.length >= 3) hook = HOOKS[value[2] ?? -1];
        break;
      case NFULA_IFINDEX_INDEV:
        if (value.length >= 4) inIfindex = valueView.getUint32(0, false);
        break;
      case NFULA_IFINDEX_OUTDEV:
        if (value.length >= 4) outIfindex = valueView.getUint32(0, false);
        break;
      case NFULA_PAYLOAD:
        payload = value;
        break;
      case NFULA_PREFIX: {
        const end = value.indexOf(0);
        prefix = new TextDecoder().decode(end === -1 ? value : value.subarray(0, end));
        break;
      }
      default:
        break;
    }
    offset += (length + 3) & ~3;
  }
  return {
    family: data[0] ?? 0,
    group: view.getUint16(2, false),
    hook,
    prefix,
    inIfindex,
    outIfindex,
    payload,
  };
}
