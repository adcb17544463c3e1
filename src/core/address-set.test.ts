import { describe, expect, it } from 'vitest';
import { AddressSet, createRandom, parseIpv4, parseIpv6, type Family } from './index.js';

const V4_MAX = 2 ** 32 - 1;
const V6_MAX = (1n << 128n) - 1n;

const set = (...prefixes: string[]): AddressSet => AddressSet.parse(prefixes);
const ip4 = (text: string): number => parseIpv4(text) ?? NaN;
const ip6 = (text: string): bigint => {
  const value = parseIpv6(text);
  if (value === undefined) throw new Error(`test setup: "${text}" does not parse`);
  return value;
};
const cidrs = (s: AddressSet): string[] => [...s.toCidrs(4), ...s.toCidrs(6)];

/** Sorted, disjoint and non-adjacent: the one canonical form, so equal sets compare equal. */
function expectCanonical(s: AddressSet): void {
  for (const flat of [s.v4, s.v6] as const) {
    expect(flat.length % 2).toBe(0);
    for (let i = 0; i < flat.length; i += 2) {
      const start = flat[i] as number | bigint;
      const end = flat[i + 1] as number | bigint;
      expect(start <= end).toBe(true);
      if (i > 0) {
        const previousEnd = flat[i - 1] as number | bigint;
        // A gap of at least one address between intervals.
        expect(
          typeof start === 'bigint'
            ? start > (previousEnd as bigint) + 1n
            : start > (previousEnd as number) + 1,
        ).toBe(true);
      }
    }
  }
}

describe('AddressSet construction', () => {
  it('merges overlapping, nested, duplicate and adjacent prefixes', () => {
    expect(cidrs(set('10.0.0.0/25', '10.0.0.128/25'))).toEqual(['10.0.0.0/24']);
    expect(cidrs(set('10.0.0.0/24', '10.0.0.0/8', '10.0.0.0/24'))).toEqual(['10.0.0.0/8']);
    expect(cidrs(set('10.0.0.1', '10.0.0.2', '10.0.0.0', '10.0.0.3'))).toEqual(['10.0.0.0/30']);
    expect(set('10.0.0.1', '10.0.0.2').intervalCount()).toBe(1);
    expect(cidrs(set('10.0.0.1', '10.0.0.2'))).toEqual(['10.0.0.1/32', '10.0.0.2/32']);
    expect(set('10.0.0.1', '10.0.0.3').intervalCount()).toBe(2);
  });

  it('keeps the families apart', () => {
    const s = set('2001:db8::/32', '10.0.0.0/8', '::ffff:10.0.0.0/104');
    expect(s.toCidrs(4)).toEqual(['10.0.0.0/8']);
    expect(s.toCidrs(6)).toEqual(['::ffff:a00:0/104', '2001:db8::/32']);
    expect(s.has(4) && s.has(6)).toBe(true);
    expect(s.only(4).has(6)).toBe(false);
    expect(s.only(6).toCidrs(6)).toEqual(s.toCidrs(6));
  });

  it('handles the boundaries 0 and max in both families', () => {
    const edges = set(
      '0.0.0.0',
      '255.255.255.255',
      '::',
      'ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff',
    );
    expect(edges.v4).toEqual([0, 0, V4_MAX, V4_MAX]);
    expect(edges.v6).toEqual([0n, 0n, V6_MAX, V6_MAX]);
    expect(cidrs(edges)).toEqual([
      '0.0.0.0/32',
      '255.255.255.255/32',
      '::/128',
      'ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff/128',
    ]);
    expect(cidrs(set('0.0.0.0/0', '::/0'))).toEqual(['0.0.0.0/0', '::/0']);
    expect(set('0.0.0.0/1', '128.0.0.0/1', '::/1', '8000::/1').v4).toEqual(AddressSet.ALL.v4);
    expect(set('0.0.0.0/1', '128.0.0.0/1', '::/1', '8000::/1').v6).toEqual(AddressSet.ALL.v6);
  });

  it('is empty for no prefixes, and throws on a malformed one', () => {
    expect(AddressSet.fromPrefixes([]).isEmpty()).toBe(true);
    expect(set().intervalCount()).toBe(0);
    expect(() => set('10.0.0.0/33')).toThrow('Cannot parse prefix "10.0.0.0/33"');
  });

  it('is immutable', () => {
    const s = set('10.0.0.0/8');
    expect(Object.isFrozen(s)).toBe(true);
    s.union(set('11.0.0.0/8'));
    expect(cidrs(s)).toEqual(['10.0.0.0/8']);
  });

  it('merges large unsorted inputs like a pairwise sort and sweep', () => {
    // Above the radix-sort threshold, with duplicates, nesting and adjacency.
    const rand = createRandom(7);
    const prefixes: string[] = [];
    const pairs: [number, number][] = [];
    for (let i = 0; i < 30_000; i++) {
      const r = rand();
      const length =
        r < 0.01 ? 8 + Math.floor(rand() * 16) : r < 0.3 ? 24 : 28 + Math.floor(rand() * 5);
      // A narrow range, so prefixes collide and touch.
      const address = 0x0a000000 + Math.floor(rand() * 2 ** 22);
      const size = 2 ** (32 - length);
      const start = address - (address % size);
      prefixes.push(`${formatV4(start)}/${length}`);
      pairs.push([start, start + size - 1]);
    }
    pairs.sort((a, b) => a[0] - b[0]);
    const expected: number[] = [];
    for (const [s, e] of pairs) {
      const last = expected.length - 1;
      if (last > 0 && s <= (expected[last] as number) + 1) {
        expected[last] = Math.max(expected[last] as number, e);
      } else {
        expected.push(s, e);
      }
    }
    const built = set(...prefixes);
    expect(built.v4).toEqual(expected);
    expectCanonical(built);
  });

  it('merges already sorted input, and a shuffled run of hosts into one interval', () => {
    const hosts = Array.from({ length: 10_000 }, (_, i) => 0x0b000000 + i);
    const sorted = set(...hosts.map(formatV4));
    expect(sorted.v4).toEqual([0x0b000000, 0x0b000000 + 9_999]);
    const rand = createRandom(3);
    for (let i = hosts.length - 1; i > 0; i--) {
      const j = Math.floor(rand() * (i + 1));
      [hosts[i], hosts[j]] = [hosts[j] as number, hosts[i] as number];
    }
    expect(set(...hosts.map(formatV4)).v4).toEqual(sorted.v4);
  });
});

describe('AddressSet operations', () => {
  const a = set('10.0.0.0/24', '10.0.2.0/24', '2001:db8::/48');
  const b = set('10.0.0.128/25', '10.0.1.0/24', '2001:db8:0:8000::/49', '2001:db8:1::/48');

  it('unions, merging what becomes adjacent', () => {
    expect(cidrs(a.union(b))).toEqual(['10.0.0.0/23', '10.0.2.0/24', '2001:db8::/47']);
    expect(cidrs(set('10.0.0.0/32').union(set('10.0.0.1/32')))).toEqual(['10.0.0.0/31']);
    expect(a.union(AddressSet.EMPTY)).toBe(a);
    expect(AddressSet.EMPTY.union(a)).toBe(a);
    expect(cidrs(AddressSet.ALL.union(a))).toEqual(['0.0.0.0/0', '::/0']);
  });

  it('subtracts, splitting intervals', () => {
    expect(cidrs(a.subtract(b))).toEqual(['10.0.0.0/25', '10.0.2.0/24', '2001:db8::/49']);
    expect(cidrs(set('10.0.0.0/24').subtract(set('10.0.0.7')))).toEqual([
      '10.0.0.0/30',
      '10.0.0.4/31',
      '10.0.0.6/32',
      '10.0.0.8/29',
      '10.0.0.16/28',
      '10.0.0.32/27',
      '10.0.0.64/26',
      '10.0.0.128/25',
    ]);
    expect(a.subtract(a).isEmpty()).toBe(true);
    expect(a.subtract(AddressSet.EMPTY)).toBe(a);
    expect(AddressSet.EMPTY.subtract(a).isEmpty()).toBe(true);
  });

  it('subtracts at the boundaries 0 and max', () => {
    const v4Edges = AddressSet.ALL.only(4).subtract(set('0.0.0.0', '255.255.255.255'));
    expect(v4Edges.v4).toEqual([1, V4_MAX - 1]);
    const v6Edges = AddressSet.ALL.only(6).subtract(
      set('::', 'ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff'),
    );
    expect(v6Edges.v6).toEqual([1n, V6_MAX - 1n]);
    expect(cidrs(AddressSet.ALL.subtract(set('0.0.0.0/1', '8000::/1')))).toEqual([
      '128.0.0.0/1',
      '::/1',
    ]);
    expect(AddressSet.ALL.subtract(AddressSet.ALL).isEmpty()).toBe(true);
  });

  it('intersects', () => {
    expect(cidrs(a.intersect(b))).toEqual(['10.0.0.128/25', '2001:db8:0:8000::/49']);
    expect(a.intersect(AddressSet.EMPTY).isEmpty()).toBe(true);
    expect(cidrs(a.intersect(AddressSet.ALL))).toEqual(cidrs(a));
    expect(set('10.0.0.0/25').intersect(set('10.0.0.128/25')).isEmpty()).toBe(true);
  });

  it('covers', () => {
    expect(set('10.0.0.0/8').covers(set('10.1.0.0/16', '10.255.255.255'))).toBe(true);
    expect(set('10.0.0.0/8').covers(set('10.0.0.0/7'))).toBe(false);
    expect(set('10.0.0.0/25', '10.0.0.128/25').covers(set('10.0.0.0/24'))).toBe(true);
    expect(set('10.0.0.0/8').covers(set('2001:db8::/32'))).toBe(false);
    expect(set('10.0.0.0/8').covers(AddressSet.EMPTY)).toBe(true);
    expect(AddressSet.EMPTY.covers(AddressSet.EMPTY)).toBe(true);
    expect(AddressSet.ALL.covers(a.union(b))).toBe(true);
  });

  it('contains, at interval edges and beyond', () => {
    const s = set('10.0.0.0/24', '10.0.2.0/24', '0.0.0.0', '255.255.255.255', '2001:db8::/64');
    for (const [address, inside] of [
      ['10.0.0.0', true],
      ['10.0.0.255', true],
      ['10.0.1.0', false],
      ['9.255.255.255', false],
      ['10.0.2.0', true],
      ['10.0.3.0', false],
      ['0.0.0.0', true],
      ['0.0.0.1', false],
      ['255.255.255.255', true],
      ['255.255.255.254', false],
    ] as const) {
      expect(s.contains(4, ip4(address)), address).toBe(inside);
    }
    expect(s.contains(6, ip6('2001:db8::'))).toBe(true);
    expect(s.contains(6, ip6('2001:db8::ffff:ffff:ffff:ffff'))).toBe(true);
    expect(s.contains(6, ip6('2001:db8:0:1::'))).toBe(false);
    expect(s.contains(6, ip6('2001:db7:ffff:ffff:ffff:ffff:ffff:ffff'))).toBe(false);
    expect(AddressSet.EMPTY.contains(4, 0)).toBe(false);
    expect(AddressSet.ALL.contains(6, V6_MAX)).toBe(true);
  });

  it('lists intervals and describes itself', () => {
    expect([...a.intervals(4)]).toEqual([
      [ip4('10.0.0.0'), ip4('10.0.0.255')],
      [ip4('10.0.2.0'), ip4('10.0.2.255')],
    ]);
    expect(a.describe()).toBe('10.0.0.0/24, 10.0.2.0/24, 2001:db8::/48');
    expect(a.describe(2)).toBe('10.0.0.0/24, 10.0.2.0/24, … (3 prefixes)');
    expect(AddressSet.EMPTY.describe()).toBe('(empty)');
  });
});

describe('AddressSet.toCidrs', () => {
  it('splits ranges into the fewest aligned prefixes', () => {
    // 10.0.0.1–10.0.0.6 is /32, /31, /31, /32.
    const s = set('10.0.0.1', '10.0.0.2/31', '10.0.0.4/31', '10.0.0.6');
    expect(s.toCidrs(4)).toEqual(['10.0.0.1/32', '10.0.0.2/31', '10.0.0.4/31', '10.0.0.6/32']);
    expect(AddressSet.ALL.only(4).subtract(set('0.0.0.0')).toCidrs(4)).toHaveLength(32);
    expect(AddressSet.ALL.only(6).subtract(set('::')).toCidrs(6)).toHaveLength(128);
    expect(AddressSet.ALL.only(4).subtract(set('255.255.255.255')).toCidrs(4)[0]).toBe('0.0.0.0/1');
    expect(set('128.0.0.0/1').toCidrs(4)).toEqual(['128.0.0.0/1']);
    expect(set('255.255.255.254/31').toCidrs(4)).toEqual(['255.255.255.254/31']);
  });

  it('agrees with a trie decomposition on random ranges', () => {
    const rand = createRandom(11);
    for (let i = 0; i < 300; i++) {
      const x = Math.floor(rand() * 2 ** 32);
      const span = Math.floor(rand() ** 4 * 2 ** 32);
      const start = Math.min(x, V4_MAX - span);
      const end = start + span;
      const s = AddressSet.ALL.only(4)
        .subtract(rangeSet(0, start - 1))
        .subtract(rangeSet(end + 1, V4_MAX));
      expect(s.v4).toEqual([start, end]);
      expect(s.toCidrs(4)).toEqual(trieCidrs(start, end));
    }
  });
});

describe('AddressSet against a bitmap model', () => {
  // Small universes: 4096 addresses at 10.0.0.0 and at 2001:db8::, prefixes /20 to /32 (or /128).
  const SIZE = 4096;
  const bases = { 4: 0x0a000000, 6: 0x20010db8n << 96n } as const;

  function randomSet(rand: () => number, family: Family): { set: AddressSet; bits: Uint8Array } {
    const bits = new Uint8Array(SIZE);
    const texts: string[] = [];
    const count = Math.floor(rand() * 12);
    for (let i = 0; i < count; i++) {
      const hostBits = Math.floor(rand() ** 2 * 13); // 0–12: /32…/20 or /128…/116
      const size = 2 ** hostBits;
      const offset = Math.floor(rand() * (SIZE / size)) * size;
      bits.fill(1, offset, offset + size);
      texts.push(
        family === 4
          ? `${formatV4(bases[4] + offset)}/${32 - hostBits}`
          : `2001:db8::${offset.toString(16)}/${128 - hostBits}`,
      );
    }
    return { set: set(...texts), bits };
  }

  function bitsOf(s: AddressSet, family: Family): Uint8Array {
    const bits = new Uint8Array(SIZE);
    for (const [start, end] of s.intervals(family)) {
      const from = Number(BigInt(start) - BigInt(bases[family]));
      const to = Number(BigInt(end) - BigInt(bases[family]));
      expect(from >= 0 && to < SIZE).toBe(true);
      bits.fill(1, from, to + 1);
    }
    return bits;
  }

  for (const family of [4, 6] as const) {
    it(`agrees on union, subtract, intersect, covers, contains and toCidrs (IPv${family})`, () => {
      const rand = createRandom(family * 101);
      for (let round = 0; round < 300; round++) {
        const a = randomSet(rand, family);
        const b = randomSet(rand, family);
        const union = a.set.union(b.set);
        const difference = a.set.subtract(b.set);
        const intersection = a.set.intersect(b.set);
        for (const s of [a.set, b.set, union, difference, intersection]) expectCanonical(s);
        expect(firstDifference(bitsOf(a.set, family), a.bits)).toBe(-1);
        const or = a.bits.map((x, i) => x | (b.bits[i] as number));
        const andNot = a.bits.map((x, i) => x & (1 - (b.bits[i] as number)));
        const and = a.bits.map((x, i) => x & (b.bits[i] as number));
        expect(firstDifference(bitsOf(union, family), or)).toBe(-1);
        expect(firstDifference(bitsOf(difference, family), andNot)).toBe(-1);
        expect(firstDifference(bitsOf(intersection, family), and)).toBe(-1);
        expect(a.set.covers(b.set)).toBe(b.bits.every((x, i) => x <= (a.bits[i] as number)));
        for (let probe = 0; probe < 8; probe++) {
          const offset = Math.floor(rand() * SIZE);
          const address = family === 4 ? bases[4] + offset : bases[6] + BigInt(offset);
          expect(a.set.contains(family, address)).toBe(a.bits[offset] === 1);
        }
        // toCidrs round-trips and is the trie's (minimal) decomposition.
        expect(cidrs(set(...union.toCidrs(family)))).toEqual(cidrs(union));
        if (family === 4) {
          const expected = [...union.intervals(4)].flatMap(([s, e]) =>
            trieCidrs(s as number, e as number),
          );
          expect(union.toCidrs(4)).toEqual(expected);
        }
      }
    });
  }
});

function formatV4(value: number): string {
  return [24, 16, 8, 0].map((shift) => Math.floor(value / 2 ** shift) % 256).join('.');
}

function rangeSet(start: number, end: number): AddressSet {
  if (start > end) return AddressSet.EMPTY;
  return AddressSet.parse(trieCidrs(start, end));
}

/** The maximal aligned blocks inside [start, end], found by walking the binary trie from /0. */
function trieCidrs(start: number, end: number): string[] {
  const walk = (base: number, length: number): string[] => {
    const last = base + 2 ** (32 - length) - 1;
    if (last < start || base > end) return [];
    if (start <= base && last <= end) return [`${formatV4(base)}/${length}`];
    return [...walk(base, length + 1), ...walk(base + 2 ** (31 - length), length + 1)];
  };
  return walk(0, 0);
}

/** The first address where two bitmaps differ, or -1 (faster than a deep equal of 4096 bytes). */
function firstDifference(actual: Uint8Array, expected: Uint8Array): number {
  for (let i = 0; i < expected.length; i++) if (actual[i] !== expected[i]) return i;
  return -1;
}
