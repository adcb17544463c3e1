import {
  type Family,
  type Prefix,
  V4_MAX,
  V6_MAX,
  formatIpv4,
  formatIpv6,
  parsePrefix,
  prefixEnd,
} from './cidr.js';

/**
 * Sorted, disjoint, non-adjacent closed intervals, flattened as [start0, end0, start1, end1, …].
 * IPv4 bounds are numbers (exact below 2^53), IPv6 bounds bigints.
 */
type Flat<T> = readonly T[];

// The AddressSet constructor stays private; the builder below reaches it through this.
let createSet: (v4: Flat<number>, v6: Flat<bigint>) => AddressSet;

/** An immutable set of addresses in both families, kept as merged intervals. */
export class AddressSet {
  static readonly EMPTY = new AddressSet([], []);
  static readonly ALL = new AddressSet([0, V4_MAX], [0n, V6_MAX]);

  static {
    createSet = (v4, v6) =>
      v4.length === 0 && v6.length === 0 ? AddressSet.EMPTY : new AddressSet(v4, v6);
  }

  private constructor(
    readonly v4: Flat<number>,
    readonly v6: Flat<bigint>,
  ) {
    Object.freeze(this);
  }

  static fromPrefixes(prefixes: Iterable<Prefix>): AddressSet {
    const builder = new AddressSetBuilder();
    for (const p of prefixes) builder.addPrefix(p);
    return builder.build();
  }

  /** Parses prefixes; throws on a malformed one (validated input only). */
  static parse(texts: readonly string[]): AddressSet {
    const builder = new AddressSetBuilder();
    for (const t of texts) {
      const p = parsePrefix(t);
      if (p === undefined) throw new Error(`Cannot parse prefix "${t}"`);
      builder.addPrefix(p);
    }
    return builder.build();
  }

  union(other: AddressSet): AddressSet {
    if (other.isEmpty()) return this;
    if (this.isEmpty()) return other;
    return createSet(unionFlat(this.v4, other.v4, 1), unionFlat(this.v6, other.v6, 1n));
  }

  subtract(other: AddressSet): AddressSet {
    if (this.isEmpty() || other.isEmpty()) return this;
    return createSet(subtractFlat(this.v4, other.v4, 1), subtractFlat(this.v6, other.v6, 1n));
  }

  intersect(other: AddressSet): AddressSet {
    return this.subtract(this.subtract(other));
  }

  /** Keeps one family only. */
  only(family: Family): AddressSet {
    return family === 4 ? createSet(this.v4, []) : createSet([], this.v6);
  }

  isEmpty(): boolean {
    return this.v4.length === 0 && this.v6.length === 0;
  }

  has(family: Family): boolean {
    return (family === 4 ? this.v4.length : this.v6.length) > 0;
  }

  contains(family: Family, address: number | bigint): boolean {
    return family === 4
      ? containsFlat(this.v4, address as number)
      : containsFlat(this.v6, address as bigint);
  }

  /** Whether every address of `other` is in this set. */
  covers(other: AddressSet): boolean {
    return other.subtract(this).isEmpty();
  }

  intervalCount(): number {
    return (this.v4.length + this.v6.length) / 2;
  }

  /** The intervals of one family, as [first, last] pairs. */
  *intervals(family: Family): Generator<[number | bigint, number | bigint]> {
    const flat = family === 4 ? this.v4 : this.v6;
    for (let i = 0; i < flat.length; i += 2) {
      yield [flat[i] as number | bigint, flat[i + 1] as number | bigint];
    }
  }

  /** The minimal list of CIDR prefixes covering exactly this set, in address order. */
  toCidrs(family: Family): string[] {
    const out: string[] = [];
    if (family === 4) {
      const flat = this.v4;
      for (let i = 0; i < flat.length; i += 2) {
        ipv4RangeToCidrs(flat[i] as number, flat[i + 1] as number, out);
      }
    } else {
      const flat = this.v6;
      for (let i = 0; i < flat.length; i += 2) {
        ipv6RangeToCidrs(flat[i] as bigint, flat[i + 1] as bigint, out);
      }
    }
    return out;
  }

  /** A compact human form, e.g. for explain output. */
  describe(limit = 4): string {
    const all = [...this.toCidrs(4), ...this.toCidrs(6)];
    if (all.length === 0) return '(empty)';
    return all.length <= limit
      ? all.join(', ')
      : `${all.slice(0, limit).join(', ')}, … (${all.length} prefixes)`;
  }
}

/**
 * Collects prefixes and ranges in any order, then merges them once. IPv4 takes the fast path:
 * starts and ends in two Uint32Arrays, each radix-sorted, then one sweep (see `mergeIpv4`).
 */
export class AddressSetBuilder {
  private starts = new Uint32Array(256);
  private ends = new Uint32Array(256);
  private count = 0;
  private readonly v6: [bigint, bigint][] = [];

  /** Adds the IPv4 range [start, end] (0 ≤ start ≤ end ≤ 2^32 − 1). */
  addIpv4(start: number, end: number): void {
    if (this.count === this.starts.length) {
      const starts = new Uint32Array(this.count * 2);
      const ends = new Uint32Array(this.count * 2);
      starts.set(this.starts);
      ends.set(this.ends);
      this.starts = starts;
      this.ends = ends;
    }
    this.starts[this.count] = start;
    this.ends[this.count] = end;
    this.count++;
  }

  addIpv6(start: bigint, end: bigint): void {
    this.v6.push([start, end]);
  }

  addPrefix(p: Prefix): void {
    if (p.family === 4) {
      const start = p.start as number;
      this.addIpv4(start, start + 2 ** (32 - p.length) - 1);
    } else {
      this.addIpv6(p.start as bigint, prefixEnd(p) as bigint);
    }
  }

  build(): AddressSet {
    const v4 = mergeIpv4(this.starts.subarray(0, this.count), this.ends.subarray(0, this.count));
    this.v6.sort((a, b) => (a[0] < b[0] ? -1 : a[0] > b[0] ? 1 : 0));
    const v6: bigint[] = [];
    for (const [s, e] of this.v6) pushMerged(v6, s, e, 1n);
    return createSet(v4, v6);
  }
}

/**
 * Merges intervals given as starts and ends, which may be sorted independently of each other:
 * the number of intervals covering x is #{start ≤ x} − #{end < x}, so with both sorted, the
 * union has a gap between the k-th and (k+1)-th run exactly where starts[k] > ends[k − 1] + 1.
 * This avoids sorting pairs (objects, or 38-bit keys that do not fit a Uint32Array).
 */
function mergeIpv4(starts: Uint32Array, ends: Uint32Array): number[] {
  const n = starts.length;
  if (n === 0) return [];
  sortUint32(starts);
  sortUint32(ends);
  // Count the runs first, so the result is allocated once instead of grown by push.
  let runs = 1;
  for (let k = 1; k < n; k++) {
    if ((starts[k] as number) > (ends[k - 1] as number) + 1) runs++;
  }
  const out = new Array<number>(runs * 2);
  let o = 0;
  let runStart = starts[0] as number;
  for (let k = 1; k < n; k++) {
    const s = starts[k] as number;
    const previousEnd = ends[k - 1] as number;
    if (s > previousEnd + 1) {
      out[o++] = runStart;
      out[o++] = previousEnd;
      runStart = s;
    }
  }
  out[o++] = runStart;
  out[o] = ends[n - 1] as number;
  return out;
}

let radixScratch = new Uint32Array(0);
const radixCounts = new Uint32Array(65536);

/** Sorts in place: already sorted input (common for published lists) costs one pass. */
function sortUint32(a: Uint32Array): void {
  const n = a.length;
  let sorted = true;
  for (let i = 1; i < n; i++) {
    if ((a[i - 1] as number) > (a[i] as number)) {
      sorted = false;
      break;
    }
  }
  if (sorted) return;
  // Below a few thousand elements the built-in sort wins; above, two 16-bit LSD radix passes
  // are about 5× faster than it on a million elements.
  if (n < 4096) {
    a.sort();
    return;
  }
  if (radixScratch.length < n) radixScratch = new Uint32Array(n);
  const b = radixScratch;
  radixPass(a, b, n, 0);
  radixPass(b, a, n, 16);
}

function radixPass(from: Uint32Array, to: Uint32Array, n: number, shift: number): void {
  const counts = radixCounts;
  counts.fill(0);
  for (let i = 0; i < n; i++) {
    const digit = ((from[i] as number) >>> shift) & 0xffff;
    counts[digit] = (counts[digit] as number) + 1;
  }
  let sum = 0;
  for (let d = 0; d < 65536; d++) {
    const c = counts[d] as number;
    counts[d] = sum;
    sum += c;
  }
  for (let i = 0; i < n; i++) {
    const v = from[i] as number;
    const digit = (v >>> shift) & 0xffff;
    const at = counts[digit] as number;
    to[at] = v;
    counts[digit] = at + 1;
  }
}

function pushMerged<T extends number | bigint>(out: T[], start: T, end: T, one: T): void {
  const n = out.length;
  if (n > 0) {
    const lastEnd = out[n - 1] as T;
    // Adjacent or overlapping: extend (the `+ one` keeps sets canonical, merged like an interval set's auto-merge).
    if (start <= (((lastEnd as number) + (one as number)) as T)) {
      if (end > lastEnd) out[n - 1] = end;
      return;
    }
  }
  out.push(start, end);
}

function unionFlat<T extends number | bigint>(a: Flat<T>, b: Flat<T>, one: T): Flat<T> {
  if (b.length === 0) return a;
  if (a.length === 0) return b;
  const out: T[] = [];
  let i = 0;
  let j = 0;
  while (i < a.length || j < b.length) {
    const takeA = j >= b.length || (i < a.length && (a[i] as T) <= (b[j] as T));
    if (takeA) {
      pushMerged(out, a[i] as T, a[i + 1] as T, one);
      i += 2;
    } else {
      pushMerged(out, b[j] as T, b[j + 1] as T, one);
      j += 2;
    }
  }
  return out;
}

function subtractFlat<T extends number | bigint>(a: Flat<T>, b: Flat<T>, one: T): Flat<T> {
  if (a.length === 0 || b.length === 0) return a;
  const out: T[] = [];
  let j = 0;
  for (let i = 0; i < a.length; i += 2) {
    let start = a[i] as T;
    const end = a[i + 1] as T;
    while (j < b.length && (b[j + 1] as T) < start) j += 2;
    let k = j;
    while (k < b.length && (b[k] as T) <= end && start <= end) {
      const bs = b[k] as T;
      const be = b[k + 1] as T;
      if (bs > start) out.push(start, ((bs as number) - (one as number)) as T);
      if (be >= end) {
        start = ((end as number) + (one as number)) as T; // consumed
        break;
      }
      start = ((be as number) + (one as number)) as T;
      k += 2;
    }
    if (start <= end) out.push(start, end);
  }
  return out;
}

function containsFlat<T extends number | bigint>(flat: Flat<T>, x: T): boolean {
  let lo = 0;
  let hi = flat.length / 2 - 1;
  while (lo <= hi) {
    const mid = (lo + hi) >> 1;
    const s = flat[mid * 2] as T;
    const e = flat[mid * 2 + 1] as T;
    if (x < s) hi = mid - 1;
    else if (x > e) lo = mid + 1;
    else return true;
  }
  return false;
}

/** Splits [start, end] into the fewest aligned prefixes, in plain numbers (no bigint). */
function ipv4RangeToCidrs(start: number, end: number, out: string[]): void {
  let s = start;
  while (s <= end) {
    // The largest block aligned at s (its lowest set bit; all 2^32 at 0) that fits in the range.
    let size = s === 0 ? 2 ** 32 : (s & -s) >>> 0;
    while (size > end - s + 1) size /= 2;
    const length = size === 2 ** 32 ? 0 : Math.clz32(size) + 1;
    out.push(`${formatIpv4(s)}/${length}`);
    s += size;
  }
}

function ipv6RangeToCidrs(start: bigint, end: bigint, out: string[]): void {
  let s = start;
  while (s <= end) {
    let size = 0;
    // Grow the block while it stays aligned at s and within the range.
    while (size < 128) {
      const next = 1n << BigInt(size + 1);
      if (s % next !== 0n || s + next - 1n > end) break;
      size++;
    }
    out.push(`${formatIpv6(s)}/${128 - size}`);
    s += 1n << BigInt(size);
  }
}
