import { readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import { parseHostFacts } from '../facts/index.js';
import { parsePolicy } from '../policy/index.js';
import { createHostView, evaluatePacket } from './evaluate.js';
import { toPacket } from './evaluate-probes.js';
import { lowerForHost } from './bind-host.js';

const dir = fileURLToPath(
  new URL('../../testdata/policies/valid/macos-runner-fleet/', import.meta.url),
);
const facts = parseHostFacts(JSON.parse(readFileSync(`${dir}facts.json`, 'utf8')), 'facts.json');
const { policy, issues } = parsePolicy(readFileSync(`${dir}policy.yaml`, 'utf8'), 'policy.yaml');
if (policy === undefined) throw new Error(JSON.stringify(issues));
const ir = lowerForHost(policy, facts);
const host = createHostView(facts);

function explain(to: string, port = 9) {
  const packet = toPacket({
    from: '192.168.64.5',
    to,
    ingress: 'bridge100',
    protocol: 'udp',
    port,
  });
  return evaluatePacket(ir, host, packet, { tunnel: 'up' });
}

describe('evaluatePacket: what the host takes as its own', () => {
  // Found by the kernel differential (test/netns/nft-differential.test.ts): the kernel delivers a
  // directed broadcast to the host, so nft's input chain and its `self` rules judge it.
  it('treats the broadcast of a connected IPv4 prefix as the host itself', () => {
    expect(explain('192.168.67.255')).toMatchObject({
      verdict: 'deny',
      decidedBy: { id: 'deny-host' },
      hook: 'input',
    });
    expect(explain('192.168.67.255', 53)).toMatchObject({
      verdict: 'allow',
      decidedBy: { id: 'allow-host-dns' },
      via: 'local',
    });
    expect(explain('255.255.255.255')).toMatchObject({ decidedBy: { id: 'deny-host' } });
  });

  it('forwards the first address of a prefix, which Linux no longer takes as a broadcast', () => {
    expect(explain('192.168.64.0')).toMatchObject({
      verdict: 'allow',
      decidedBy: { id: 'vm/default' },
      hook: 'forward',
    });
  });

  it('takes the subnet-router anycast of a connected IPv6 prefix as the host itself', () => {
    const v6 = createHostView({
      ...facts,
      interfaces: [
        ...facts.interfaces,
        { name: 'br-lab', up: true, addresses: ['2001:db8:50::1/64'] },
      ],
    });
    expect(v6.addresses.contains(6, 0x20010db8005000000000000000000000n)).toBe(true);
    expect(v6.addresses.contains(6, 0x20010db8005000000000000000000002n)).toBe(false);
  });
});

describe('evaluatePacket: a tunnel class without a kill switch', () => {
  const valid = fileURLToPath(new URL('../../testdata/policies/valid/', import.meta.url));
  const invalid = fileURLToPath(new URL('../../testdata/policies/invalid/', import.meta.url));
  const gatewayFacts = parseHostFacts(
    JSON.parse(readFileSync(`${valid}linux-vpn-gateway/facts.json`, 'utf8')),
    'facts.json',
  );
  // Legal, with a warning: the class leaves by tun0 and has no kill switch.
  const parsed = parsePolicy(
    readFileSync(`${invalid}tunnel-without-kill-switch/policy.yaml`, 'utf8'),
    'policy.yaml',
  );
  if (parsed.policy === undefined) throw new Error(JSON.stringify(parsed.issues));
  const vpn = lowerForHost(parsed.policy, gatewayFacts);
  const packet = toPacket({ from: '10.10.0.5', to: '203.0.113.7', protocol: 'tcp', port: 443 });
  const gatewayHost = createHostView(gatewayFacts);

  it('leaves by the tunnel while it is up, steered by the owned table', () => {
    expect(evaluatePacket(vpn, gatewayHost, packet, { tunnel: 'up' })).toMatchObject({
      verdict: 'allow',
      via: 'tun0',
      layers: ['routing', 'filter'],
    });
  });

  // The owned table of a class without a kill switch has no blackhole: with the tunnel's routes
  // gone, its lookup falls through to the main table, which alone decides the way out.
  it('falls back to the main table and the uplink while it is down, as the warning says', () => {
    const down = evaluatePacket(vpn, gatewayHost, packet, { tunnel: 'down' });
    expect(down).toMatchObject({ verdict: 'allow', via: 'eth0', layers: ['filter'] });
    expect(down.notes).toEqual([
      'Tunnel "tun0" is down and class "vpn" has no kill switch: its owned routing table has no blackhole, so it falls back to the main table and leaves by "eth0"',
    ]);
  });
});
