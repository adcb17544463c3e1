import { formatIpv4, formatIpv6, type Family } from '../../core/index.js';
import type { PacketKind } from './send-packets.js';

/** One packet as seen on the wire, from its IP header on. */
export interface ObservedPacket {
  readonly family: Family;
  readonly kind: PacketKind;
  /** The IP protocol number (the last IPv6 next header). */
  readonly protocol: number;
  readonly src: string;
  readonly dst: string;
  readonly srcPort?: number;
  readonly dstPort?: number;
  /** The ICMP or ICMPv6 type. */
  readonly icmpType?: number;
  readonly length: number;
  /** What followed the nonce (a-z0-9), when a sender appended a tag to tell its probes apart. */
  readonly tag?: string;
  /** Set on an IP fragment: the first (with the transport header) or a later one. */
  readonly fragment?: 'first' | 'non-first';
}

const KIND_OF: Readonly<Record<number, PacketKind>> = {
  6: 'tcp',
  17: 'udp',
  47: 'gre',
  50: 'esp',
  132: 'sctp',
};
// IPv6 extension headers whose length is (byte 1 + 1) * 8: hop-by-hop, routing, destination.
const IPV6_EXTENSIONS = new Set([0, 43, 60]);

/** Reads an IPv4 or IPv6 packet's addresses, protocol and ports; undefined if it is neither. */
export function parsePacket(bytes: Uint8Array): ObservedPacket | undefined {
  const view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  const version = bytes.length > 0 ? (bytes[0] ?? 0) >> 4 : 0;
  if (version === 4 && bytes.length >= 20) {
    const headerLength = ((bytes[0] ?? 0) & 0x0f) * 4;
    const flags = view.getUint16(6);
    const isLaterFragment = (flags & 0x1fff) !== 0;
    const isFragment = isLaterFragment || (flags & 0x2000) !== 0;
    return describe(bytes, {
      family: 4,
      protocol: bytes[9] ?? 0,
      src: formatIpv4(view.getUint32(12)),
      dst: formatIpv4(view.getUint32(16)),
      l4: isLaterFragment ? undefined : headerLength,
      fragment: isFragment ? (isLaterFragment ? 'non-first' : 'first') : undefined,
    });
  }
  if (version === 6 && bytes.length >= 40) {
    let protocol = bytes[6] ?? 0;
    let offset: number | undefined = 40;
    let fragment: 'first' | 'non-first' | undefined;
    while (offset !== undefined && offset + 8 <= bytes.length) {
      if (IPV6_EXTENSIONS.has(protocol)) {
        protocol = bytes[offset] ?? 0;
        offset += ((bytes[offset + 1] ?? 0) + 1) * 8;
      } else if (protocol === 44) {
        const isLaterFragment: boolean = (view.getUint16(offset + 2) & 0xfff8) !== 0;
        fragment = isLaterFragment ? 'non-first' : 'first';
        protocol = bytes[offset] ?? 0;
        offset = isLaterFragment ? undefined : offset + 8;
      } else {
        break;
      }
    }
    return describe(bytes, {
      family: 6,
      protocol,
      src: formatIpv6(readIpv6(view, 8)),
      dst: formatIpv6(readIpv6(view, 24)),
      l4: offset,
      fragment,
    });
  }
  return undefined;
}

function describe(
  bytes: Uint8Array,
  header: {
    family: Family;
    protocol: number;
    src: string;
    dst: string;
    l4: number | undefined;
    fragment: 'first' | 'non-first' | undefined;
  },
): ObservedPacket {
  const { family, protocol, src, dst, l4 } = header;
  const hasPorts = (protocol === 6 || protocol === 17 || protocol === 132) && l4 !== undefined;
  const ports =
    hasPorts && l4 + 4 <= bytes.length
      ? {
          srcPort: ((bytes[l4] ?? 0) << 8) | (bytes[l4 + 1] ?? 0),
          dstPort: ((bytes[l4 + 2] ?? 0) << 8) | (bytes[l4 + 3] ?? 0),
        }
      : {};
  const isIcmp = (family === 4 && protocol === 1) || (family === 6 && protocol === 58);
  const icmp = isIcmp && l4 !== undefined && l4 < bytes.length ? { icmpType: bytes[l4] ?? 0 } : {};
  const isDns = protocol === 17 && ports.dstPort === 53;
  const kind = isIcmp ? 'icmp' : isDns ? 'dns' : (KIND_OF[protocol] ?? 'ip');
  const fragment = header.fragment === undefined ? {} : { fragment: header.fragment };
  return { family, kind, protocol, src, dst, ...ports, ...icmp, ...fragment, length: bytes.length };
}

/** Whether a packet is an ICMP error (unreachable, time exceeded…), which quotes another packet. */
export function isIcmpError(packet: ObservedPacket): boolean {
  if (packet.kind !== 'icmp' || packet.icmpType === undefined) return false;
  // ICMPv6 errors are types 0-127 (RFC 4443 §2.1); ICMPv4 errors are these (RFC 792, RFC 1812).
  return packet.family === 6 ? packet.icmpType < 128 : [3, 4, 5, 11, 12].includes(packet.icmpType);
}

function readIpv6(view: DataView, offset: number): bigint {
  return (view.getBigUint64(offset) << 64n) | view.getBigUint64(offset + 8);
}
