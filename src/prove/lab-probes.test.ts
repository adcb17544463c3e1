import { describe, expect, it } from 'vitest';
import { loadVpnGateway } from '../../sim/prove/test-fixtures.js';

describe('expandProbes', () => {
  const { probes, skipped } = loadVpnGateway();

  it('measures each policy probe as TCP, UDP and ICMP in both tunnel states', () => {
    expect(skipped).toEqual([]);
    const whole = probes.filter((p) => p.fragments === undefined);
    // 6 packets of class vpn and internet, 2 of host-vpn (its UDP is DNS), each as TCP, UDP
    // and ICMP, in both tunnel states.
    expect(whole).toHaveLength(30);
    expect(new Set(whole.map((p) => p.kind))).toEqual(new Set(['tcp', 'udp', 'icmp', 'dns']));
    expect(whole.filter((p) => p.state === 'up')).toHaveLength(15);
  });

  // Issue 8, §1: fragments are judged like their datagram; a lone fragment is held.
  it('measures UDP and ICMP in fragments too: whole datagrams, and lone non-first fragments', () => {
    const fragmented = probes.filter((p) => p.fragments !== undefined);
    expect(fragmented).toHaveLength(40);
    const inFragments = probes.find(
      (p) => p.key === '10.10.0.5 > 203.0.113.7 udp/443 in fragments (tunnel down)',
    );
    expect(inFragments?.expect.decidedBy).toEqual({ kind: 'kill-switch', id: 'vpn/kill-switch' });
    const upInFragments = probes.find(
      (p) => p.key === '10.10.0.5 > 203.0.113.7 udp/443 in fragments (tunnel up)',
    );
    expect(upInFragments?.expect).toMatchObject({ verdict: 'allow', via: 'tun0' });
    const alone = probes.find(
      (p) => p.key === '10.10.0.5 > 203.0.113.7 icmp lone fragments (tunnel up)',
    );
    expect(alone?.expect).toMatchObject({
      verdict: 'deny',
      decidedBy: { kind: 'reassembly', id: 'egressguard/reassembly' },
    });
  });

  it('keeps the policy’s own expectation for the probes it states', () => {
    const stated = probes.find(
      (p) => p.key === '10.10.0.5 > 203.0.113.7 tcp/443 (tunnel down)' && !p.derived,
    );
    expect(stated?.expect).toMatchObject({ verdict: 'deny', stated: true });
    expect(stated?.expect.decidedBy).toEqual({ kind: 'kill-switch', id: 'vpn/kill-switch' });
    // The tunnel-up probe's variant is the same packet: both probes own it.
    expect(stated?.origins).toEqual([
      { requirement: 'R-VPN-01', index: 0 },
      { requirement: 'R-VPN-01', index: 1 },
    ]);
  });

  it('derives the other protocols and states from the reference evaluator', () => {
    const udpUp = probes.find((p) => p.key === '10.10.0.5 > 203.0.113.7 udp/443 (tunnel up)');
    expect(udpUp).toMatchObject({ derived: true, viaTunnel: true, className: 'vpn' });
    expect(udpUp?.expect).toMatchObject({ verdict: 'allow', via: 'tun0', egress: '10.200.0.2' });
  });

  it('counts a probe of a class that ignores the tunnel as stated in both states', () => {
    const internet = probes.filter(
      (p) => p.className === 'internet' && p.kind === 'tcp' && !p.derived,
    );
    expect(internet.map((p) => p.state).sort()).toEqual(['down', 'up']);
  });
});
