import {
  type Family,
  type Prefix,
  V4_MAX,
  V6_MAX,
  formatAddress,
  parsePrefix,
  prefixEnd,
} from './cidr.js';

/**
 * Sorted, disjoint, non-adjacent closed intervals, flattened as [start0, end0, start1, end1, …].
 * IPv4 bounds are numbers (exact below 2^53), IPv6 bounds bigints.
 */
type Flat<T> = readonly T[];

/** An immutable set of addresses in both families, kept as merged intervals. */
export class AddressSet {
  static readonly EMPTY = new AddressSet([], []);
  static readonly ALL = new AddressSet([0, V4_MAX], [0n, V6_MAX]);

  private constructor(
    readonly v4: Flat<number>,
    readonly v6: Flat<bigint>,
  ) {
    Object.freeze(this);
  }

  static fromPrefixes(prefixes: Iterable<Prefix>): AddressSet {
    const v4 = new Float64Array(64);
    let v4Keys = v4;
    let v4Count = 0;
    const v6: [bigint, bigint][] = [];
    for (const p of prefixes) {
      if (p.family === 4) {
        if (v4Count === v4Keys.length) {
          const grown = new Float64Array(v4Keys.length * 2);
          grown.set(v4Keys);
          v4Keys = grown;
        }
        // start * 64 + length is exact in a double and sorts by start, then by length.
        v4Keys[v4Count++] = (p.start as number) * 64 + p.length;
      } else {
        v6.push([p.start as bigint, prefixEnd(p) as bigint]);
      }
    }
    const keys = v4Keys.subarray(0, v4Count).sort();
    const flat4: number[] = [];
    for (const key of keys) {
      const length = key % 64;
      const start = (key - length) / 64;
      pushMerged(flat4, start, start + 2 ** (32 - length) - 1, 1);
    }
    v6.sort((a, b) => (a[0] < b[0] ? -1 : a[0] > b[0] ? 1 : 0));
    const flat6: bigint[] = [];
    for (const [s, e] of v6) pushMerged(flat6, s, e, 1n);
    return new AddressSet(flat4, flat6);
  }

  /** Parses prefixes; throws on a malformed one (validated input only). */
  static parse(texts: readonly string[]): AddressSet {
    return AddressSet.fromPrefixes(
      texts.map((t) => {
        const p = parsePrefix(t);
        if (p === undefined) throw new Error(`Cannot parse prefix "${t}"`);
        return p;
      }),
    );
  }

  union(other: AddressSet): AddressSet {
    return new AddressSet(unionFlat(this.v4, other.v4, 1), unionFlat(this.v6, other.v6, 1n));
  }

  subtract(other: AddressSet): AddressSet {
    return new AddressSet(subtractFlat(this.v4, other.v4, 1), subtractFlat(this.v6, other.v6, 1n));
  }

  intersect(other: AddressSet): AddressSet {
    return this.subtract(this.subtract(other));
  }

  /** Keeps one family only. */
  only(family: Family): AddressSet {
    return family === 4 ? new AddressSet(this.v4, []) : new AddressSet([], this.v6);
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
    for (const [s, e] of this.intervals(family)) {
      for (const [start, len] of rangeToPrefixes(family, s, e)) {
        out.push(`${formatAddress(family, start)}/${len}`);
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

function pushMerged<T extends number | bigint>(out: T[], start: T, end: T, one: T): void {
  const n = out.length;
  if (n > 0) {
    const lastEnd = out[n - 1] as T;
    // Adjacent or overlapping: extend (the `+ one` keeps sets canonical, like nft auto-merge).
    if (start <= (((lastEnd as number) + (one as number)) as T)) {
      if (end > lastEnd) out[n - 1] = end;
      return;
    }
  }
  out.push(start, end);
}

function unionFlat<T extends number | bigint>(a: Flat<T>, b: Flat<T>, one: T): T[] {
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

function subtractFlat<T extends number | bigint>(a: Flat<T>, b: Flat<T>, one: T): T[] {
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

/** Splits [start, end] into the fewest aligned prefixes. */
function* rangeToPrefixes(
  family: Family,
  start: number | bigint,
  end: number | bigint,
): Generator<[number | bigint, number]> {
  const bits = family === 4 ? 32 : 128;
  let s = BigInt(start);
  const e = BigInt(end);
  while (s <= e) {
    let size = 0;
    // Grow the block while it stays aligned at s and within the range.
    while (size < bits) {
      const next = 1n << BigInt(size + 1);
      if (s % next !== 0n || s + next - 1n > e) break;
      size++;
    }
    yield [family === 4 ? Number(s) : s, bits - size];
    s += 1n << BigInt(size);
  }
}
