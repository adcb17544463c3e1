import { EgressguardError } from './errors.js';

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

/** A reader of the classic pcap format (`tcpdump -w`), fed chunk by chunk. */
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
