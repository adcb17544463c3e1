import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { createPcapReader } from '../../core/index.js';
import { DLT_NFLOG, parseNflog } from './nflog.js';
import { mapRuleClasses, parseLogPrefix, toDropRecord } from './nflog-record.js';

// Written by `tcpdump -i nflog:2 -U -w` on Debian 12 (testdata/nflog/capture.sh).
const PCAP = readFileSync(new URL('../../../testdata/nflog/nflog.pcap', import.meta.url));

function readAll(chunkSize: number) {
  const reader = createPcapReader();
  const records = [];
  for (let i = 0; i < PCAP.length; i += chunkSize) {
    records.push(...reader.push(PCAP.subarray(i, i + chunkSize)));
  }
  return { records, pending: reader.pending };
}

describe('pcap reader', () => {
  it('reads every record whatever the chunking', () => {
    const whole = readAll(PCAP.length);
    expect(whole.records).toHaveLength(5);
    expect(whole.pending).toBe(0);
    for (const size of [1, 7, 24, 100]) {
      const chunked = readAll(size);
      expect(chunked.records.map((r) => [...r.data])).toEqual(
        whole.records.map((r) => [...r.data]),
      );
    }
    expect(whole.records.every((r) => r.linkType === DLT_NFLOG && r.littleEndian)).toBe(true);
  });

  it('keeps microseconds of the capture time', () => {
    const [first] = readAll(PCAP.length).records;
    expect(first?.timeMs).toBeGreaterThan(Date.UTC(2024, 0, 1));
    expect((first?.timeMs ?? 0) % 1).not.toBe(0);
  });

  it('rejects a stream that is not pcap', () => {
    expect(() =>
      createPcapReader().push(new TextEncoder().encode('tcpdump: listening on nflog:2, x')),
    ).toThrow(/Cannot read pcap stream: unknown magic number 0x74637064/);
  });
});

describe('NFLOG records', () => {
  const packets = readAll(PCAP.length).records.map((r) => parseNflog(r.data, r.littleEndian));

  it('reads group, family, hook, prefix, interfaces and payload', () => {
    expect(packets.map((p) => [p.group, p.family, p.hook, p.prefix])).toEqual([
      [2, 2, 'forward', 'eg drop vm/deny-private '],
      [2, 2, 'forward', 'eg audit vm/audit-icmp '],
      [2, 10, 'forward', 'eg drop deny-ssh '],
      [2, 10, 'output', 'eg drop host/deny-dns '],
      [2, 2, 'output', 'docker drop '],
    ]);
    expect(packets[0]?.inIfindex).toBeGreaterThan(0);
    expect(packets[0]?.outIfindex).toBeGreaterThan(0);
    expect(packets[3]?.inIfindex).toBeUndefined();
    expect(packets[0]?.payload?.[0]).toBe(0x45);
  });

  it('turns our messages into records and skips anyone else’s', () => {
    const ifindex = packets[0]?.inIfindex ?? 0;
    const context = {
      ruleClasses: mapRuleClasses([{ name: 'web', rules: [{ id: 'deny-ssh' }] }]),
      interfaceNames: new Map([[ifindex, 'wl0']]),
    };
    const records = packets.map((p) => toDropRecord(p, 1_700_000_000_123.456, context));
    expect(records[4]).toBeUndefined();
    expect(records[0]).toEqual({
      time: '2023-11-14T22:13:20.123Z',
      action: 'drop',
      class: 'vm',
      rule: 'vm/deny-private',
      family: 4,
      src: '10.10.0.5',
      dst: '203.0.113.7',
      protocol: 'tcp',
      port: 443,
      sourcePort: expect.any(Number) as number,
      icmp: null,
      hook: 'forward',
      in: 'wl0',
      out: expect.stringMatching(/^if\d+$/) as string,
    });
    expect(records[1]).toMatchObject({
      action: 'audit',
      class: 'vm',
      protocol: 'icmp',
      port: null,
      icmp: { type: 8, code: 0 },
    });
    expect(records[2]).toMatchObject({
      class: 'web',
      rule: 'deny-ssh',
      family: 6,
      src: '2001:db8:10::5',
      dst: '2001:db8:ff::7',
      protocol: 'tcp',
      port: 22,
    });
    expect(records[3]).toMatchObject({
      class: 'host',
      rule: 'host/deny-dns',
      src: '2001:db8:ffff::2',
      protocol: 'udp',
      port: 53,
      hook: 'output',
      in: null,
    });
  });

  it('rejects an attribute that overruns its record', () => {
    const bad = new Uint8Array([2, 0, 0, 2, 0x40, 0, 10, 0, 0x65, 0x67]);
    expect(() => parseNflog(bad, true)).toThrow(/attribute 10 at byte 4 claims 64 bytes/);
  });
});

describe('log prefixes', () => {
  it.each([
    ['eg drop vm/deny-private ', { action: 'drop', rule: 'vm/deny-private' }],
    ['eg audit allow-cache ', { action: 'audit', rule: 'allow-cache' }],
    ['eg drop rule with spaces ', { action: 'drop', rule: 'rule with spaces' }],
    ['eg drop cut-at-127-characters', { action: 'drop', rule: 'cut-at-127-characters' }],
  ])('reads %j', (prefix, expected) => {
    expect(parseLogPrefix(prefix)).toEqual(expected);
  });

  it.each(['docker drop ', 'eg accept x ', 'eg drop ', 'IN=eth0 '])('ignores %j', (prefix) => {
    expect(parseLogPrefix(prefix)).toBeUndefined();
  });
});
