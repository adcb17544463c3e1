import { describe, expect, it } from 'vitest';
import { isIcmpError, parsePacket } from './parse-packet.js';

const hex = (text: string): Uint8Array => Buffer.from(text.replaceAll(' ', ''), 'hex');

describe('parsePacket', () => {
  it('reads an IPv4 UDP datagram to port 53 as dns', () => {
    const packet = hex('4500 001c 0000 0000 4011 0000 0a0a 0002 cb00 710a 9c40 0035 0008 0000');
    expect(parsePacket(packet)).toEqual({
      family: 4,
      kind: 'dns',
      protocol: 17,
      src: '10.10.0.2',
      dst: '203.0.113.10',
      srcPort: 40000,
      dstPort: 53,
      length: 28,
    });
  });

  it('skips IPv6 extension headers to the transport header', () => {
    const packet = hex(
      '6000 0000 001c 0040' + // payload 28, next header hop-by-hop
        'fd00 0010 0000 0000 0000 0000 0000 0002' +
        '2001 0db8 0113 0000 0000 0000 0000 0010' +
        '0600 0000 0000 0000' + // hop-by-hop: next header TCP, 8 bytes
        '9c40 01bb 0000 0000 0000 0000 5002 faf0 0000 0000',
    );
    expect(parsePacket(packet)).toMatchObject({
      family: 6,
      kind: 'tcp',
      protocol: 6,
      src: 'fd00:10::2',
      dst: '2001:db8:113::10',
      srcPort: 40000,
      dstPort: 443,
    });
  });

  it('reports no ports for a later fragment', () => {
    const packet = hex('4500 001c 0000 0010 4006 0000 0a0a 0002 cb00 710a 9c40 01bb 0000 0000');
    expect(parsePacket(packet)).not.toHaveProperty('dstPort');
  });

  it('tells ICMP errors from echo requests in both families', () => {
    const unreachable = parsePacket(
      hex('4500 0018 0000 0000 4001 0000 cb00 710a 0a0a 0002 0303 0000'),
    );
    const echo6 = parsePacket(
      hex('6000 0000 0004 3a40' + '20010db8011300000000000000000010'.repeat(2) + '8000 0000'),
    );
    expect(unreachable).toMatchObject({ kind: 'icmp', icmpType: 3 });
    expect(unreachable !== undefined && isIcmpError(unreachable)).toBe(true);
    expect(echo6).toMatchObject({ family: 6, kind: 'icmp', icmpType: 128 });
    expect(echo6 !== undefined && isIcmpError(echo6)).toBe(false);
  });

  it('returns undefined for bytes that are not a whole IP header', () => {
    expect(parsePacket(hex('4500 001c'))).toBeUndefined();
    expect(parsePacket(hex('0806 0001 0800 0604 0001'))).toBeUndefined();
  });
});
