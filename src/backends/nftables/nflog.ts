import { EgressguardError } from '../../core/index.js';

/** pcap link type of netfilter log messages (`tcpdump -i nflog:N`). */
export const DLT_NFLOG = 239;

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
