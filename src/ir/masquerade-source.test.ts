import { describe, expect, it } from 'vitest';
import { formatAddress, parseAddress, parsePrefix } from '../core/index.js';
import { masqueradeSourceV6, type SourceCandidate } from './masquerade-source.js';

function candidate(iface: string, cidr: string): SourceCandidate {
  const [address = '', length = '128'] = cidr.split('/');
  const prefix = parsePrefix(address);
  if (prefix === undefined) throw new Error(cidr);
  return { interface: iface, address: prefix, prefixLength: Number(length) };
}

function pick(candidates: readonly SourceCandidate[], via: string, destination: string) {
  const dst = parseAddress(destination);
  if (dst === undefined) throw new Error(destination);
  const found = masqueradeSourceV6(candidates, via, dst.value as bigint);
  return found === undefined
    ? undefined
    : `${formatAddress(6, found.address.start)} ${found.interface}`;
}

// The kernel's choice (ipv6_dev_get_saddr) as the lab measured it: test/netns/masquerade-source.test.ts.
describe('masqueradeSourceV6: the source a masquerade out of a tunnel takes', () => {
  const host = [
    candidate('lo', '::1/128'),
    candidate('eth0', '2001:db8:ffff::2/64'),
    candidate('eth0', 'fe80::2/64'),
    candidate('tun0', 'fe80::8/64'),
    candidate('vwl0', '2001:db8:10::1/64'),
  ];

  it("takes the tunnel's own global address first", () => {
    const own = [...host, candidate('tun0', '2001:db8:200::2/128')];
    expect(pick(own, 'tun0', '2001:db8:ff::7')).toBe('2001:db8:200::2 tun0');
  });

  it('else the global address of another interface with the longest prefix in common', () => {
    expect(pick(host, 'tun0', '2001:db8:ff::7')).toBe('2001:db8:10::1 vwl0');
    expect(pick(host, 'tun0', '2001:db8:fff0::7')).toBe('2001:db8:ffff::2 eth0');
  });

  it("counts the common prefix only up to the address's own prefix length", () => {
    // Both share 48 bits with the destination, but the /32 counts only 32 of them.
    const capped = [candidate('a', '2001:db8:5::1/32'), candidate('b', '2001:db8:5:1::1/48')];
    expect(pick(capped, 'tun0', '2001:db8:5::9')).toBe('2001:db8:5:1::1 b');
  });

  it('prefers a label matching the destination: a global address over a ULA', () => {
    const ula = [candidate('a', 'fd00::1/64'), candidate('b', '2001:db8:ffff::2/64')];
    expect(pick(ula, 'tun0', '2001:db8:ff::7')).toBe('2001:db8:ffff::2 b');
  });

  it("takes the tunnel's link-local address when the host has no global one", () => {
    const linkOnly = host.filter(
      (c) => c.address.start.toString(16).startsWith('fe80') || c.interface === 'lo',
    );
    expect(pick(linkOnly, 'tun0', '2001:db8:ff::7')).toBe('fe80::8 tun0');
  });

  it('finds none on a host without IPv6', () => {
    expect(pick([], 'tun0', '2001:db8:ff::7')).toBeUndefined();
  });
});
