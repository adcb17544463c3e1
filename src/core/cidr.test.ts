import { describe, expect, it } from 'vitest';
import {
  formatAddress,
  formatIpv4,
  formatIpv6,
  parseAddress,
  parseIpv4,
  parseIpv6,
  parsePrefix,
  prefixEnd,
} from './index.js';

const v6 = (text: string): bigint => {
  const value = parseIpv6(text);
  if (value === undefined) throw new Error(`test setup: "${text}" does not parse`);
  return value;
};

describe('parseIpv4', () => {
  it.each([
    ['0.0.0.0', 0],
    ['255.255.255.255', 2 ** 32 - 1],
    ['192.0.2.1', 0xc0000201],
    ['10.0.0.0', 0x0a000000],
    ['1.2.3.4', 0x01020304],
    ['100.200.250.255', 100 * 2 ** 24 + 200 * 2 ** 16 + 250 * 2 ** 8 + 255],
  ])('parses %s', (text, value) => {
    expect(parseIpv4(text)).toBe(value);
  });

  it.each([
    ['', 'empty'],
    ['1.2.3', 'three octets'],
    ['1.2.3.4.5', 'five octets'],
    ['256.0.0.0', 'an octet above 255'],
    ['1.2.3.256', 'the last octet above 255'],
    ['1.2.3.1000', 'four digits'],
    ['01.2.3.4', 'a leading zero (octal to inet_aton)'],
    ['1.2.3.04', 'a leading zero in the last octet'],
    ['1.00.3.4', 'a doubled zero'],
    ['1..3.4', 'an empty octet'],
    ['.1.2.3', 'a leading dot'],
    ['1.2.3.4.', 'a trailing dot'],
    [' 1.2.3.4', 'a leading blank'],
    ['1.2.3.4 ', 'a trailing blank'],
    ['1.2.3.-4', 'a sign'],
    ['0x1.2.3.4', 'hex'],
    ['1.2.3.4/24', 'a prefix length'],
    ['::1', 'IPv6'],
    ['１.2.3.4', 'a full-width digit'],
  ])('refuses %j (%s)', (text) => {
    expect(parseIpv4(text)).toBeUndefined();
  });
});

describe('parseIpv6', () => {
  it.each([
    ['::', 0n],
    ['::1', 1n],
    ['1::', 1n << 112n],
    ['2001:db8::', 0x20010db8n << 96n],
    ['2001:db8::1', (0x20010db8n << 96n) | 1n],
    ['2001:DB8::A', (0x20010db8n << 96n) | 0xan],
    ['2001:0db8:0000:0000:0000:0000:0000:0001', (0x20010db8n << 96n) | 1n],
    ['1:2:3:4:5:6:7:8', 0x00010002000300040005000600070008n],
    ['1:2:3:4:5:6:7::', 0x00010002000300040005000600070000n],
    ['::2:3:4:5:6:7:8', 0x00000002000300040005000600070008n],
    ['1::8', 0x00010000000000000000000000000008n],
    ['ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff', (1n << 128n) - 1n],
    ['fe80::1:2', 0xfe800000000000000000000000010002n],
    ['::ffff:192.0.2.1', 0xffffc0000201n],
    ['::192.0.2.1', 0xc0000201n],
    ['64:ff9b::198.51.100.7', (0x64ff9bn << 96n) | 0xc6336407n],
    ['1:2:3:4:5:6:1.2.3.4', 0x00010002000300040005000601020304n],
    ['1::2:3:4:5:6:7', 0x00010000000200030004000500060007n],
  ])('parses %s', (text, value) => {
    expect(parseIpv6(text)).toBe(value);
  });

  it.each([
    ['', 'empty'],
    [':', 'a lone colon'],
    [':::', 'three colons'],
    ['1:2:3:4:5:6:7', 'seven groups without ::'],
    ['1:2:3:4:5:6:7:8:9', 'nine groups'],
    ['1:2:3:4:5:6:7:8::', 'eight groups and ::'],
    ['::1:2:3:4:5:6:7:8', ':: and eight groups'],
    ['1::2::3', 'two ::'],
    ['12345::', 'five hex digits'],
    ['1:2:3:4:5:6:7:', 'a trailing colon'],
    [':1:2:3:4:5:6:7', 'a leading colon'],
    ['1::2:', 'a trailing colon after ::'],
    ['g::', 'a non-hex digit'],
    ['fe80::1%eth0', 'a zone id'],
    ['1.2.3.4::', 'a dotted quad before ::'],
    ['1:1.2.3.4::1', 'a dotted quad in the middle'],
    ['::1.2.3.4:5', 'a group after the dotted quad'],
    ['::ffff:01.2.3.4', 'a leading zero in the dotted quad'],
    ['::ffff:1.2.3', 'a short dotted quad'],
    ['1:2:3:4:5:6:7:1.2.3.4', 'nine groups with a dotted quad'],
    ['::2001:db8::/32', 'a prefix length'],
    [' ::1', 'a leading blank'],
    ['1.2.3.4', 'IPv4'],
  ])('refuses %j (%s)', (text) => {
    expect(parseIpv6(text)).toBeUndefined();
  });

  it('does not leak groups from one parse into the next', () => {
    expect(parseIpv6('1:2:3:4:5:6:7:8')).toBe(0x00010002000300040005000600070008n);
    expect(parseIpv6('1::')).toBe(1n << 112n);
    expect(parseIpv6('::8')).toBe(8n);
  });
});

describe('parseAddress', () => {
  it('tells the families apart', () => {
    expect(parseAddress('192.0.2.1')).toEqual({ family: 4, value: 0xc0000201 });
    expect(parseAddress('::ffff:192.0.2.1')).toEqual({ family: 6, value: 0xffffc0000201n });
    expect(parseAddress('example.com')).toBeUndefined();
    expect(parseAddress('192.0.2.1/32')).toBeUndefined();
  });
});

describe('parsePrefix', () => {
  it('parses IPv4 prefixes and bare addresses', () => {
    expect(parsePrefix('10.0.0.0/8')).toEqual({
      family: 4,
      start: 0x0a000000,
      length: 8,
      hadHostBits: false,
    });
    expect(parsePrefix('192.0.2.7')).toEqual({
      family: 4,
      start: 0xc0000207,
      length: 32,
      hadHostBits: false,
    });
    expect(parsePrefix('0.0.0.0/0')).toEqual({
      family: 4,
      start: 0,
      length: 0,
      hadHostBits: false,
    });
    expect(parsePrefix('255.255.255.255/32')?.start).toBe(2 ** 32 - 1);
  });

  it('clears host bits and says so', () => {
    expect(parsePrefix('10.1.2.3/8')).toEqual({
      family: 4,
      start: 0x0a000000,
      length: 8,
      hadHostBits: true,
    });
    expect(parsePrefix('255.255.255.255/0')).toEqual({
      family: 4,
      start: 0,
      length: 0,
      hadHostBits: true,
    });
    expect(parsePrefix('2001:db8::1/32')).toEqual({
      family: 6,
      start: 0x20010db8n << 96n,
      length: 32,
      hadHostBits: true,
    });
  });

  it('parses IPv6 prefixes, including /0 and /128', () => {
    expect(parsePrefix('::/0')).toEqual({ family: 6, start: 0n, length: 0, hadHostBits: false });
    expect(parsePrefix('::1')).toEqual({ family: 6, start: 1n, length: 128, hadHostBits: false });
    expect(parsePrefix('fe80::/10')?.start).toBe(0xfe80n << 112n);
    expect(parsePrefix('::ffff:10.0.0.0/104')).toEqual({
      family: 6,
      start: 0xffff0a000000n,
      length: 104,
      hadHostBits: false,
    });
  });

  it('reads the length as one to three decimal digits', () => {
    expect(parsePrefix('10.0.0.0/024')?.length).toBe(24);
    expect(parsePrefix('2001:db8::/032')?.length).toBe(32);
  });

  it.each([
    '10.0.0.0/33',
    '2001:db8::/129',
    '10.0.0.0/',
    '10.0.0.0/0024',
    '10.0.0.0/-1',
    '10.0.0.0/8/8',
    '10.0.0.0/ 8',
    '10.0.0.0 /8',
    '10.0.0.0/8 ',
    '/8',
    '10.0.0/8',
    'fe80::1%eth0/64',
    '',
  ])('refuses %j', (text) => {
    expect(parsePrefix(text)).toBeUndefined();
  });

  it('knows where a prefix ends', () => {
    expect(prefixEnd({ family: 4, start: 0, length: 0, hadHostBits: false })).toBe(2 ** 32 - 1);
    expect(prefixEnd({ family: 4, start: 0xc0000200, length: 24, hadHostBits: false })).toBe(
      0xc00002ff,
    );
    expect(prefixEnd({ family: 4, start: 7, length: 32, hadHostBits: false })).toBe(7);
    expect(prefixEnd({ family: 6, start: 0n, length: 0, hadHostBits: false })).toBe(
      (1n << 128n) - 1n,
    );
    expect(prefixEnd({ family: 6, start: v6('2001:db8::'), length: 64, hadHostBits: false })).toBe(
      v6('2001:db8::ffff:ffff:ffff:ffff'),
    );
  });
});

describe('formatIpv4', () => {
  it.each([
    [0, '0.0.0.0'],
    [2 ** 32 - 1, '255.255.255.255'],
    [0xc0000201, '192.0.2.1'],
    [0x0a000100, '10.0.1.0'],
  ])('formats %d as %s', (value, text) => {
    expect(formatIpv4(value)).toBe(text);
  });
});

describe('formatIpv6 (RFC 5952)', () => {
  it.each([
    ['::', '::'],
    ['::1', '::1'],
    ['1::', '1::'],
    // §4.1: no leading zeros; §4.3: lowercase.
    ['2001:0DB8:0000:0000:0000:0000:0000:0001', '2001:db8::1'],
    // §4.2.1: the longest run of zero groups is shortened.
    ['2001:db8:0:0:1:0:0:0', '2001:db8:0:0:1::'],
    // §4.2.2: a single zero group is not shortened.
    ['2001:db8:0:1:1:1:1:1', '2001:db8:0:1:1:1:1:1'],
    ['2001:db8::1:1:1:1:1', '2001:db8:0:1:1:1:1:1'],
    // §4.2.3: of equal runs, the first is shortened.
    ['2001:db8:0:0:1:0:0:1', '2001:db8::1:0:0:1'],
    ['1:0:0:2:0:0:3:4', '1::2:0:0:3:4'],
    ['1:2:3:4:5:6:7:8', '1:2:3:4:5:6:7:8'],
    ['0:0:1:0:0:0:1:0', '0:0:1::1:0'],
    ['0:1:0:0:0:0:0:0', '0:1::'],
    ['fe80:0:0:0:0:0:0:1', 'fe80::1'],
    ['ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff', 'ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff'],
    // §5's mixed notation is not used: IPv4-mapped addresses print in hex.
    ['::ffff:192.0.2.1', '::ffff:c000:201'],
  ])('formats %s as %s', (input, text) => {
    expect(formatIpv6(v6(input))).toBe(text);
  });

  it('round-trips through the parser for every pattern of zero groups', () => {
    let x = 0x0123456789abcdefn;
    for (let zeros = 0; zeros < 256; zeros++) {
      x = (x * 6364136223846793005n + 1442695040888963407n) & ((1n << 128n) - 1n);
      let value = x | 1n; // no accidental zero groups from the generator…
      for (let g = 0; g < 8; g++) {
        value |= 1n << BigInt(g * 16);
        if ((zeros >> g) & 1) value &= ~(0xffffn << BigInt(g * 16)); // …only these
      }
      const text = formatIpv6(value);
      expect(parseIpv6(text)).toBe(value);
      expect(text).toMatch(/^[0-9a-f:]+$/);
      expect(text).not.toMatch(/(^|:)0[0-9a-f]/); // no leading zeros
      expect(text.split('::').length).toBeLessThanOrEqual(2);
    }
  });
});

describe('formatAddress', () => {
  it('formats by family', () => {
    expect(formatAddress(4, 0x7f000001)).toBe('127.0.0.1');
    expect(formatAddress(6, 1n)).toBe('::1');
  });
});
