import type { Family } from '../../core/index.js';
import type { ObservedPacket } from './parse-packet.js';
import type { PacketKind } from './send-packets.js';

/** How many packets match every given field (kind, family, source, destination). */
export function countPackets(
  packets: readonly ObservedPacket[],
  filter: {
    readonly kind?: PacketKind;
    readonly family?: Family;
    readonly src?: string;
    readonly dst?: string;
  } = {},
): number {
  return packets.filter(
    (p) =>
      (filter.kind === undefined || p.kind === filter.kind) &&
      (filter.family === undefined || p.family === filter.family) &&
      (filter.src === undefined || p.src === filter.src) &&
      (filter.dst === undefined || p.dst === filter.dst),
  ).length;
}
