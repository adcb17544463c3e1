import { describe, expect, it } from 'vitest';
import { interfaceLines, planLab, pointToPointMac, routeLine } from './plan-lab.js';
import type { Topology } from './topology.js';

describe('planLab', () => {
  it('plans namespaces, veths with their own ifindexes, sysctls, addresses and routes', () => {
    const topology: Topology = {
      nodes: {
        host: { forwarding: true, sysctls: { 'net.ipv4.ip_nonlocal_bind': 1 } },
        peer: { routes: [{ to: 'default', via: '10.200.0.1' }] },
      },
      links: [
        {
          a: { node: 'host', iface: 'tun0', addresses: ['10.200.0.1/30', 'fd00:200::1/64'] },
          b: { node: 'peer', iface: 'tun0', addresses: ['10.200.0.2/30'] },
          mtu: 1420,
        },
      ],
    };
    const plan = planLab(
      topology,
      new Map([
        ['host', 'eglab-x-host'],
        ['peer', 'eglab-x-peer'],
      ]),
    );
    expect(plan.veths).toEqual([
      [
        ...['ip', '-n', 'eglab-x-host', 'link', 'add', 'tun0', 'index', '10', 'type', 'veth'],
        ...['peer', 'name', 'tun0', 'index', '11', 'netns', 'eglab-x-peer'],
      ],
    ]);
    expect(plan.earlySysctls).toEqual([
      'net.ipv6.conf.all.accept_dad=0',
      'net.ipv6.conf.default.accept_dad=0',
      'net.ipv4.ip_local_port_range=32768 60999',
    ]);
    expect(plan.sysctls.get('host')).toEqual([
      'net.ipv4.ip_forward=1',
      'net.ipv6.conf.all.forwarding=1',
      'net.ipv4.ip_nonlocal_bind=1',
    ]);
    expect(plan.interfaces.get('host')).toEqual([
      'link set dev lo up',
      'link set dev tun0 mtu 1420',
      'address add 10.200.0.1/30 dev tun0',
      'address add fd00:200::1/64 dev tun0 nodad',
      'link set dev tun0 up',
    ]);
    expect(plan.routes.get('peer')).toEqual(['route add default via 10.200.0.1']);
    expect(plan.routes.get('host')).toEqual([]);
  });

  it('gives both ends of a point-to-point link one MAC and ARP off, the same each time', () => {
    const link = {
      a: { node: 'host', iface: 'tun0', addresses: ['10.200.0.1/32'] },
      b: { node: 'peer', iface: 'tun0' },
      pointToPoint: true,
    };
    const mac = pointToPointMac(link);
    expect(mac).toMatch(/^02(:[0-9a-f]{2}){5}$/);
    expect(pointToPointMac({ ...link })).toBe(mac);
    expect(interfaceLines(link.a, link)).toEqual([
      `link set dev tun0 address ${mac} arp off`,
      'address add 10.200.0.1/32 dev tun0',
      'link set dev tun0 up',
    ]);
    expect(interfaceLines(link.b, link)).toEqual([
      `link set dev tun0 address ${mac} arp off`,
      'link set dev tun0 up',
    ]);
  });

  it('writes every route option, and replace for restores', () => {
    expect(routeLine({ to: '::/0', type: 'blackhole', metric: 4000, table: 100 })).toBe(
      'route add blackhole ::/0 metric 4000 table 100',
    );
    expect(routeLine({ to: '203.0.113.0/24', via: '10.0.0.1', dev: 'tun0' }, 'replace')).toBe(
      'route replace 203.0.113.0/24 via 10.0.0.1 dev tun0',
    );
  });
});
