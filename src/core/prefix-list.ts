import { AddressSet, AddressSetBuilder } from './address-set.js';
import { type Prefix, scanPrefix, unmapIpv4 } from './cidr.js';

/** A line of a network list that is not a clean prefix. */
export type PrefixListIssue =
  | {
      readonly kind: 'malformed';
      readonly line: number;
      readonly column: number;
      readonly entry: string;
    }
  | {
      readonly kind: 'ipv4-mapped';
      readonly line: number;
      readonly column: number;
      readonly entry: string;
      /** The IPv4 prefix the line adds instead. */
      readonly prefix: Prefix;
    }
  | {
      readonly kind: 'host-bits';
      readonly line: number;
      readonly column: number;
      readonly entry: string;
      /** The prefix with its host bits cleared: what the line adds to the set. */
      readonly prefix: Prefix;
    };

/**
 * Parses a network list: one prefix or address a line, "#" starts a comment, blank lines and a
 * leading byte-order mark are skipped, each entry is trimmed. Malformed lines are left out and
 * reported; lines with host bits count with them cleared, and are reported. Lines and columns
 * are 1-based; the column is that of the entry.
 *
 * Built for lists of millions of lines: clean IPv4 lines are parsed in place, without a string
 * or an object per line, and merged with one radix sort.
 */
export function parsePrefixList(
  text: string,
  onIssue: (issue: PrefixListIssue) => void,
): AddressSet {
  const builder = new AddressSetBuilder();
  const n = text.length;
  let lineStart = text.charCodeAt(0) === 0xfeff ? 1 : 0;
  let line = 0;
  while (lineStart <= n) {
    let lineEnd = text.indexOf('\n', lineStart);
    if (lineEnd === -1) lineEnd = n;
    line++;
    if (!addIpv4Line(text, lineStart, lineEnd, builder)) {
      addOtherLine(text.slice(lineStart, lineEnd), line, builder, onIssue);
    }
    lineStart = lineEnd + 1;
  }
  return builder.build();
}

function isBlank(c: number): boolean {
  return c === 32 || c === 9 || c === 13 || c === 11 || c === 12;
}

/**
 * The fast path: `[blanks] a.b.c.d[/len] [blanks] [# comment]` with the host bits clear, or a
 * blank or comment-only line. Returns false for anything else, which the general path decides,
 * so this path only has to agree with `scanPrefix` on what it accepts.
 */
function addIpv4Line(text: string, from: number, to: number, builder: AddressSetBuilder): boolean {
  let i = from;
  while (i < to && isBlank(text.charCodeAt(i))) i++;
  if (i === to || text.charCodeAt(i) === 35) return true;
  let value = 0;
  let octet = 0;
  let digits = 0;
  let dots = 0;
  let c = 0;
  for (; i < to; i++) {
    c = text.charCodeAt(i);
    if (c >= 48 && c <= 57) {
      if (digits > 0 && octet === 0) return false;
      octet = octet * 10 + (c - 48);
      if (octet > 255) return false;
      digits++;
    } else if (c === 46) {
      if (digits === 0 || dots === 3) return false;
      value = value * 256 + octet;
      octet = 0;
      digits = 0;
      dots++;
    } else {
      break;
    }
  }
  if (dots !== 3 || digits === 0) return false;
  value = value * 256 + octet;
  let length = 32;
  if (i < to && c === 47) {
    i++;
    const lengthFrom = i;
    length = 0;
    for (; i < to; i++) {
      c = text.charCodeAt(i);
      if (c < 48 || c > 57) break;
      length = length * 10 + (c - 48);
    }
    if (i === lengthFrom || i - lengthFrom > 3 || length > 32) return false;
  }
  while (i < to && isBlank(text.charCodeAt(i))) i++;
  if (i < to && text.charCodeAt(i) !== 35) return false;
  const size = 2 ** (32 - length);
  if (value % size !== 0) return false;
  builder.addIpv4(value, value + size - 1);
  return true;
}

function addOtherLine(
  raw: string,
  line: number,
  builder: AddressSetBuilder,
  onIssue: (issue: PrefixListIssue) => void,
): void {
  const hash = raw.indexOf('#');
  const content = hash === -1 ? raw : raw.slice(0, hash);
  const entry = content.trim();
  if (entry === '') return;
  const column = content.indexOf(entry) + 1;
  const prefix = scanPrefix(entry, 0, entry.length);
  if (prefix === undefined) {
    onIssue({ kind: 'malformed', line, column, entry });
    return;
  }
  const v4 = unmapIpv4(prefix);
  if (v4 !== undefined) onIssue({ kind: 'ipv4-mapped', line, column, entry, prefix: v4 });
  builder.addPrefix(v4 ?? prefix);
  if (prefix.hadHostBits) onIssue({ kind: 'host-bits', line, column, entry, prefix: v4 ?? prefix });
}
