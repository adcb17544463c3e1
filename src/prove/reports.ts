import { escapeXml as xml } from '../core/index.js';
import type { ProbeJudgement } from './oracles.js';
import type { ProofReport } from './prove.js';
import type { ScenarioResult } from './scenario.js';

/** What a summary prints about the report's outcome under --strict. */
export interface SummaryOptions {
  readonly strict: boolean;
  readonly paint?: (style: 'red' | 'green' | 'yellow' | 'bold' | 'dim', text: string) => string;
}

const CHECK = '✓';
const CROSS = '✗';
/** Not measured: neither a pass nor a failure. */
const QUERY = '?';

/**
 * The readable summary: what was proven, by which oracle, per layer; the must-show numbers; the
 * findings; and every failure with the layer and requirement it concerns.
 */
export function renderSummary(report: ProofReport, options: SummaryOptions): string {
  const paint = options.paint ?? ((_style, text) => text);
  const lines: string[] = [];
  const v = report.versions;
  lines.push(
    paint('bold', `egressguard prove --lab: ${report.policy} (hash ${report.hash.slice(0, 12)})`),
    `  lab ${report.lab.id} (${report.lab.namespaces.length} namespaces, torn down) · ${Object.entries(
      v.tools,
    )
      .map(([tool, version]) => `${tool} ${version}`)
      .join(
        ', ',
      )} · kernel ${v.kernel} · egressguard ${v.egressguard} · ${seconds(report.durationMs)}`,
    `  ${report.probes} lab probes from ${report.l1.length} policy probes (each also as UDP/TCP/ICMP and in the other tunnel state, judged by the reference evaluator)`,
    ...leftOutLines(report),
    ...(report.lab.captures === undefined
      ? []
      : [`  every lab node's packets: ${report.lab.captures.join(', ')}`]),
    '',
    paint('bold', 'Scenarios') +
      '  (oracles: probe = the client and the address the far side saw; packets = nonce’d counts beyond the far sides, each armed by a positive control; enforcer = our counters and routes)',
  );
  for (const s of report.scenarios) lines.push(...scenarioLines(s, paint));

  lines.push('', paint('bold', 'Each layer alone'));
  for (const layer of [...report.layers].reverse()) {
    const s = report.scenarios.find((r) => r.layer === layer);
    if (s === undefined || s.status === 'skipped') {
      lines.push(
        `  ${layer}: not proven alone (${s === undefined ? 'its scenario did not run' : (s.reason ?? 'skipped')})`,
      );
      continue;
    }
    const denied = s.judgements.filter((j) => j.expected.verdict === 'deny');
    const held = denied.filter((j) => j.passed && j.actedLayers.includes(layer));
    const leaked = denied.reduce((sum, j) => sum + j.leaked, 0);
    const ok = s.status === 'passed';
    const unmeasured = s.status === 'unmeasured';
    lines.push(
      `  ${ok ? paint('green', CHECK) : unmeasured ? paint('yellow', QUERY) : paint('red', CROSS)} ${layer}: ${ok ? 'held alone' : unmeasured ? 'not proven alone (not every measurement could be taken)' : 'did NOT hold alone'} in ${s.id}: ${held.length} of ${denied.length} denied probes dropped by ${layer}, ${leaked} nonce’d packets beyond any far side`,
    );
  }

  lines.push('', paint('bold', 'Must show'));
  const faults = report.scenarios.filter((s) => s.fault && s.status !== 'skipped');
  const tunnelLeak = faults.reduce(
    (sum, s) =>
      sum +
      s.judgements
        .filter((j) => j.viaTunnel && j.expected.verdict === 'deny')
        .reduce((n, j) => n + j.leaked, 0) +
      s.streams.filter((st) => st.expect !== 'allow').reduce((n, st) => n + st.leaked, 0),
    0,
  );
  const tunnelClasses = [
    ...new Set(
      report.scenarios.flatMap((s) =>
        s.judgements.filter((j) => j.viaTunnel).map((j) => j.className),
      ),
    ),
  ];
  lines.push(
    `  tunnel classes (${tunnelClasses.join(', ') || 'none'}) beyond the uplink or a LAN in ${faults.length} fault scenarios: ${tunnelLeak} nonce’d packets`,
  );
  const sides = report.scenarios.flatMap((s) => s.sides);
  lines.push(
    `  positive controls: ${sides.filter((s) => s.trusted).length} of ${sides.length} observers armed and closed by their controls`,
  );
  const others = report.scenarios.flatMap((s) =>
    s.fault ? s.judgements.filter((j) => !j.viaTunnel || j.expected.verdict === 'allow') : [],
  );
  lines.push(
    `  unaffected traffic (other classes, exceptions) under faults: ${others.filter((j) => j.passed).length} of ${others.length} probes as expected, ${others.reduce((n, j) => n + j.lost, 0)} packets lost`,
  );
  const reapply = report.scenarios.find((s) => s.id === 'reapply-under-traffic');
  if (reapply !== undefined && reapply.status !== 'skipped') {
    const allowed = reapply.streams.filter((s) => s.expect === 'allow');
    const denied = reapply.streams.filter((s) => s.expect === 'deny');
    const minRate = Math.min(...reapply.streams.map((s) => s.minPerSecond ?? 0));
    lines.push(
      `  reapply ×${reapply.metrics['reapplies'] ?? '?'} in ${seconds(Number(reapply.metrics['reapplyTotalMs'] ?? 0))} (median ${reapply.metrics['reapplyMedianMs'] ?? '?'} ms) under ${reapply.streams.length} flows at ≥ ${minRate} packets/s each (slowest second): ${allowed.reduce((n, s) => n + s.sent, 0)} allowed sent, ${allowed.reduce((n, s) => n + s.lost, 0)} lost; ${denied.reduce((n, s) => n + s.sent, 0)} denied sent, ${denied.reduce((n, s) => n + s.leaked, 0)} leaked`,
    );
  }

  lines.push(
    '',
    paint('bold', 'Requirements') + '  (L1 evaluator, L2 lab steady state, L3 lab under faults)',
  );
  for (const c of report.coverage) {
    if (!c.selected) {
      lines.push(
        `  - ${c.id}${c.safetyCritical ? ' (safety-critical)' : ''}: not selected (--only)`,
      );
      for (const p of c.strictProblems) lines.push(`      strict: ${p}`);
      continue;
    }
    const marks = (['L1', 'L2', 'L3'] as const)
      .map((l) => {
        const level = c.levels[l];
        return `${l} ${level.verified ? 'verified' : level.covered ? `covered, ${level.failed} failed` : 'not covered'}`;
      })
      .join(' · ');
    const ok = c.strictProblems.length === 0 && c.level !== null;
    lines.push(
      `  ${ok ? paint('green', CHECK) : paint(c.safetyCritical ? 'red' : 'yellow', CROSS)} ${c.id}${c.safetyCritical ? ' (safety-critical)' : ''}: ${c.level ?? 'no level'}; ${marks}${c.layers.length > 0 ? `; layers seen acting: ${c.layers.join(', ')}` : ''}`,
    );
    for (const p of c.strictProblems) lines.push(`      strict: ${p}`);
  }

  const findings = report.scenarios.flatMap((s) => s.findings.map((f) => ({ s, f })));
  const leaks = findings.filter(({ f }) => f.severity === 'leak');
  if (leaks.length > 0) {
    lines.push('', paint('bold', 'Leaks outside the policy'));
    for (const { s, f } of leaks) lines.push(`  ${paint('red', '!')} ${s.id}: ${f.message}`);
  }

  const failures = report.scenarios.flatMap((s) => failureLines(s));
  if (failures.length > 0) {
    lines.push('', paint('bold', 'Failures') + '  (enforcement did not do what the policy says)');
    lines.push(...failures.map((l) => `  ${paint('red', CROSS)} ${l}`));
  }

  const unmeasured = report.scenarios.flatMap((s) => unmeasuredLines(s));
  if (unmeasured.length > 0) {
    lines.push(
      '',
      paint('bold', 'Not measured') +
        '  (the lab could not take these measurements: no verdict on the enforcer either way)',
    );
    lines.push(...unmeasured.map((l) => `  ${paint('yellow', QUERY)} ${l}`));
  }

  lines.push('', headline(report, options, { leaks: leaks.length, failures: failures.length }));
  return `${lines.join('\n')}\n`;
}

/** The last line: proven (never beside a leak), or why not, failures first. */
function headline(
  report: ProofReport,
  options: SummaryOptions,
  counts: { readonly leaks: number; readonly failures: number },
): string {
  const paint = options.paint ?? ((_style, text) => text);
  const strictFailed = options.strict && report.strictProblems.length > 0;
  const strict = strictFailed ? `strict: ${report.strictProblems.join('; ')}` : '';
  if (report.outcome === 'proven' && !strictFailed) {
    return paint(
      'green',
      `${CHECK} proven: every measurement agreed with the policy${options.strict ? ' (strict: every safety-critical requirement verified at L3)' : ''}`,
    );
  }
  if (report.outcome === 'unmeasured') {
    return paint(
      'yellow',
      `${QUERY} not proven: the lab could not take every measurement (see "Not measured"); nothing it measured failed`,
    );
  }
  const why = [
    counts.failures > 0 ? 'enforcement failed (see "Failures")' : '',
    counts.leaks > 0
      ? 'class traffic leaks by a path outside the policy (see "Leaks outside the policy")'
      : '',
    strict,
  ].filter((w) => w !== '');
  return paint('red', `${CROSS} not proven: ${why.join('; ')}`);
}

/** The facts' interfaces no lab node stands for (loopback goes without saying). */
function leftOutLines(report: ProofReport): string[] {
  const notable = report.lab.leftOut.filter((l) => !l.endsWith(': loopback'));
  return notable.length === 0
    ? []
    : [
        `  host interfaces left out of the lab: ${notable.join(', ')} (no traffic can leave by them)`,
      ];
}

function scenarioLines(s: ScenarioResult, paint: NonNullable<SummaryOptions['paint']>): string[] {
  if (s.status === 'skipped') return [`  - ${s.id}: skipped (${s.reason ?? ''})`];
  const mark =
    s.status === 'passed'
      ? paint('green', CHECK)
      : s.status === 'unmeasured'
        ? paint('yellow', QUERY)
        : paint('red', CROSS);
  const passed = s.judgements.filter((j) => j.passed).length;
  const unmeasured = s.judgements.filter((j) => j.outcome === 'unmeasured').length;
  const oracleOk = (name: string): number =>
    s.judgements.filter((j) => j.oracles.find((o) => o.oracle === name)?.agrees === true).length;
  const leaked = s.judgements.reduce(
    (n, j) => n + (j.expected.verdict === 'deny' ? j.leaked : 0),
    0,
  );
  const metrics = Object.entries(s.metrics)
    .filter(([k]) => k === 'recoveryMs' || k.endsWith('Outcome') || k === 'reapplies')
    .map(([k, v]) => `${k} ${String(v)}`);
  const out = [
    `  ${mark} ${s.id}${s.layer === null ? '' : ` [${s.layer} alone]`}: ${passed}/${s.judgements.length} probes passed${unmeasured > 0 ? `, ${unmeasured} not measured` : ''} (probe ${oracleOk('probe')}, packets ${oracleOk('packets')}, enforcer ${oracleOk('enforcer')}); denied packets beyond a far side: ${leaked}${s.streams.length > 0 ? `; ${s.streams.length} flows, ${s.streams.reduce((n, st) => n + st.sent, 0)} packets` : ''}${metrics.length > 0 ? `; ${metrics.join(', ')}` : ''} (${seconds(s.durationMs)})`,
  ];
  if (s.reason !== null) out.push(`      error: ${s.reason}`);
  return out;
}

function failureLines(s: ScenarioResult): string[] {
  const lines: string[] = [];
  for (const j of s.judgements.filter((x) => x.outcome === 'failed')) {
    lines.push(describeFailure(s, j));
  }
  for (const st of s.streams.filter((x) => x.outcome === 'failed')) {
    lines.push(
      `${s.id}: flow ${st.what} (${st.expect}): sent ${st.sent}, ${st.expect === 'allow' ? `lost ${st.lost}, ` : ''}leaked ${st.leaked}`,
    );
  }
  for (const f of s.findings.filter((x) => x.severity === 'failure'))
    lines.push(`${s.id}: ${f.message}`);
  if (s.status === 'error') lines.push(`${s.id}: ${s.reason ?? 'error'}`);
  return lines;
}

/** What the lab could not measure in a scenario: probes, flows and findings, each with why. */
function unmeasuredLines(s: ScenarioResult): string[] {
  return [
    ...s.judgements
      .filter((j) => j.outcome === 'unmeasured')
      .map(
        (j) =>
          `${s.id}/${j.phase}: ${requirementsOf(j)} "${j.key}"${j.derived ? ' (derived)' : ''}: could not measure: ${j.unmeasured ?? ''}`,
      ),
    ...s.streams
      .filter((st) => st.outcome === 'unmeasured')
      .map(
        (st) =>
          `${s.id}: flow ${st.what} (${st.expect}): could not measure: ${st.unmeasured ?? ''}`,
      ),
    ...s.findings.filter((f) => f.severity === 'unmeasured').map((f) => `${s.id}: ${f.message}`),
  ];
}

function requirementsOf(j: ProbeJudgement): string {
  const requirements = [...new Set(j.origins.map((o) => o.requirement))];
  return requirements.length > 0 ? requirements.join(', ') : 'no requirement';
}

/** One failed probe: the requirement, the layer that did not hold, and what each oracle saw. */
export function describeFailure(s: ScenarioResult, j: ProbeJudgement): string {
  const layer = j.failingLayers.length > 0 ? j.failingLayers.join(' + ') : 'unknown';
  const oracles = j.oracles.map((o) => `${o.oracle}: ${o.detail}`).join('; ');
  return `${s.id}/${j.phase}: ${requirementsOf(j)} "${j.key}"${j.derived ? ' (derived)' : ''}: layer ${layer} did not hold: expected ${j.expected.verdict}${j.expected.via === null ? '' : ` via ${j.expected.via}`}; ${oracles}`;
}

/** JUnit XML: a suite per scenario, a case per probe with its requirement ids as properties. */
export function renderJunit(report: ProofReport, options: { readonly strict: boolean }): string {
  const suites: string[] = [];
  for (const s of report.scenarios) {
    const cases: string[] = [];
    for (const j of s.judgements) {
      const props = [
        ...j.origins.map((o) => property('requirement', o.requirement)),
        property('probe', j.key),
        property('phase', j.phase),
        property('derived', String(j.derived)),
        property('layers', j.actedLayers.join(',')),
        ...j.oracles.map((o) =>
          property(`oracle.${o.oracle}`, `${o.agrees ? 'agrees' : 'disagrees'}: ${o.detail}`),
        ),
      ];
      // Not measured is JUnit's error (the test could not run as meant), never a failure.
      const body =
        j.outcome === 'passed'
          ? ''
          : j.outcome === 'unmeasured'
            ? `\n      <error message="${xml(`could not measure: ${j.unmeasured ?? ''}`)}" type="unmeasured"/>`
            : `\n      <failure message="${xml(describeFailure(s, j))}" type="${xml(j.failingLayers.join('+') || 'measurement')}"/>`;
      cases.push(
        `    <testcase classname="${xml(`prove.${s.id}`)}" name="${xml(`${j.phase}: ${j.key}`)}">\n      <properties>\n${props.map((p) => `        ${p}`).join('\n')}\n      </properties>${body}\n    </testcase>`,
      );
    }
    for (const st of s.streams) {
      cases.push(
        `    <testcase classname="${xml(`prove.${s.id}`)}" name="${xml(`flow ${st.what} (${st.expect})`)}">${st.outcome === 'passed' ? '' : st.outcome === 'unmeasured' ? `\n      <error message="${xml(`could not measure: ${st.unmeasured ?? ''}`)}" type="unmeasured"/>` : `\n      <failure message="${xml(`sent ${st.sent}, lost ${st.lost}, leaked ${st.leaked}`)}"/>`}\n    </testcase>`,
      );
    }
    for (const f of s.findings) {
      const element =
        f.severity === 'unmeasured'
          ? `<error message="${xml(f.message)}" type="unmeasured"/>`
          : `<failure message="${xml(f.message)}" type="${f.severity}"/>`;
      cases.push(
        `    <testcase classname="${xml(`prove.${s.id}`)}" name="${xml(f.message.slice(0, 80))}">\n      ${element}\n    </testcase>`,
      );
    }
    if (s.status === 'skipped') {
      cases.push(
        `    <testcase classname="${xml(`prove.${s.id}`)}" name="${xml(s.id)}">\n      <skipped message="${xml(s.reason ?? '')}"/>\n    </testcase>`,
      );
    } else if (s.status === 'error') {
      cases.push(
        `    <testcase classname="${xml(`prove.${s.id}`)}" name="${xml(s.id)}">\n      <error message="${xml(s.reason ?? '')}"/>\n    </testcase>`,
      );
    }
    suites.push(suite(`prove.${s.id}`, cases, s.durationMs));
  }
  const coverageCases = report.coverage.map((c) => {
    const failing = options.strict && c.strictProblems.length > 0;
    return `    <testcase classname="prove.coverage" name="${xml(c.id)}">\n      <properties>\n        ${property('requirement', c.id)}\n        ${property('level', c.level ?? 'none')}\n        ${property('safetyCritical', String(c.safetyCritical))}\n      </properties>${failing ? `\n      <failure message="${xml(c.strictProblems.join('; '))}"/>` : ''}\n    </testcase>`;
  });
  suites.push(suite('prove.coverage', coverageCases, 0));
  return `<?xml version="1.0" encoding="UTF-8"?>\n<testsuites name="${xml(`egressguard prove ${report.policy}`)}" time="${(report.durationMs / 1000).toFixed(3)}">\n${suites.join('\n')}\n</testsuites>\n`;
}

function suite(name: string, cases: readonly string[], ms: number): string {
  const failures = cases.filter((c) => c.includes('<failure')).length;
  const errors = cases.filter((c) => c.includes('<error')).length;
  const skipped = cases.filter((c) => c.includes('<skipped')).length;
  return `  <testsuite name="${xml(name)}" tests="${cases.length}" failures="${failures}" errors="${errors}" skipped="${skipped}" time="${(ms / 1000).toFixed(3)}">\n${cases.join('\n')}\n  </testsuite>`;
}

function property(name: string, value: string): string {
  return `<property name="${xml(name)}" value="${xml(value)}"/>`;
}

function seconds(ms: number): string {
  return `${(ms / 1000).toFixed(1)} s`;
}
