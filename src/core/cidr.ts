/** IP addresses and prefixes: IPv4 as numbers, IPv6 as bigints. */
export type Family = 4 | 6;

export interface Prefix {
  readonly family: Family;
  /** First address of the prefix (host bits cleared). */
  readonly start: number | bigint;
  readonly length: number;
  /** Whether the written form had host bits set (e.g. 10.0.0.1/8). */
  readonly hadHostBits: boolean;
}

export const V6_MAX = (1n << 128n) - 1n;
export const V4_MAX = 2 ** 32 - 1;

/**
 * Parses dotted-quad IPv4 in text[from, to); -1 when malformed. Hand-written and slice-free, as
 * network lists of a million lines go through it. Leading zeros are refused: inet_aton and many
 * tools read "010" as octal 8, so the address would be ambiguous.
 */
function scanIpv4(text: string, from: number, to: number): number {
  let value = 0;
  let octet = 0;
  let digits = 0;
  let dots = 0;
  for (let i = from; i < to; i++) {
    const c = text.charCodeAt(i);
    if (c >= 48 && c <= 57) {
      if (digits > 0 && octet === 0) return -1;
      octet = octet * 10 + (c - 48);
      if (octet > 255) return -1;
      digits++;
    } else if (c === 46) {
      if (digits === 0 || dots === 3) return -1;
      value = value * 256 + octet;
      octet = 0;
      digits = 0;
      dots++;
    } else {
      return -1;
    }
  }
  if (dots !== 3 || digits === 0) return -1;
  return value * 256 + octet;
}

/** Parses dotted-quad IPv4; returns undefined when malformed. */
export function parseIpv4(text: string): number | undefined {
  const value = scanIpv4(text, 0, text.length);
  return value === -1 ? undefined : value;
}

// Scratch space for parseIpv6: parsing is synchronous, so one buffer serves every call.
const groups = new Uint16Array(8);

function hexValue(c: number): number {
  if (c >= 48 && c <= 57) return c - 48;
  if (c >= 97 && c <= 102) return c - 87;
  if (c >= 65 && c <= 70) return c - 55;
  return -1;
}

/**
 * Parses IPv6 text (RFC 4291 §2.2: groups of 1–4 hex digits, one "::", an optional dotted-quad
 * tail) in text[from, to); undefined when malformed. Zone ids ("%eth0") are refused.
 */
function scanIpv6(text: string, from: number, to: number): bigint | undefined {
  if (to - from < 2) return undefined;
  let count = 0;
  let gap = -1;
  let i = from;
  if (text.charCodeAt(i) === 58) {
    if (text.charCodeAt(i + 1) !== 58) return undefined;
    gap = 0;
    i += 2;
  }
  while (i < to) {
    let value = 0;
    let j = i;
    for (; j < to; j++) {
      const d = hexValue(text.charCodeAt(j));
      if (d === -1) break;
      if (j - i === 4) return undefined;
      value = value * 16 + d;
    }
    if (j === i) return undefined;
    if (j < to && text.charCodeAt(j) === 46) {
      // The dotted-quad tail is the last 32 bits, so it must end the text.
      if (count > 6) return undefined;
      const v4 = scanIpv4(text, i, to);
      if (v4 === -1) return undefined;
      groups[count++] = Math.floor(v4 / 65536);
      groups[count++] = v4 % 65536;
      break;
    }
    if (count === 8) return undefined;
    groups[count++] = value;
    if (j === to) break;
    if (text.charCodeAt(j) !== 58) return undefined;
    if (j + 1 < to && text.charCodeAt(j + 1) === 58) {
      if (gap !== -1) return undefined;
      gap = count;
      i = j + 2;
    } else {
      i = j + 1;
      if (i === to) return undefined; // a trailing single ":"
    }
  }
  // "::" stands for at least one group of zeros (RFC 4291 §2.2; RFC 5952 §4.2.2).
  if (gap === -1 ? count !== 8 : count > 7) return undefined;
  if (gap !== -1) {
    const tail = count - gap;
    groups.copyWithin(8 - tail, gap, count);
    groups.fill(0, gap, 8 - tail);
  }
  // Four 32-bit words: fewer bigint operations than eight 16-bit shifts.
  const w0 = (groups[0] as number) * 65536 + (groups[1] as number);
  const w1 = (groups[2] as number) * 65536 + (groups[3] as number);
  const w2 = (groups[4] as number) * 65536 + (groups[5] as number);
  const w3 = (groups[6] as number) * 65536 + (groups[7] as number);
  return (BigInt(w0) << 96n) | (BigInt(w1) << 64n) | (BigInt(w2) << 32n) | BigInt(w3);
}

/** Parses IPv6 (with :: and an embedded dotted-quad tail); returns undefined when malformed. */
export function parseIpv6(text: string): bigint | undefined {
  return scanIpv6(text, 0, text.length);
}

export type ParsedAddress = { family: 4; value: number } | { family: 6; value: bigint };

export function parseAddress(text: string): ParsedAddress | undefined {
  const v4 = scanIpv4(text, 0, text.length);
  if (v4 !== -1) return { family: 4, value: v4 };
  const v6 = scanIpv6(text, 0, text.length);
  if (v6 !== undefined) return { family: 6, value: v6 };
  return undefined;
}

/** Parses `addr` or `addr/len` in text[from, to) (a bare address is a host prefix). */
export function scanPrefix(text: string, from: number, to: number): Prefix | undefined {
  let slash = text.indexOf('/', from);
  if (slash === -1 || slash >= to) slash = to;
  let family: Family = 4;
  const v4 = scanIpv4(text, from, slash);
  let v6: bigint | undefined;
  if (v4 === -1) {
    v6 = scanIpv6(text, from, slash);
    if (v6 === undefined) return undefined;
    family = 6;
  }
  const max = family === 4 ? 32 : 128;
  let length = max;
  if (slash !== to) {
    // One to three decimal digits, as written by hand or by tools ("/024" is 24).
    const digits = to - slash - 1;
    if (digits < 1 || digits > 3) return undefined;
    length = 0;
    for (let i = slash + 1; i < to; i++) {
      const c = text.charCodeAt(i);
      if (c < 48 || c > 57) return undefined;
      length = length * 10 + (c - 48);
    }
    if (length > max) return undefined;
  }
  if (family === 4) {
    const size = 2 ** (32 - length);
    const start = v4 - (v4 % size);
    return { family: 4, start, length, hadHostBits: start !== v4 };
  }
  const value = v6 as bigint;
  const hostBits = BigInt(128 - length);
  const start = (value >> hostBits) << hostBits;
  return { family: 6, start, length, hadHostBits: start !== value };
}

/** Parses `addr` or `addr/len` (a bare address is a host prefix). */
export function parsePrefix(text: string): Prefix | undefined {
  return scanPrefix(text, 0, text.length);
}

/** Last address of a prefix. */
/**
 * The IPv4 prefix an IPv4-mapped IPv6 prefix (within ::ffff:0:0/96) stands for, or undefined. Such
 * addresses never appear in IPv6 packets on the wire (RFC 4291 §2.5.5.2): a network written with
 * one means the IPv4 address.
 */
export function unmapIpv4(prefix: Prefix): Prefix | undefined {
  if (prefix.family !== 6 || prefix.length < 96) return undefined;
  const start = prefix.start as bigint;
  if (start >> 32n !== 0xffffn) return undefined;
  return {
    family: 4,
    start: Number(start & 0xffffffffn),
    length: prefix.length - 96,
    hadHostBits: prefix.hadHostBits,
  };
}

export function prefixEnd(prefix: Prefix): number | bigint {
  if (prefix.family === 4) return (prefix.start as number) + 2 ** (32 - prefix.length) - 1;
  return (prefix.start as bigint) + (1n << BigInt(128 - prefix.length)) - 1n;
}

export function formatIpv4(value: number): string {
  return `${Math.floor(value / 16777216)}.${Math.floor(value / 65536) % 256}.${Math.floor(value / 256) % 256}.${value % 256}`;
}

/**
 * RFC 5952 §4 canonical text: lowercase, no leading zeros, the longest run of two or more zero
 * groups (the first of equal runs) as "::". IPv4-mapped addresses stay in hex (::ffff:c000:201):
 * §5 recommends, without requiring, the mixed ::ffff:192.0.2.1 that glibc's inet_ntop prints.
 */
export function formatIpv6(value: bigint): string {
  const words = [
    Number((value >> 96n) & 0xffffffffn),
    Number((value >> 64n) & 0xffffffffn),
    Number((value >> 32n) & 0xffffffffn),
    Number(value & 0xffffffffn),
  ];
  const hex: string[] = [];
  for (const w of words) hex.push(Math.floor(w / 65536).toString(16), (w % 65536).toString(16));
  let bestStart = -1;
  let bestLen = 1;
  for (let i = 0; i < 8;) {
    if (hex[i] !== '0') {
      i++;
      continue;
    }
    let j = i;
    while (j < 8 && hex[j] === '0') j++;
    if (j - i > bestLen) {
      bestStart = i;
      bestLen = j - i;
    }
    i = j;
  }
  if (bestStart === -1) return hex.join(':');
  return `${hex.slice(0, bestStart).join(':')}::${hex.slice(bestStart + bestLen).join(':')}`;
}

export function formatAddress(family: Family, value: number | bigint): string {
  return family === 4 ? formatIpv4(value as number) : formatIpv6(value as bigint);
}
