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

/** Parses dotted-quad IPv4; returns undefined when malformed. Hand-written: 1M lines must parse fast. */
export function parseIpv4(text: string): number | undefined {
  let value = 0;
  let octet = 0;
  let digits = 0;
  let dots = 0;
  for (let i = 0; i < text.length; i++) {
    const c = text.charCodeAt(i);
    if (c >= 48 && c <= 57) {
      if (digits > 0 && octet === 0) return undefined; // leading zero: ambiguous (octal in some tools)
      octet = octet * 10 + (c - 48);
      digits++;
      if (octet > 255) return undefined;
    } else if (c === 46) {
      if (digits === 0) return undefined;
      value = value * 256 + octet;
      octet = 0;
      digits = 0;
      dots++;
      if (dots > 3) return undefined;
    } else {
      return undefined;
    }
  }
  if (dots !== 3 || digits === 0) return undefined;
  return value * 256 + octet;
}

/** Parses IPv6 (with :: and an embedded dotted-quad tail); returns undefined when malformed. */
export function parseIpv6(text: string): bigint | undefined {
  if (text.length < 2 || !/^[0-9a-fA-F:.]+$/.test(text)) return undefined;
  const halves = text.split('::');
  if (halves.length > 2) return undefined;
  const parseGroups = (part: string): number[] | undefined => {
    if (part === '') return [];
    const groups: number[] = [];
    const pieces = part.split(':');
    for (let i = 0; i < pieces.length; i++) {
      const piece = pieces[i] ?? '';
      if (i === pieces.length - 1 && piece.includes('.')) {
        const v4 = parseIpv4(piece);
        if (v4 === undefined) return undefined;
        groups.push(Math.floor(v4 / 65536), v4 % 65536);
      } else {
        if (!/^[0-9a-fA-F]{1,4}$/.test(piece)) return undefined;
        groups.push(parseInt(piece, 16));
      }
    }
    return groups;
  };
  const head = parseGroups(halves[0] ?? '');
  const tail = halves.length === 2 ? parseGroups(halves[1] ?? '') : [];
  if (head === undefined || tail === undefined) return undefined;
  const missing = 8 - head.length - tail.length;
  if (halves.length === 2 ? missing < 1 : missing !== 0) return undefined;
  let value = 0n;
  for (const g of [...head, ...new Array<number>(missing).fill(0), ...tail]) {
    value = (value << 16n) | BigInt(g);
  }
  return value;
}

export type ParsedAddress = { family: 4; value: number } | { family: 6; value: bigint };

export function parseAddress(text: string): ParsedAddress | undefined {
  const v4 = parseIpv4(text);
  if (v4 !== undefined) return { family: 4, value: v4 };
  const v6 = parseIpv6(text);
  if (v6 !== undefined) return { family: 6, value: v6 };
  return undefined;
}

/** Parses `addr` or `addr/len` (a bare address is a host prefix). */
export function parsePrefix(text: string): Prefix | undefined {
  const slash = text.indexOf('/');
  const addrText = slash === -1 ? text : text.slice(0, slash);
  const address = parseAddress(addrText);
  if (address === undefined) return undefined;
  const max = address.family === 4 ? 32 : 128;
  let length = max;
  if (slash !== -1) {
    const lenText = text.slice(slash + 1);
    if (!/^\d{1,3}$/.test(lenText)) return undefined;
    length = Number(lenText);
    if (length > max) return undefined;
  }
  if (address.family === 4) {
    const size = 2 ** (32 - length);
    const start = address.value - (address.value % size);
    return { family: 4, start, length, hadHostBits: start !== address.value };
  }
  const hostBits = BigInt(128 - length);
  const start = (address.value >> hostBits) << hostBits;
  return { family: 6, start, length, hadHostBits: start !== address.value };
}

/** Last address of a prefix. */
export function prefixEnd(prefix: Prefix): number | bigint {
  if (prefix.family === 4) return (prefix.start as number) + 2 ** (32 - prefix.length) - 1;
  return (prefix.start as bigint) + (1n << BigInt(128 - prefix.length)) - 1n;
}

export function formatIpv4(value: number): string {
  return `${Math.floor(value / 16777216)}.${Math.floor(value / 65536) % 256}.${Math.floor(value / 256) % 256}.${value % 256}`;
}

/** RFC 5952 canonical text. */
export function formatIpv6(value: bigint): string {
  const groups: number[] = [];
  for (let i = 7; i >= 0; i--) groups.push(Number((value >> BigInt(i * 16)) & 0xffffn));
  let bestStart = -1;
  let bestLen = 1;
  for (let i = 0; i < 8;) {
    if (groups[i] !== 0) {
      i++;
      continue;
    }
    let j = i;
    while (j < 8 && groups[j] === 0) j++;
    if (j - i > bestLen) {
      bestStart = i;
      bestLen = j - i;
    }
    i = j;
  }
  const hex = groups.map((g) => g.toString(16));
  if (bestStart === -1) return hex.join(':');
  return `${hex.slice(0, bestStart).join(':')}::${hex.slice(bestStart + bestLen).join(':')}`;
}

export function formatAddress(family: Family, value: number | bigint): string {
  return family === 4 ? formatIpv4(value as number) : formatIpv6(value as bigint);
}
