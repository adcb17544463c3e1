import { describe, expect, it } from 'vitest';
import type { Requirement } from '../policy/index.js';
import { computeCoverage } from './coverage.js';
import type { ProbeJudgement } from './oracles.js';
import type { ScenarioResult } from './scenario.js';

const requirement: Requirement = {
  id: 'R-1',
  statement: 's',
  safetyCritical: true,
  podProbes: [],
  probes: [
    {
      id: 'p',
      from: '10.0.0.1',
      in: undefined,
      to: '192.0.2.1',
      proto: 'tcp',
      port: 443,
      tunnel: 'down',
      expect: 'deny',
      egress: undefined,
      via: undefined,
    },
  ],
};

function judgement(passed: boolean | 'unmeasured', derived = false): ProbeJudgement {
  const outcome = passed === 'unmeasured' ? passed : passed ? 'passed' : 'failed';
  return {
    scenario: '',
    phase: 'tunnel down',
    key: 'k',
    tag: 't',
    origins: [{ requirement: 'R-1', index: 0 }],
    derived,
    className: 'c',
    viaTunnel: true,
    state: 'down',
    expected: { verdict: 'deny', via: null, egress: null, decidedBy: null },
    oracles: [],
    passed: outcome === 'passed',
    outcome,
    unmeasured: outcome === 'unmeasured' ? 'packets: no raw packet could be sent' : null,
    actedLayers: outcome === 'passed' ? ['routing'] : [],
    failingLayers: [],
    sent: 10,
    counts: [],
    leaked: 0,
    lost: 0,
    forwardedByHost: 0,
  };
}

function scenario(id: string, fault: boolean, judgements: ProbeJudgement[]): ScenarioResult {
  return {
    id,
    title: id,
    fault,
    layer: null,
    status: 'passed',
    reason: null,
    nonce: null,
    judgements,
    skippedProbes: [],
    sides: [],
    streams: [],
    restores: [],
    findings: [],
    metrics: {},
    notes: [],
    counters: [],
    durationMs: 0,
  };
}

const [probe] = requirement.probes;
if (probe === undefined) throw new Error('the requirement has a probe');
const l1 = [
  {
    requirement: 'R-1',
    probe,
    index: 0,
    explanation: undefined as never,
    mismatches: [],
  },
];

describe('computeCoverage', () => {
  it('verifies L3 when every probe ran under a fault and every run passed', () => {
    const [c] = computeCoverage({
      requirements: [requirement],
      l1,
      scenarios: [scenario('tunnel-down', true, [judgement(true), judgement(true, true)])],
      only: undefined,
    });
    expect(c?.level).toBe('L3');
    expect(c?.strictProblems).toEqual([]);
  });

  it('keeps a level covered but not verified when a derived variant failed there', () => {
    const [c] = computeCoverage({
      requirements: [requirement],
      l1,
      scenarios: [
        scenario('tunnel-down', true, [judgement(true)]),
        scenario('layer-nftables', true, [judgement(false, true)]),
      ],
      only: undefined,
    });
    expect(c?.levels.L3).toMatchObject({ covered: true, verified: false, failed: 1 });
    expect(c?.level).toBe('L2');
    expect(c?.strictProblems[0]).toMatch(/safety-critical and lacks a passing L3 measurement/);
  });

  it('counts a run that could not be measured neither as passed nor as failed', () => {
    const [c] = computeCoverage({
      requirements: [requirement],
      l1,
      scenarios: [
        scenario('tunnel-down', true, [judgement(true)]),
        scenario('carrier-lost', true, [judgement('unmeasured')]),
      ],
      only: undefined,
    });
    expect(c?.levels.L3).toMatchObject({
      covered: true,
      verified: false,
      failed: 0,
      unmeasured: 1,
    });
    expect(c?.strictProblems[0]).toContain('1 of 2 fault runs could not be measured');
    expect(c?.strictProblems[0]).not.toContain('failed');
  });

  it('does not cover a probe whose only run could not be measured', () => {
    const [c] = computeCoverage({
      requirements: [requirement],
      l1,
      scenarios: [scenario('carrier-lost', true, [judgement('unmeasured')])],
      only: undefined,
    });
    expect(c?.levels.L3).toMatchObject({ covered: false, unmeasured: 1 });
    expect(c?.strictProblems[0]).toContain('not every probe was measured under a fault');
  });

  it('has strict reject a requirement without probes', () => {
    const [c] = computeCoverage({
      requirements: [{ ...requirement, probes: [], safetyCritical: false }],
      l1: [],
      scenarios: [],
      only: undefined,
    });
    expect(c?.strictProblems).toEqual(['it has no probe']);
  });
});
