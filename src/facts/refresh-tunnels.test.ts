import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { readHostFacts } from './host-facts.js';
import { refreshTunnels } from './refresh-tunnels.js';

const REVIEWED = readHostFacts(
  join('testdata', 'policies', 'valid', 'macos-vpn-runner', 'facts.json'),
);
const MATCHES = { vpn: { address: null, peer: '10.8.0.1' } };
const names = (interfaces: readonly { name: string }[]) => interfaces.map((i) => i.name);

describe('refreshTunnels: reviewed facts, tunnels found by match read live', () => {
  it('follows a renumbered utun and leaves out the VPN that took its old number', () => {
    const live = [
      { name: 'en0', up: true, addresses: ['192.168.1.99/24'] }, // not a tunnel: the file's stays
      { name: 'utun3', up: true, addresses: ['172.31.0.2/32'], peer: '172.31.0.1' },
      { name: 'utun5', up: true, addresses: ['10.8.0.2/32'], peer: '10.8.0.1' },
    ];
    const facts = refreshTunnels(REVIEWED, live, MATCHES);
    expect(names(facts.interfaces)).toEqual(['lo0', 'en0', 'bridge100', 'bridge101', 'utun5']);
    expect(facts.interfaces.find((i) => i.name === 'en0')?.addresses).toEqual(['192.168.1.20/24']);
    expect(facts.routes).toEqual(REVIEWED.routes);
  });

  it('drops the reviewed tunnel when no live interface matches: the tunnel is absent', () => {
    const facts = refreshTunnels(REVIEWED, [], MATCHES);
    expect(names(facts.interfaces)).toEqual(['lo0', 'en0', 'bridge100', 'bridge101']);
  });

  it('takes a live interface wearing a declared tunnel name, so an absent tunnel never binds to it', () => {
    const live = [{ name: 'vpn', up: true, addresses: ['172.31.0.2/32'] }];
    expect(names(refreshTunnels(REVIEWED, live, MATCHES).interfaces)).toContain('vpn');
  });

  it('changes nothing for a policy without tunnels found by match', () => {
    expect(refreshTunnels(REVIEWED, [], {})).toBe(REVIEWED);
  });
});
