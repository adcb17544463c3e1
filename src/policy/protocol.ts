import type { Protocol } from './policy.js';

/** The protocols the policy language names; any other is written as its number. */
export const PROTOCOL_NAMES: Readonly<Record<string, Protocol>> = {
  tcp: 'tcp',
  udp: 'udp',
  icmp: 'icmp',
  gre: 47,
  esp: 50,
  ah: 51,
  sctp: 132,
};

const PORTED = new Set<Protocol>(['tcp', 'udp', 132]);

/** A protocol by name (exactly as the policy language spells it) or number 0–255. */
export function parseProtocol(spec: string | number): Protocol | undefined {
  if (typeof spec === 'string') return PROTOCOL_NAMES[spec];
  if (!Number.isInteger(spec) || spec < 0 || spec > 255) return undefined;
  if (spec === 6) return 'tcp';
  if (spec === 17) return 'udp';
  return spec;
}

/** Only TCP, UDP and SCTP have ports. */
export function hasPorts(protocol: Protocol): boolean {
  return PORTED.has(protocol);
}
