import { readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import { parseHostFacts } from '../facts/index.js';
import { lowerForHost } from '../ir/index.js';
import { loadPolicy } from '../policy/index.js';
import { buildFactsTopology } from './build-facts-topology.js';

const EXAMPLE = fileURLToPath(
  new URL('../../testdata/policies/valid/linux-vpn-gateway/', import.meta.url),
);

/** The example's facts as a real host's `egressguard facts` adds to them. */
function factsWith(extra: readonly object[]): ReturnType<typeof parseHostFacts> {
  const json = JSON.parse(readFileSync(`${EXAMPLE}facts.json`, 'utf8')) as {
    interfaces: object[];
  };
  return parseHostFacts({ ...json, interfaces: [...json.interfaces, ...extra] }, 'facts.json');
}

function labOf(facts: ReturnType<typeof parseHostFacts>): ReturnType<typeof buildFactsTopology> {
  const policy = loadPolicy(`${EXAMPLE}policy.yaml`).policy;
  if (policy === undefined) throw new Error('the example policy does not load');
  return buildFactsTopology(lowerForHost(policy, facts), facts);
}

describe('buildFactsTopology', () => {
  it('makes no lab node of an interface that is down or has no address, and says why', () => {
    const lab = labOf(
      factsWith([
        { name: 'ifb0', up: false, addresses: [] },
        { name: 'ifb1', up: true, addresses: [] },
        { name: 'docker0', up: false, addresses: ['172.17.0.1/16'] },
        { name: 'wlan0', up: true, addresses: ['fe80::2/64'] },
      ]),
    );
    const nodes = Object.keys(lab.topology.nodes);
    for (const name of ['lan-ifb0', 'lan-ifb1', 'lan-docker0', 'lan-wlan0']) {
      expect(nodes).not.toContain(name);
    }
    expect(lab.skipped).toEqual([
      'lo: loopback',
      'ifb0: down',
      'ifb1: no address',
      'docker0: down',
      'wlan0: no address',
    ]);
    expect(lab.unmanagedInterfaces).toEqual(['eth0', 'lan0']);
  });

  it('keeps the interfaces the policy names whatever their state: tunnel, class, uplink', () => {
    const json = JSON.parse(readFileSync(`${EXAMPLE}facts.json`, 'utf8')) as {
      interfaces: { name: string; up: boolean; addresses: string[] }[];
    };
    const facts = parseHostFacts(
      {
        ...json,
        interfaces: json.interfaces.map((i) =>
          i.name === 'tun0' || i.name === 'vwl0' ? { ...i, up: false, addresses: [] } : i,
        ),
      },
      'facts.json',
    );
    const lab = labOf(facts);
    expect(Object.keys(lab.topology.nodes)).toEqual(
      expect.arrayContaining(['host', 'internet', 'peer-tun0', 'wl-vwl0', 'wl-iwl0', 'lan-lan0']),
    );
    expect(lab.skipped).toEqual(['lo: loopback']);
  });
});
