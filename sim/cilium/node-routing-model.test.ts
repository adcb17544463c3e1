import { describe, expect, it } from 'vitest';
import { type ModelNodeNetwork, firstAddress, lookupRoute } from './node-routing-model.js';

const network: ModelNodeNetwork = {
  devices: [
    { name: 'eth0', up: true, addresses: ['192.168.1.10/24', 'fe80::1/64', '2001:db8:1::10/64'] },
    { name: 'tun0', up: true, addresses: ['10.8.0.2/24'] },
    { name: 'wg1', up: false, addresses: ['10.9.0.2/24'] },
  ],
  tables: {
    main: [
      { to: '0.0.0.0/0', dev: 'eth0' },
      { to: '192.168.1.0/24', dev: 'eth0' },
      { to: '198.51.100.0/24', dev: 'wg1' },
    ],
    vpn: [{ to: '0.0.0.0/0', dev: 'tun0' }],
    kill: [{ to: '0.0.0.0/0', type: 'blackhole' }],
  },
  rules: [
    { priority: 200, from: '10.8.0.0/24', table: 'kill' },
    { priority: 100, from: '10.8.0.2/32', table: 'vpn' },
  ],
};

describe('node routing model (ip rule / ip route get)', () => {
  it('tries rules by priority, matching "from" only when the lookup has a source', () => {
    expect(lookupRoute(network, { to: '203.0.113.7', from: '10.8.0.2' })).toEqual({
      kind: 'route',
      table: 'vpn',
      to: '0.0.0.0/0',
      dev: 'tun0',
    });
    expect(lookupRoute(network, { to: '203.0.113.7', from: '10.8.0.3' })).toEqual({
      kind: 'blackhole',
      table: 'kill',
      to: '0.0.0.0/0',
    });
    expect(lookupRoute(network, { to: '203.0.113.7' })).toMatchObject({
      table: 'main',
      dev: 'eth0',
    });
  });

  it('takes the longest prefix, skips routes through down devices, and falls through tables', () => {
    expect(lookupRoute(network, { to: '192.168.1.20' })).toMatchObject({ to: '192.168.1.0/24' });
    // wg1 is down: its /24 is gone, the default route takes over.
    expect(lookupRoute(network, { to: '198.51.100.7' })).toMatchObject({
      to: '0.0.0.0/0',
      dev: 'eth0',
    });
    const noTunnel = { ...network, devices: network.devices.filter((d) => d.name !== 'tun0') };
    expect(lookupRoute(noTunnel, { to: '203.0.113.7', from: '10.8.0.2' })).toMatchObject({
      kind: 'blackhole',
    });
    expect(lookupRoute({ devices: [], tables: {} }, { to: '203.0.113.7' })).toEqual({
      kind: 'none',
    });
    expect(lookupRoute(network, { to: '2001:db8::1' })).toEqual({ kind: 'none' });
  });

  it("gives a device's first address of a family, skipping IPv6 link-local", () => {
    expect(firstAddress(network, 'eth0', 4)).toBe('192.168.1.10');
    expect(firstAddress(network, 'eth0', 6)).toBe('2001:db8:1::10');
    expect(firstAddress(network, 'tun0', 6)).toBeUndefined();
    expect(firstAddress(network, 'tun9', 4)).toBeUndefined();
  });
});
