import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { parseSwVers } from './gather-darwin-facts.js';
import { parseIfconfig } from './parse-ifconfig.js';
import { parseNetstatRoutes, parseRouteGet } from './parse-netstat-routes.js';

// Hand-written fixtures in the documented formats of macOS's tools (fixtures/darwin/README.md).
const fixture = (name: string) =>
  readFileSync(new URL(`./fixtures/darwin/${name}`, import.meta.url), 'utf8');

describe('macOS ifconfig output', () => {
  const interfaces = parseIfconfig(fixture('ifconfig.txt'));

  it('reads every interface with its flags, IPv4 masks as lengths and IPv6 without scope', () => {
    expect(interfaces.map((i) => i.name)).toEqual([
      'lo0',
      'gif0',
      'stf0',
      'anpi0',
      'en0',
      'en1',
      'bridge100',
      'vmenet0',
      'utun0',
      'utun4',
    ]);
    const byName = new Map(interfaces.map((i) => [i.name, i]));
    expect(byName.get('lo0')?.addresses).toEqual(['127.0.0.1/8', '::1/128', 'fe80::1/64']);
    expect(byName.get('en0')).toMatchObject({
      mtu: 1500,
      status: 'active',
      addresses: ['198.51.100.20/24', 'fe80::14b1:8e2f:6a3c:9d01/64', '2001:db8:100::20/64'],
    });
    expect(byName.get('en0')?.flags).toContain('UP');
    expect(byName.get('en1')?.flags).not.toContain('UP');
    expect(byName.get('en1')?.status).toBe('inactive');
    expect(byName.get('stf0')?.flags).toEqual([]);
    // A bridge's configuration block is skipped; its members are read.
    expect(byName.get('bridge100')).toMatchObject({
      addresses: ['192.168.64.1/22', 'fe80::3ca6:f6ff:fe10:2064/64'],
      members: ['vmenet0'],
    });
    // Point-to-point: the local address, the peer after "-->" is not ours.
    expect(byName.get('utun4')?.addresses).toEqual(['10.66.0.2/32']);
    expect(byName.get('utun4')?.peer).toBe('10.66.0.2');
    expect(byName.get('bridge100')?.peer).toBeNull();
  });

  it("reads an IPv6 point-to-point line's address and peer (inet6 A --> PEER prefixlen N)", () => {
    const [utun] = parseIfconfig(
      [
        'utun7: flags=8051<UP,POINTOPOINT,RUNNING,MULTICAST> mtu 1380',
        '\tinet6 fe80::1%utun7 prefixlen 64 scopeid 0x14 ',
        '\tinet6 2001:db8:8::2 --> 2001:db8:8::1 prefixlen 128 ',
        '',
      ].join('\n'),
    );
    expect(utun).toMatchObject({
      addresses: ['fe80::1/64', '2001:db8:8::2/128'],
      peer: '2001:db8:8::1',
    });
  });

  it('refuses output it cannot place, naming the line', () => {
    expect(() => parseIfconfig('\tinet 10.0.0.1 netmask 0xff000000\n')).toThrow(/^line 1 /);
  });
});

describe('macOS netstat -rn -f inet and route -n get default output', () => {
  it('expands short network numbers and keeps flags, gateways and interfaces', () => {
    const routes = parseNetstatRoutes(fixture('netstat-rn-inet.txt'));
    expect(routes).toHaveLength(18);
    expect(routes.slice(0, 3)).toEqual([
      { destination: 'default', gateway: '198.51.100.1', flags: 'UGScg', interface: 'en0' },
      { destination: 'default', gateway: null, flags: 'UCSIg', interface: 'utun4' },
      { destination: '10.66.0.0/16', gateway: '10.66.0.2', flags: 'UGSc', interface: 'utun4' },
    ]);
    const destinations = routes.map((r) => r.destination);
    expect(destinations).toContain('127.0.0.0/8');
    expect(destinations).toContain('169.254.0.0/16');
    expect(destinations).toContain('198.51.100.0/24');
    expect(destinations).toContain('192.168.64.0/22');
    expect(destinations).toContain('10.66.0.2/32');
    // Link-layer gateways are not next hops.
    expect(routes.find((r) => r.flags === 'UHLWIir')?.gateway).toBeNull();
  });

  it('reads the primary default route', () => {
    expect(parseRouteGet(fixture('route-get-default.txt'))).toEqual({
      gateway: '198.51.100.1',
      interface: 'en0',
    });
    expect(parseRouteGet('route: writing to routing socket: not in table\n')).toBeNull();
  });

  it('reads sw_vers', () => {
    expect(parseSwVers(fixture('sw_vers.txt'))).toEqual({
      name: 'macOS',
      version: '15.6',
      build: '24G84',
    });
    expect(parseSwVers('')).toBeNull();
  });
});
