import { describe, expect, it } from 'vitest';
import { isEgressguardError } from '../core/index.js';
import { parseHostFacts } from './host-facts.js';

const BASE = {
  schema: 'egressguard/facts/v1',
  hostname: 'k3s-gw-1',
  os: 'linux',
  interfaces: [{ name: 'eth0', up: true, addresses: ['192.168.1.21/24'] }],
  routes: [{ destination: 'default', interface: 'eth0' }],
};

function failure(json: unknown): string {
  try {
    parseHostFacts(json, 'facts.json');
  } catch (error) {
    if (isEgressguardError(error)) return `${error.code}: ${error.message}`;
    throw error;
  }
  throw new Error('expected a refusal');
}

describe('host facts: the cluster a node belongs to', () => {
  it('is optional, and its service CIDRs and node addresses default to none', () => {
    expect(parseHostFacts(BASE, 'facts.json').cluster).toBeUndefined();
    const facts = parseHostFacts({ ...BASE, cluster: { podCidrs: ['10.42.0.0/16'] } }, 'f');
    expect(facts.cluster).toEqual({
      podCidrs: ['10.42.0.0/16'],
      serviceCidrs: [],
      nodeAddresses: [],
      tunnelExits: {},
    });
  });

  it('refuses a tunnel exit with a malformed address, or an echo URL that would reach a shell', () => {
    const cluster = (exit: object) => ({
      ...BASE,
      cluster: { podCidrs: ['10.42.0.0/16'], tunnelExits: { tun0: exit } },
    });
    expect(failure(cluster({ echoUrl: 'http://203.0.113.80/', addresses: ['exit'] }))).toBe(
      'facts: Cannot use host facts "facts.json": cluster.tunnelExits.tun0 has malformed address "exit"',
    );
    expect(
      failure(cluster({ echoUrl: "http://203.0.113.80/'$(id)'", addresses: ['203.0.113.50'] })),
    ).toContain('is not an http(s) URL without quotes, spaces, backslashes or "$"');
  });

  it('refuses a malformed prefix or address, naming the field', () => {
    expect(failure({ ...BASE, cluster: { podCidrs: ['10.42.0.0/33'] } })).toBe(
      'facts: Cannot use host facts "facts.json": cluster.podCidrs has malformed prefix "10.42.0.0/33"',
    );
    expect(
      failure({ ...BASE, cluster: { podCidrs: ['10.42.0.0/16'], nodeAddresses: ['node-1'] } }),
    ).toBe(
      'facts: Cannot use host facts "facts.json": cluster.nodeAddresses has malformed address "node-1"',
    );
    expect(failure({ ...BASE, cluster: { podCidrs: [] } })).toContain('at "cluster.podCidrs"');
  });
});
