import { EgressguardError, parseAddress } from '../core/index.js';
import { hasPorts, parseProtocol, PROTOCOL_NAMES, type Protocol } from '../policy/index.js';
import type { FragmentPart, Packet } from './evaluate.js';

/** A packet as text, the way a user gives it to `explain`. */
export interface PacketArguments {
  readonly from: string;
  readonly to: string;
  readonly in?: string | undefined;
  readonly proto?: string | undefined;
  readonly port?: string | undefined;
  readonly icmpType?: string | undefined;
  readonly fragment?: string | undefined;
}

const FRAGMENT_PARTS: readonly FragmentPart[] = ['first', 'non-first', 'alone'];

/**
 * The one validation of a packet given as text (explain's options): every value is checked, with
 * a message that names it and says what to write. Throws a `usage` error.
 */
export function parsePacketArguments(args: PacketArguments): Packet {
  const source = parseAddress(args.from.trim());
  const destination = parseAddress(args.to.trim());
  if (source === undefined) {
    throw usage(
      `Cannot use source address "${args.from}"`,
      'give an address like 192.0.2.10 or 2001:db8::10',
    );
  }
  if (destination === undefined) {
    throw usage(
      `Cannot use destination address "${args.to}"`,
      'give an address like 192.0.2.10 or 2001:db8::10',
    );
  }
  if (source.family !== destination.family) {
    throw usage(
      `Cannot explain a packet from "${args.from}" to "${args.to}": the addresses are of different families`,
      'give two IPv4 or two IPv6 addresses',
    );
  }
  const protocol = parseProtocolArgument(args.proto ?? 'tcp');
  const port = args.port === undefined ? undefined : parsePortArgument(args.port);
  if (port !== undefined && !hasPorts(protocol)) {
    throw usage(
      `Cannot use --port ${args.port} with protocol "${args.proto ?? ''}": only tcp, udp and sctp have ports`,
      protocol === 'icmp' ? 'leave out --port; give --icmp-type for ICMP' : 'leave out --port',
    );
  }
  const icmpType =
    args.icmpType === undefined ? undefined : parseIcmpTypeArgument(args.icmpType, protocol);
  let fragment: FragmentPart | undefined;
  if (args.fragment !== undefined) {
    fragment = FRAGMENT_PARTS.find((p) => p === args.fragment);
    if (fragment === undefined) {
      throw usage(
        `Cannot use --fragment "${args.fragment}"`,
        'use first or non-first (of a datagram whose fragments all arrive), or alone (a fragment whose datagram never completes)',
      );
    }
  }
  return {
    family: source.family,
    source: source.value,
    destination: destination.value,
    ingress: args.in,
    protocol,
    port,
    ...(icmpType === undefined ? {} : { icmpType }),
    ...(fragment === undefined ? {} : { fragment }),
  };
}

function parseProtocolArgument(text: string): Protocol {
  const byName = /^[a-z]+$/.test(text) ? parseProtocol(text) : undefined;
  if (byName !== undefined) return byName;
  if (/^\d{1,3}$/.test(text)) {
    const byNumber = parseProtocol(Number(text));
    if (byNumber !== undefined) return byNumber;
  }
  const names = Object.keys(PROTOCOL_NAMES);
  const lower = text.toLowerCase();
  throw usage(
    `Cannot use protocol "${text}"`,
    names.includes(lower)
      ? `protocol names are lowercase, as in a policy: write "${lower}"`
      : lower === 'icmpv6' || lower === 'ipv6-icmp'
        ? 'write "icmp": it means ICMPv6 for an IPv6 packet'
        : `use ${names.join(', ')} or a number from 0 to 255`,
  );
}

function parsePortArgument(text: string): number {
  if (!/^\d+$/.test(text)) {
    throw usage(`Cannot use port "${text}"`, 'give one port as a number from 1 to 65535');
  }
  const port = Number(text);
  if (port < 1 || port > 65535) {
    throw usage(
      `Cannot use port "${text}": ports go from 1 to 65535`,
      'give a port from 1 to 65535',
    );
  }
  return port;
}

function parseIcmpTypeArgument(text: string, protocol: Protocol): number {
  if (protocol !== 'icmp') {
    throw usage(
      `Cannot use --icmp-type ${text} with protocol "${String(protocol)}"`,
      'add --proto icmp',
    );
  }
  if (!/^\d{1,3}$/.test(text) || Number(text) > 255) {
    throw usage(
      `Cannot use ICMP type "${text}"`,
      'give a number from 0 to 255 (8 echo request; ICMPv6: 128 echo request, 133 router solicitation, 135 neighbour solicitation, 136 neighbour advertisement)',
    );
  }
  return Number(text);
}

function usage(message: string, hint: string): EgressguardError {
  return new EgressguardError('usage', message, { hint });
}
