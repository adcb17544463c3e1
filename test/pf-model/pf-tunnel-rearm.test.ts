import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { createMacosPfHost } from '../../src/backends/pf/create-macos-pf-host.js';
import { formatAddress, parseIpv4 } from '../../src/core/index.js';
import { readHostFacts, type HostFacts } from '../../src/facts/index.js';
import { applyPrepared, prepareForFacts, requirePolicy } from '../../src/host/index.js';
import { createPfModelHost, modelInterfaces, type PfModelHost } from './support.js';

// A tunnel class on pf across a utun renumbering (DESIGN.md §4, pf: "utun names renumber on
// reconnect: identify a tunnel by address or peer and re-resolve on re-arm"), against the pfctl
// MODEL of a stock macOS host. The re-arm is what `run` does on every reconcile: facts read
// anew, the policy bound to them, applied when the hash changed.
const CASE = join('testdata', 'policies', 'valid', 'macos-vpn-runner');
const FACTS: HostFacts = readHostFacts(join(CASE, 'facts.json'));
const POLICY = requirePolicy(join(CASE, 'policy.yaml')).policy;
const UTUN = FACTS.interfaces.find((i) => i.name === 'utun3');
if (UTUN === undefined) throw new Error('no utun3 in the facts');

const hosts: PfModelHost[] = [];
afterEach(() => {
  for (const h of hosts.splice(0)) h.cleanup();
});

function vmToInternet(h: PfModelHost, to = { address: '203.0.113.7', port: 443 }) {
  h.model.state.states = []; // a new connection each time
  const result = h.model.forwardPacket({
    family: 4,
    source: parseIpv4('192.168.64.5') as number,
    destination: parseIpv4(to.address) as number,
    protocol: 6,
    sourcePort: 50_443,
    destinationPort: to.port,
    ingress: 'bridge100',
    egress: 'en0',
  });
  return {
    verdict: result.verdict,
    egress: result.verdict === 'pass' ? result.egress : null,
    source: result.leaving === null ? null : formatAddress(4, result.leaving.source),
  };
}

function vmPacket(destination: string) {
  return {
    direction: 'in' as const,
    interface: 'bridge100',
    family: 4 as const,
    source: parseIpv4('192.168.64.5') as number,
    destination: parseIpv4(destination) as number,
    protocol: 6,
    sourcePort: 50_443,
    destinationPort: 443,
  };
}

describe('pf tunnel class: a renumbered utun is followed at re-arm', () => {
  it('routes into the utun that matches the peer, before and after renumbering', async () => {
    const h = createPfModelHost({
      model: createMacosPfHost({ interfaces: modelInterfaces(FACTS) }),
    });
    hosts.push(h);
    const first = prepareForFacts(h.target, { policy: POLICY, facts: FACTS });
    await applyPrepared(h.target, first);
    expect(vmToInternet(h)).toEqual({ verdict: 'pass', egress: 'utun3', source: '10.8.0.2' });

    // The VPN reconnects as utun5; utun3 goes to another VPN with another peer.
    h.model.setInterface('utun3', null);
    h.model.setInterface('utun5', [...UTUN.addresses]);
    h.model.setInterface('utun3', ['172.31.0.2/32']);
    // The anchor of before still names utun3: the class would go into the other VPN. This is
    // what re-resolving at re-arm is for.
    expect(vmToInternet(h).egress).toBe('utun3');

    const facts: HostFacts = {
      ...FACTS,
      interfaces: [
        ...FACTS.interfaces.filter((i) => i.name !== 'utun3'),
        { ...UTUN, name: 'utun5' },
        { name: 'utun3', up: true, addresses: ['172.31.0.2/32'], peer: '172.31.0.1' },
      ],
    };
    const rearmed = prepareForFacts(h.target, { policy: POLICY, facts });
    expect(rearmed.hash).not.toBe(first.hash);
    const anchor = rearmed.artifacts.find((a) => a.name === 'anchor.pf')?.content ?? '';
    expect(anchor).toContain('route-to utun5 ');
    expect(anchor).not.toContain('utun3');
    const report = await applyPrepared(h.target, rearmed);
    expect(report.changed).toBe(true);
    expect(report.generation.hash).toBe(rearmed.hash);
    expect(vmToInternet(h)).toEqual({ verdict: 'pass', egress: 'utun5', source: '10.8.0.2' });
    // The live states of the class were killed: the rules changed (pfctl -k per source prefix).
    expect(h.model.state.log.some((l) => l.argv.includes('-k'))).toBe(true);
  });

  it('drops the class while no utun matches, and follows the tunnel when it comes back', async () => {
    const h = createPfModelHost({
      model: createMacosPfHost({ interfaces: modelInterfaces(FACTS) }),
    });
    hosts.push(h);
    await applyPrepared(h.target, prepareForFacts(h.target, { policy: POLICY, facts: FACTS }));
    // The VPN disconnects: its utun is destroyed.
    h.model.setInterface('utun3', null);
    expect(vmToInternet(h)).toEqual({ verdict: 'block', egress: null, source: null });
    const down: HostFacts = {
      ...FACTS,
      interfaces: FACTS.interfaces.filter((i) => i.name !== 'utun3'),
    };
    await applyPrepared(h.target, prepareForFacts(h.target, { policy: POLICY, facts: down }));
    expect(vmToInternet(h).verdict).toBe('block');
    // It reconnects as utun4.
    h.model.setInterface('utun4', [...UTUN.addresses]);
    const back: HostFacts = {
      ...down,
      interfaces: [...down.interfaces, { ...UTUN, name: 'utun4' }],
    };
    await applyPrepared(h.target, prepareForFacts(h.target, { policy: POLICY, facts: back }));
    expect(vmToInternet(h)).toEqual({ verdict: 'pass', egress: 'utun4', source: '10.8.0.2' });
  });

  it('compiles kill-switch-only while no utun matches, and routes to the one that matches later', async () => {
    // Matched by its own address this time; the VPN is down when the policy is first bound.
    const byAddress = { ...POLICY, tunnelMatches: { vpn: { address: '10.8.0.2', peer: null } } };
    const down: HostFacts = {
      ...FACTS,
      interfaces: FACTS.interfaces.filter((i) => i.name !== 'utun3'),
    };
    const h = createPfModelHost({
      model: createMacosPfHost({ interfaces: modelInterfaces(down) }),
    });
    hosts.push(h);
    const warnings: string[] = [];
    const absent = prepareForFacts(h.target, {
      policy: byAddress,
      facts: down,
      warn: (m) => warnings.push(m),
    });
    expect(warnings).toEqual([expect.stringContaining('"vpn-vm" is compiled kill-switch-only')]);
    const anchor = absent.artifacts.find((a) => a.name === 'anchor.pf')?.content ?? '';
    expect(anchor).not.toMatch(/^pass .* route-to /m);
    // The model refuses a route-to interface it lacks, so this load passing is the point.
    await applyPrepared(h.target, absent);
    expect(vmToInternet(h)).toEqual({ verdict: 'block', egress: null, source: null });
    expect(h.model.sendPacket(vmPacket('203.0.113.7')).label).toBe('vpn-vm/kill-switch');
    // What the kill switch excepts is still judged by the class's rules: the LAN printer.
    expect(vmToInternet(h, { address: '192.168.1.40', port: 631 })).toEqual({
      verdict: 'pass',
      egress: 'en0',
      source: '192.168.64.5',
    });

    // The VPN connects as utun5 (it was utun3 before it went down).
    h.model.setInterface('utun5', [...UTUN.addresses]);
    const up: HostFacts = { ...down, interfaces: [...down.interfaces, { ...UTUN, name: 'utun5' }] };
    const rearmed = prepareForFacts(h.target, { policy: byAddress, facts: up });
    expect(rearmed.notes).toEqual([]);
    const routed = rearmed.artifacts.find((a) => a.name === 'anchor.pf')?.content ?? '';
    expect(routed).toContain('route-to utun5 inet all');
    expect(routed).not.toContain('utun3');
    const report = await applyPrepared(h.target, rearmed);
    expect(report.changed).toBe(true);
    expect(vmToInternet(h)).toEqual({ verdict: 'pass', egress: 'utun5', source: '10.8.0.2' });
  });
});
