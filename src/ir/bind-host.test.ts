import { readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import { parseHostFacts, type HostFacts } from '../facts/index.js';
import { loadPolicy } from '../policy/index.js';
import { lowerForHost } from './bind-host.js';

const DIR = fileURLToPath(
  new URL('../../testdata/policies/valid/k3s-vpn-egress/', import.meta.url),
);
const GATEWAY = parseHostFacts(JSON.parse(readFileSync(`${DIR}facts.json`, 'utf8')), 'facts.json');
const { policy } = loadPolicy(`${DIR}policy.yaml`);
if (policy === undefined) throw new Error('k3s-vpn-egress is invalid');

describe("bindHost: the gateway node's part of a Kubernetes tunnel class", () => {
  it("derives a host class from the tunnel's address, with the pod class's kill switch", () => {
    const ir = lowerForHost(policy, GATEWAY);
    const derived = ir.classes.filter((c) => c.gatewayFor !== null);
    expect(derived.map((c) => [c.name, c.gatewayFor, c.via])).toEqual([
      ['vpn.gateway', 'vpn', { kind: 'tunnel', interface: 'tun0', families: [4], present: true }],
    ]);
    const [cls] = derived;
    expect(cls?.selector.kind === 'host' ? cls.selector.sources.describe() : '').toBe(
      '10.200.0.2/32',
    );
    expect(cls?.killSwitch?.except.describe()).toBe('10.42.0.0/15, 192.168.1.0/24');
    expect(cls?.rules).toEqual([]);
    expect(cls?.defaultRule).toEqual({
      kind: 'default',
      id: 'vpn.gateway/default',
      action: 'allow',
    });
  });

  it('derives nothing on a node without the tunnel (a worker, or the gateway with tun0 gone)', () => {
    const worker: HostFacts = {
      ...GATEWAY,
      hostname: 'k3s-worker-1',
      interfaces: GATEWAY.interfaces.filter((i) => i.name !== 'tun0'),
    };
    expect(lowerForHost(policy, worker).classes).toEqual([]);
    const noAddress: HostFacts = {
      ...GATEWAY,
      interfaces: GATEWAY.interfaces.map((i) => (i.name === 'tun0' ? { ...i, addresses: [] } : i)),
    };
    expect(lowerForHost(policy, noAddress).classes).toEqual([]);
  });

  it('routes every global address of the tunnel, never its link-local one', () => {
    const dual: HostFacts = {
      ...GATEWAY,
      interfaces: GATEWAY.interfaces.map((i) =>
        i.name === 'tun0'
          ? {
              name: 'tun0',
              up: true,
              addresses: ['10.200.0.2/24', '2001:db8:200::2/64', 'fe80::2/64'],
            }
          : i,
      ),
    };
    const [cls] = lowerForHost(policy, dual).classes;
    expect(cls?.selector.kind === 'host' ? cls.selector.sources.describe() : '').toBe(
      '10.200.0.2/32, 2001:db8:200::2/128',
    );
  });
});

describe('bindHost: a tunnel found by its peer or address (utun renumbering)', () => {
  const VPN = fileURLToPath(
    new URL('../../testdata/policies/valid/macos-vpn-runner/', import.meta.url),
  );
  const facts = parseHostFacts(JSON.parse(readFileSync(`${VPN}facts.json`, 'utf8')), 'facts');
  const vpn = loadPolicy(`${VPN}policy.yaml`).policy;
  if (vpn === undefined) throw new Error('macos-vpn-runner is invalid');
  const utun = facts.interfaces.find((i) => i.name === 'utun3');
  if (utun === undefined) throw new Error('no utun3 in the facts');
  const renamed = (interfaces: HostFacts['interfaces']): HostFacts => ({ ...facts, interfaces });
  const others = facts.interfaces.filter((i) => i.name !== 'utun3');
  const bound = (f: HostFacts) => {
    const ir = lowerForHost(vpn, f);
    const cls = ir.classes.find((c) => c.name === 'vpn-vm');
    return { via: cls?.via, tunnels: ir.tunnels.map((t) => [t.declared, t.name]) };
  };

  it('binds the class to the utun whose peer matches, whatever its number', () => {
    expect(bound(facts)).toEqual({
      via: { kind: 'tunnel', interface: 'utun3', families: [4, 6], present: true },
      tunnels: [['vpn', 'utun3']],
    });
    // The VPN reconnected as utun5, and utun3 went to another VPN with another peer.
    const after = renamed([
      ...others,
      { ...utun, name: 'utun5' },
      { name: 'utun3', up: true, addresses: ['172.31.0.2/32'], peer: '172.31.0.1' },
    ]);
    expect(bound(after).via).toEqual({
      kind: 'tunnel',
      interface: 'utun5',
      families: [4, 6],
      present: true,
    });
  });

  it('matches by the local address as well', () => {
    const { policy } = loadPolicy(`${VPN}policy.yaml`);
    if (policy === undefined) throw new Error('invalid');
    const byAddress = {
      ...policy,
      tunnelMatches: { vpn: { address: '10.8.0.2', peer: null } },
    };
    const f = renamed([...others, { ...utun, name: 'utun7' }].map(stripPeer));
    expect(lowerForHost(byAddress, f).tunnels.map((t) => t.name)).toEqual(['utun7']);
  });

  it('binds an absent tunnel to a name no interface has, never to the old number', () => {
    // Down: no utun matches, and utun3 now belongs to another tunnel.
    const taken = renamed([
      ...others,
      { name: 'vpn', up: true, addresses: ['172.31.0.2/32'] },
      { name: 'utun3', up: true, addresses: ['172.31.0.2/32'], peer: '172.31.0.1' },
    ]);
    const via = bound(taken).via;
    expect(via?.kind === 'tunnel' ? via.interface : '').toBe('eg-absent0');
    // Said as data too: a backend never has to recognise the name.
    expect(via?.kind === 'tunnel' ? via.present : true).toBe(false);
    expect(taken.interfaces.some((i) => i.name === 'eg-absent0')).toBe(false);
    // Gone and its declared name free: bound to the declared name, which no interface has.
    expect(bound(renamed(others)).tunnels).toEqual([['vpn', 'vpn']]);
    expect(lowerForHost(vpn, renamed(others)).tunnels.map((t) => t.present)).toEqual([false]);
  });

  it('refuses to guess between two interfaces that both match', () => {
    const twice = renamed([...others, utun, { ...utun, name: 'utun4' }]);
    expect(() => lowerForHost(vpn, twice)).toThrow(
      'Cannot identify tunnel "vpn" on host "runner-vpn-1": interfaces "utun3" and "utun4" both match peer 10.8.0.1',
    );
  });
});

function stripPeer(i: HostFacts['interfaces'][number]): HostFacts['interfaces'][number] {
  return Object.fromEntries(
    Object.entries(i).filter(([key]) => key !== 'peer'),
  ) as HostFacts['interfaces'][number];
}
