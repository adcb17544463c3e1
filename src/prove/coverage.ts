import type { ProbeResult } from '../ir/index.js';
import type { Requirement } from '../policy/index.js';
import type { ProbeJudgement } from './oracles.js';
import type { ScenarioResult } from './scenario.js';

/** Requirement levels, derived from what proved them (DESIGN.md §2). */
export type Level = 'L1' | 'L2' | 'L3';

/** Whether a level was reached: every probe measured there (covered), and every run passed. */
export interface LevelCoverage {
  /** Every probe of the requirement was measured at this level. */
  readonly covered: boolean;
  /** Covered, and every run at this level (derived variants included) passed. */
  readonly verified: boolean;
  readonly runs: number;
  readonly failed: number;
  /** Runs that could not be measured (the lab's fault): neither passed nor failed. */
  readonly unmeasured: number;
}

/** One requirement's coverage. */
export interface RequirementCoverage {
  readonly id: string;
  readonly statement: string;
  readonly safetyCritical: boolean;
  readonly probes: number;
  /** Not selected with --only: nothing ran. */
  readonly selected: boolean;
  readonly levels: Readonly<Record<Level, LevelCoverage>>;
  /** The highest level verified with every level below it. */
  readonly level: Level | null;
  /** The layers seen acting in passing fault measurements of this requirement. */
  readonly layers: readonly string[];
  /** Why --strict rejects it, if it does. */
  readonly strictProblems: readonly string[];
}

/**
 * L1: the reference evaluator agrees with every probe. L2: every probe measured in the lab with
 * nothing broken but its own tunnel state (the steady state, or the tunnel-down scenario). L3:
 * every probe measured under a fault by the outside oracles. A level counts only with those below.
 */
export function computeCoverage(input: {
  readonly requirements: readonly Requirement[];
  readonly l1: readonly ProbeResult[];
  readonly scenarios: readonly ScenarioResult[];
  readonly only: readonly string[] | undefined;
}): RequirementCoverage[] {
  const all = input.scenarios.flatMap((s) => s.judgements.map((j) => ({ scenario: s, j })));
  return input.requirements.map((requirement) => {
    const selected = input.only === undefined || input.only.includes(requirement.id);
    const mine = all.filter(({ j }) => j.origins.some((o) => o.requirement === requirement.id));
    const isL2 = (s: ScenarioResult, j: ProbeJudgement): boolean =>
      s.id === 'steady-state' || (s.id === 'tunnel-down' && j.phase === 'tunnel down');
    const level = (
      runs: readonly { scenario: ScenarioResult; j: ProbeJudgement }[],
    ): LevelCoverage => {
      const stated = new Set(
        runs
          .filter(({ j }) => !j.derived && j.outcome !== 'unmeasured')
          .flatMap(({ j }) => j.origins.filter((o) => o.requirement === requirement.id))
          .map((o) => o.index),
      );
      const covered =
        requirement.probes.length > 0 && requirement.probes.every((_, i) => stated.has(i));
      const failed = runs.filter(({ j }) => j.outcome === 'failed').length;
      const unmeasured = runs.filter(({ j }) => j.outcome === 'unmeasured').length;
      return {
        covered,
        verified: covered && failed === 0 && unmeasured === 0,
        runs: runs.length,
        failed,
        unmeasured,
      };
    };
    const l1Results = input.l1.filter((r) => r.requirement === requirement.id);
    const l1: LevelCoverage = {
      covered: requirement.probes.length > 0,
      verified: requirement.probes.length > 0 && l1Results.every((r) => r.mismatches.length === 0),
      runs: l1Results.length,
      failed: l1Results.filter((r) => r.mismatches.length > 0).length,
      unmeasured: 0,
    };
    const l2 = level(mine.filter(({ scenario, j }) => isL2(scenario, j)));
    const faultRuns = mine.filter(({ scenario }) => scenario.fault);
    const l3 = level(faultRuns);
    const reached: Level | null =
      l1.verified && l2.verified && l3.verified
        ? 'L3'
        : l1.verified && l2.verified
          ? 'L2'
          : l1.verified
            ? 'L1'
            : null;
    const strictProblems: string[] = [];
    if (requirement.probes.length === 0) strictProblems.push('it has no probe');
    if (requirement.safetyCritical && reached !== 'L3') {
      strictProblems.push(
        `it is safety-critical and lacks a passing L3 measurement (${selected ? describeL3(l3) : 'not selected'})`,
      );
    }
    return {
      id: requirement.id,
      statement: requirement.statement,
      safetyCritical: requirement.safetyCritical,
      probes: requirement.probes.length,
      selected,
      levels: { L1: l1, L2: l2, L3: l3 },
      level: reached,
      layers: [
        ...new Set(faultRuns.filter(({ j }) => j.passed).flatMap(({ j }) => j.actedLayers)),
      ].sort(),
      strictProblems,
    };
  });
}

/** Why a selected requirement's fault runs do not verify it. */
function describeL3(l3: LevelCoverage): string {
  const notMeasured = `${l3.unmeasured} of ${l3.runs} fault runs could not be measured`;
  if (!l3.covered) {
    return l3.unmeasured > 0
      ? `not every probe was measured under a fault: ${notMeasured}`
      : 'not every probe ran under a fault';
  }
  return [
    l3.failed > 0 ? `${l3.failed} of ${l3.runs} fault runs failed` : '',
    l3.unmeasured > 0 ? notMeasured : '',
  ]
    .filter((t) => t !== '')
    .join(', ');
}
