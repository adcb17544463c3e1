import { describe, expect, it } from 'vitest';
import type { HostFacts } from './host-facts.js';
import { keepAbsentTunnels } from './keep-absent-tunnels.js';

const WITH_TUNNEL: HostFacts = {
  schema: 'egressguard/facts/v1',
  hostname: 'gw',
  os: 'linux',
  tools: {},
  labels: {},
  interfaces: [
    { name: 'eth0', up: true, addresses: ['192.168.1.21/24'] },
    { name: 'tun0', up: true, ipv6: false, addresses: ['10.200.0.2/32'] },
  ],
  routes: [{ destination: 'default', interface: 'eth0' }],
};
const DELETED: HostFacts = {
  ...WITH_TUNNEL,
  interfaces: WITH_TUNNEL.interfaces.filter((i) => i.name !== 'tun0'),
};

describe('keepAbsentTunnels', () => {
  it('keeps a deleted tunnel as last seen, down', () => {
    expect(keepAbsentTunnels(DELETED, WITH_TUNNEL, ['tun0']).interfaces).toEqual([
      { name: 'eth0', up: true, addresses: ['192.168.1.21/24'] },
      { name: 'tun0', up: false, ipv6: false, addresses: ['10.200.0.2/32'] },
    ]);
  });

  it('takes a present tunnel as it is now, and keeps nothing it never saw or was not asked for', () => {
    const moved: HostFacts = {
      ...WITH_TUNNEL,
      interfaces: [...DELETED.interfaces, { name: 'tun0', up: true, addresses: ['10.9.0.2/32'] }],
    };
    expect(keepAbsentTunnels(moved, WITH_TUNNEL, ['tun0'])).toBe(moved);
    expect(keepAbsentTunnels(DELETED, undefined, ['tun0'])).toBe(DELETED);
    expect(keepAbsentTunnels(DELETED, WITH_TUNNEL, [])).toBe(DELETED);
  });
});
