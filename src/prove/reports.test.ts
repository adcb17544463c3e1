import { describe, expect, it } from 'vitest';
import type { ProofReport } from './prove.js';
import { renderJunit, renderSummary, xml } from './reports.js';

const report: ProofReport = {
  format: 'egressguard/proof/v1',
  policy: 'p',
  policyFile: 'p.yaml',
  factsFile: 'facts.json',
  hash: 'a'.repeat(64),
  backend: 'nftables',
  layers: ['routing', 'nftables'],
  versions: {
    egressguard: '0.1.0',
    tools: { nft: '1.0.6' },
    kernel: '6.1',
    iproute2: 'ip',
    python: 'Python 3',
    node: 'v20',
  },
  lab: { id: 'x', namespaces: ['eglab-x-host'] },
  startedAt: '',
  durationMs: 1000,
  l1: [],
  probes: 1,
  skippedProbes: [],
  scenarios: [
    {
      id: 'layer-nftables',
      title: 't',
      fault: true,
      layer: 'nftables',
      status: 'failed',
      reason: null,
      nonce: 'eg00000000000000',
      judgements: [
        {
          scenario: 'layer-nftables',
          phase: 'steering removed',
          key: '10.10.0.5 > 203.0.113.7 tcp/443 (tunnel down)',
          tag: 'p0x0',
          origins: [{ requirement: 'R-<1>&"2"', index: 0 }],
          derived: false,
          className: 'vpn',
          viaTunnel: true,
          state: 'down',
          expected: { verdict: 'deny', via: null, egress: null, decidedBy: 'vpn/kill-switch' },
          oracles: [
            { oracle: 'probe', verdict: 'allow', agrees: false, detail: 'answered <&>\u0001' },
            { oracle: 'packets', verdict: 'allow', agrees: false, detail: '10 seen' },
            { oracle: 'enforcer', verdict: 'allow', agrees: false, detail: 'counter +0' },
          ],
          passed: false,
          actedLayers: [],
          failingLayers: ['nftables'],
          sent: 10,
          counts: [],
          leaked: 10,
          lost: 0,
          forwardedByHost: 0,
        },
      ],
      skippedProbes: [],
      sides: [],
      streams: [],
      restores: [],
      findings: [],
      metrics: {},
      notes: [],
      counters: [],
      durationMs: 10,
    },
  ],
  coverage: [],
  restores: [],
  resident: [],
  passed: false,
  strictProblems: [],
};

describe('reports', () => {
  it('escapes XML attributes and drops characters XML cannot carry', () => {
    expect(xml(`a<b>&"c"'\u0001\n`)).toBe('a&lt;b&gt;&amp;&quot;c&quot;&apos;&#10;');
  });

  it('writes JUnit with the requirement id as a property and the failing layer as the type', () => {
    const junit = renderJunit(report, { strict: false });
    expect(junit).toContain('<property name="requirement" value="R-&lt;1&gt;&amp;&quot;2&quot;"/>');
    expect(junit).toMatch(
      /<failure message="[^"]*layer nftables did not hold[^"]*" type="nftables"\/>/,
    );
    expect(junit).toContain('tests="1" failures="1" errors="0" skipped="0"');
    expect(junit).not.toContain('\u0001');
  });

  it('says in the summary which layer did not hold for which requirement', () => {
    const summary = renderSummary(report, { strict: false });
    expect(summary).toContain('nftables: did NOT hold alone in layer-nftables');
    expect(summary).toContain(
      'layer-nftables/steering removed: R-<1>&"2" "10.10.0.5 > 203.0.113.7 tcp/443 (tunnel down)": layer nftables did not hold',
    );
    expect(summary).toMatch(/✗ not proven: a measurement failed\n$/);
  });
});
