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
      ['vpn.gateway', 'vpn', { kind: 'tunnel', interface: 'tun0', families: [4] }],
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
