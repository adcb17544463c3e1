import { describe, expect, it } from 'vitest';
import type { ProofReport } from './prove.js';
import { renderJunit, renderSummary } from './reports.js';

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
  lab: { id: 'x', namespaces: ['eglab-x-host'], leftOut: ['lo: loopback'] },
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
          outcome: 'failed',
          unmeasured: null,
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
  outcome: 'failed',
  strictProblems: [],
};

describe('reports', () => {
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
    expect(summary).toMatch(/✗ not proven: enforcement failed \(see "Failures"\)\n$/);
  });

  // The scenario of a probe that could not be sent (a raw socket refused it): no verdict.
  const [failedScenario] = report.scenarios;
  const [failedProbe] = failedScenario?.judgements ?? [];
  if (failedScenario === undefined || failedProbe === undefined) throw new Error('fixture');
  const unmeasured: ProofReport = {
    ...report,
    outcome: 'unmeasured',
    scenarios: [
      {
        ...failedScenario,
        status: 'unmeasured',
        judgements: [
          {
            ...failedProbe,
            outcome: 'unmeasured',
            unmeasured: 'packets: no raw packet could be sent: Invalid argument (errno 22)',
            failingLayers: [],
          },
        ],
      },
    ],
  };

  it('tells a measurement the lab could not take from a failure, in the summary and JUnit', () => {
    const summary = renderSummary(unmeasured, { strict: false });
    expect(summary).not.toContain('Failures');
    expect(summary).not.toContain('did NOT hold');
    expect(summary).toContain(
      '? layer-nftables/steering removed: R-<1>&"2" "10.10.0.5 > 203.0.113.7 tcp/443 (tunnel down)": could not measure: packets: no raw packet could be sent: Invalid argument (errno 22)',
    );
    expect(summary).toMatch(
      /\? not proven: the lab could not take every measurement \(see "Not measured"\); nothing it measured failed\n$/,
    );
    const junit = renderJunit(unmeasured, { strict: false });
    expect(junit).toContain('tests="1" failures="0" errors="1" skipped="0"');
    expect(junit).toContain('type="unmeasured"');
  });

  it('never says proven beside a leak outside the policy', () => {
    const leaking: ProofReport = {
      ...report,
      outcome: 'failed',
      scenarios: [
        {
          ...failedScenario,
          id: 'dns-host-resolver',
          status: 'failed',
          judgements: [{ ...failedProbe, passed: true, outcome: 'passed', failingLayers: [] }],
          findings: [{ severity: 'leak', message: 'class vpn leaks by a path outside the policy' }],
        },
      ],
    };
    const summary = renderSummary(leaking, { strict: false });
    expect(summary).not.toContain('✓ proven');
    expect(summary).toContain('Leaks outside the policy\n  ! dns-host-resolver: class vpn leaks');
    expect(summary).toMatch(
      /✗ not proven: class traffic leaks by a path outside the policy \(see "Leaks outside the policy"\)\n$/,
    );
  });
});
