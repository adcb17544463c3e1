import { describe, expect, it } from 'vitest';
import type { ObservedPacket } from './lab/parse-packet.js';
import type { LabProbe } from './lab-probes.js';
import type { PhaseRun, ProbeRun, SideObservation } from './measure-phase.js';
import { judgePhase } from './oracles.js';
import { loadVpnGateway } from '../../sim/prove/test-fixtures.js';

const { probes, plan } = loadVpnGateway();
const probe = (key: string): LabProbe => {
  const found = probes.find((p) => p.key === key);
  if (found === undefined) throw new Error(`no probe ${key}`);
  return found;
};
const DENIED = probe('10.10.0.5 > 203.0.113.7 tcp/443 (tunnel down)');
const ALLOWED = probe('10.10.0.5 > 203.0.113.7 tcp/443 (tunnel up)');
// Class host-vpn: the host sends it itself (its resolver, from the tunnel's address).
const HOST_DENIED = probe('10.200.0.2 > 203.0.113.53 udp/53 in fragments (tunnel down)');

function packets(tag: string, src: string, n: number): ObservedPacket[] {
  return Array.from({ length: n }, () => ({
    family: 4 as const,
    kind: 'tcp' as const,
    protocol: 6,
    src,
    dst: '203.0.113.7',
    length: 60,
    tag,
  }));
}

function sides(seen: Partial<Record<string, ObservedPacket[]>> = {}): SideObservation[] {
  return plan.farSides.map((side) => ({
    side,
    trusted: true,
    error: null,
    packets: seen[side.role] ?? [],
  }));
}

function phase(runs: ProbeRun[], extra: Partial<PhaseRun['spec']> = {}, delta = {}): PhaseRun {
  return {
    scenario: 'test',
    spec: { name: 'phase', state: runs[0]?.probe.state ?? 'down', ...extra },
    runs,
    skipped: [],
    counters: { present: true, delta },
    startedAt: '',
    durationMs: 0,
  };
}

const dropped: Pick<ProbeRun, 'client' | 'raw'> = {
  client: { outcome: 'timeout', node: null, seen: null, error: null, ms: 700 },
  raw: { sent: 10, refused: 0, failed: 0, error: null },
};

describe('judgePhase', () => {
  it('passes a denied probe that no far side saw and a layer of ours dropped', () => {
    const [j] = judgePhase(
      phase([
        {
          probe: DENIED,
          tag: 'p0x0',
          node: 'wl-vwl0',
          ...dropped,
          route: { type: 'blackhole', dev: null, flags: [], detail: '' },
        },
      ]),
      sides(),
      plan,
      'nftables',
    );
    expect(j?.passed).toBe(true);
    expect(j?.actedLayers).toEqual(['routing']);
    expect(j?.oracles.map((o) => o.agrees)).toEqual([true, true, true]);
  });

  it('fails a layer-alone probe whose layer did not act, and names that layer', () => {
    const [j] = judgePhase(
      phase(
        [
          {
            probe: DENIED,
            tag: 'p0x0',
            node: 'wl-vwl0',
            client: {
              outcome: 'answered',
              node: 'internet',
              seen: '10.10.0.5',
              error: null,
              ms: 2,
            },
            raw: { sent: 10, refused: 0, failed: 0, error: null },
            route: { type: 'unicast', dev: 'eth0', flags: [], detail: '' },
          },
        ],
        { expectLayer: 'nftables' },
        { 'vpn/kill-switch': 0 },
      ),
      sides({ uplink: packets('p0x0', '10.10.0.5', 10) }),
      plan,
      'nftables',
    );
    expect(j?.passed).toBe(false);
    expect(j?.failingLayers).toEqual(['nftables']);
    expect(j?.leaked).toBe(10);
    expect(j?.oracles.map((o) => [o.oracle, o.verdict])).toEqual([
      ['probe', 'allow'],
      ['packets', 'allow'],
      ['enforcer', 'allow'],
    ]);
  });

  it('passes an allowed probe that all arrived beyond its tunnel as the tunnel address', () => {
    const [j] = judgePhase(
      phase(
        [
          {
            probe: ALLOWED,
            tag: 'p0x0',
            node: 'wl-vwl0',
            client: {
              outcome: 'answered',
              node: 'peer-tun0',
              seen: '10.200.0.2',
              error: null,
              ms: 1,
            },
            raw: { sent: 10, refused: 0, failed: 0, error: null },
            route: { type: 'unicast', dev: 'tun0', flags: [], detail: '' },
          },
        ],
        {},
        { 'vpn/default': 12 },
      ),
      sides({ tunnel: packets('p0x0', '10.200.0.2', 10) }),
      plan,
      'nftables',
    );
    expect(j?.passed).toBe(true);
    expect(j?.lost).toBe(0);
  });

  it('refuses to judge by counts from an observer that was never armed', () => {
    const untrusted = sides().map((s) =>
      s.side.role === 'uplink' ? { ...s, trusted: false, error: 'not armed' } : s,
    );
    const [j] = judgePhase(
      phase([
        {
          probe: DENIED,
          tag: 'p0x0',
          node: 'wl-vwl0',
          ...dropped,
          route: { type: 'blackhole', dev: null, flags: [], detail: '' },
        },
      ]),
      untrusted,
      plan,
      'nftables',
    );
    expect(j?.passed).toBe(false);
    expect(j?.oracles.find((o) => o.oracle === 'packets')?.verdict).toBe('unknown');
    expect(j).toMatchObject({ outcome: 'unmeasured', failingLayers: [] });
    expect(j?.unmeasured).toContain('cannot count beyond uplink (internet): not armed');
  });

  it('calls a probe whose packets could not be sent unmeasured, never a failed requirement', () => {
    const [j] = judgePhase(
      phase([
        {
          probe: DENIED,
          tag: 'p0x0',
          node: 'wl-vwl0',
          client: { outcome: 'timeout', node: null, seen: null, error: null, ms: 700 },
          raw: { sent: 0, refused: 0, failed: 10, error: 'Invalid argument (errno 22)' },
          route: { type: 'blackhole', dev: null, flags: [], detail: '' },
        },
      ]),
      sides(),
      plan,
      'nftables',
    );
    expect(j).toMatchObject({ passed: false, outcome: 'unmeasured', failingLayers: [] });
    expect(j?.unmeasured).toBe('packets: no raw packet could be sent: Invalid argument (errno 22)');
  });

  it("passes a host class's denied probe whose every send the host refused (its blackhole)", () => {
    const [j] = judgePhase(
      phase([
        {
          probe: HOST_DENIED,
          tag: 'p0x0',
          node: plan.host,
          client: {
            outcome: 'unreachable',
            node: null,
            seen: null,
            error: 'Invalid argument (errno 22)',
            ms: 1,
          },
          raw: { sent: 0, refused: 10, failed: 0, error: 'Invalid argument (errno 22)' },
          route: { type: 'blackhole', dev: null, flags: [], detail: '' },
        },
      ]),
      sides(),
      plan,
      'nftables',
    );
    expect(j?.oracles.find((o) => o.oracle === 'packets')).toMatchObject({
      verdict: 'deny',
      agrees: true,
      detail: 'the host refused all 10 sends (Invalid argument (errno 22)): none left it',
    });
    expect(j).toMatchObject({ outcome: 'passed', unmeasured: null, actedLayers: ['routing'] });
  });

  it('still calls a workload whose own sends were refused unmeasured: that is the lab, not the host', () => {
    const [j] = judgePhase(
      phase([
        {
          probe: DENIED,
          tag: 'p0x0',
          node: 'wl-vwl0',
          client: { outcome: 'timeout', node: null, seen: null, error: null, ms: 700 },
          raw: { sent: 0, refused: 10, failed: 0, error: 'Invalid argument (errno 22)' },
          route: { type: 'blackhole', dev: null, flags: [], detail: '' },
        },
      ]),
      sides(),
      plan,
      'nftables',
    );
    expect(j).toMatchObject({ outcome: 'unmeasured', failingLayers: [] });
  });

  it('calls an allowed probe whose client was reset unmeasured when the packets arrived', () => {
    const [j] = judgePhase(
      phase(
        [
          {
            probe: ALLOWED,
            tag: 'p0x0',
            node: 'wl-vwl0',
            client: {
              outcome: 'error',
              node: null,
              seen: null,
              error: 'Connection reset by peer (errno 104)',
              ms: 3,
            },
            raw: { sent: 10, refused: 0, failed: 0, error: null },
            route: { type: 'unicast', dev: 'tun0', flags: [], detail: '' },
          },
        ],
        {},
        { 'vpn/default': 12 },
      ),
      sides({ tunnel: packets('p0x0', '10.200.0.2', 10) }),
      plan,
      'nftables',
    );
    expect(j).toMatchObject({ outcome: 'unmeasured', failingLayers: [] });
    expect(j?.unmeasured).toBe('probe: the client failed: Connection reset by peer (errno 104)');
  });

  it('fails a probe a definite oracle contradicts, even when another could not read', () => {
    const [j] = judgePhase(
      phase([
        {
          probe: DENIED,
          tag: 'p0x0',
          node: 'wl-vwl0',
          client: {
            outcome: 'answered',
            node: 'internet',
            seen: '198.51.100.2',
            error: null,
            ms: 2,
          },
          raw: { sent: 0, refused: 0, failed: 10, error: 'Invalid argument (errno 22)' },
          route: { type: 'unicast', dev: 'eth0', flags: [], detail: '' },
        },
      ]),
      sides(),
      plan,
      'nftables',
    );
    expect(j).toMatchObject({ outcome: 'failed', unmeasured: null });
  });
});
