import type { HostControl, CompiledPolicy } from './host-control.js';
import type { Lab } from './lab/create-lab.js';
import { createNonce } from './lab/create-nonce.js';
import type { DerivedPacket, LabProbe } from './lab-probes.js';
import {
  messageOf,
  observeFarSides,
  runPhase,
  type PhaseRun,
  type PhaseSpec,
  type ProofLayer,
  type SideObservation,
} from './measure-phase.js';
import { judgePhase, type MeasurementOutcome, type ProbeJudgement } from './oracles.js';
import type { FarSide, ProofLab } from './plan-proof-lab.js';
import type { RestoreRecord, RestoreStack } from './restore-stack.js';
import {
  startStream,
  type RunningStream,
  type StreamResult,
  type StreamSpec,
} from './traffic-stream.js';

/** A flow of a stream and what its packets must do: reach `target`, or no far side at all. */
export type Flow = Omit<StreamSpec, 'tag'> & {
  readonly expect: 'allow' | 'deny';
  readonly target?: FarSide | undefined;
  /** Only where it must not go is judged: beyond any far side but `target` (none lost). */
  readonly confined?: boolean;
};

/**
 * Something a scenario found beyond its probes' verdicts: a failure of what is proven; a leak,
 * class traffic that leaves by a path outside the policy (the policy's rules hold, but something
 * they do not govern, such as a host service, sends it on); or a measurement the lab could not
 * take as it must (unmeasured: not a verdict on the enforcer).
 */
export interface Finding {
  readonly severity: 'failure' | 'leak' | 'unmeasured';
  readonly message: string;
}

/** Everything one proof run shares with its scenarios. */
export interface ProofEnvironment {
  readonly lab: Lab;
  readonly plan: ProofLab;
  readonly host: HostControl;
  readonly probes: readonly LabProbe[];
  /**
   * The policy as applied, and a variant that differs in its name and in an address of each
   * class's sources that no probe uses (a real replace, with new class sets).
   */
  readonly policyA: CompiledPolicy;
  readonly policyB: CompiledPolicy;
  readonly restores: RestoreStack;
  readonly progress: (line: string) => void;
  readonly signal: AbortSignal;
  /** Reapplies of the reapply scenario (200 by default) and its packets per second per flow. */
  readonly reapplies: number;
  readonly rate: number;
  /** The facts file the CLI children read. */
  readonly factsFile: string;
  /** A probe the policy does not state, with the reference evaluator's expectation. */
  deriveProbe(packet: DerivedPacket): LabProbe | undefined;
}

/** What a scenario's code gets: the environment plus ways to measure and record. */
export interface ScenarioContext extends ProofEnvironment {
  /** Runs one phase of probes (all of `probes` by default, filtered by the phase). */
  measure(spec: PhaseSpec, probes?: readonly LabProbe[]): Promise<PhaseRun>;
  /** Starts nonce'd traffic from a node that the scenario's observers count and judge. */
  stream(node: string, flows: readonly Flow[], rate: number): RunningStream;
  metric(name: string, value: number | string | boolean): void;
  note(text: string): void;
  finding(severity: Finding['severity'], message: string): void;
  /** Throws when `prove` was interrupted, so the scenario ends and restores run. */
  checkAborted(): void;
  /** The scenario's nonce (observers count it; streams and probes append their tags). */
  readonly nonce: string;
}

/** One scenario: a steady state or a fault, with its restore registered before it starts. */
export interface Scenario {
  readonly id: string;
  readonly title: string;
  /** A fault (its passing measurements are L3) or the steady state (L2). */
  readonly fault: boolean;
  /** The one layer this scenario proves alone. */
  readonly layer?: ProofLayer;
  /** Why it cannot run on this policy, or undefined. */
  skip?(env: ProofEnvironment): string | undefined;
  run(context: ScenarioContext): Promise<void>;
}

/** A stream's outcome, judged by the far sides' counts. */
export interface StreamJudgement {
  readonly node: string;
  readonly tag: string;
  readonly what: string;
  readonly expect: 'allow' | 'deny' | 'confined';
  /** The far side allowed packets must reach (allowed streams only). */
  readonly target: string | null;
  readonly sent: number;
  readonly arrived: number;
  readonly leaked: number;
  /** Packets of this stream each far side saw, by lab node (sides that saw none left out). */
  readonly seenBy: Readonly<Record<string, number>>;
  readonly lost: number;
  readonly elapsedMs: number;
  readonly ratePerSecond: number;
  readonly minPerSecond: number | null;
  readonly passed: boolean;
  readonly outcome: MeasurementOutcome;
  /** Why it could not be judged (outcome unmeasured): an observer not trusted, nothing sent. */
  readonly unmeasured: string | null;
}

/** A stream a scenario started, with what its packets must do. */
interface TrackedStream {
  readonly running: RunningStream;
  readonly expectations: ReadonlyMap<
    string,
    { what: string; expect: 'allow' | 'deny'; target: FarSide | undefined; confined: boolean }
  >;
}

/** One scenario's outcome. */
export interface ScenarioResult {
  readonly id: string;
  readonly title: string;
  readonly fault: boolean;
  readonly layer: ProofLayer | null;
  /** failed: enforcement failed somewhere; unmeasured: nothing failed, but not all was measured. */
  readonly status: 'passed' | 'failed' | 'unmeasured' | 'skipped' | 'error';
  readonly reason: string | null;
  readonly nonce: string | null;
  readonly judgements: readonly ProbeJudgement[];
  readonly skippedProbes: readonly { readonly key: string; readonly reason: string }[];
  readonly sides: readonly {
    readonly node: string;
    readonly role: string;
    readonly trusted: boolean;
    readonly error: string | null;
    readonly packets: number;
  }[];
  readonly streams: readonly StreamJudgement[];
  readonly restores: readonly RestoreRecord[];
  readonly findings: readonly Finding[];
  readonly metrics: Readonly<Record<string, number | string | boolean>>;
  readonly notes: readonly string[];
  readonly counters: readonly {
    readonly phase: string;
    readonly delta: Readonly<Record<string, number>>;
  }[];
  readonly durationMs: number;
}

/**
 * Runs one scenario: observers beyond every far side armed first, then the scenario (which
 * registers each restore before its fault), then every restore that is still pending, verified,
 * whatever happened; then the observers close and every probe is judged by the three oracles.
 */
export async function runScenario(
  env: ProofEnvironment,
  scenario: Scenario,
): Promise<ScenarioResult> {
  const started = performance.now();
  const base = {
    id: scenario.id,
    title: scenario.title,
    fault: scenario.fault,
    layer: scenario.layer ?? null,
  };
  const skip = scenario.skip?.(env);
  if (skip !== undefined) {
    return {
      ...base,
      status: 'skipped',
      reason: skip,
      nonce: null,
      judgements: [],
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
  const nonce = createNonce();
  const phases: PhaseRun[] = [];
  const streams: TrackedStream[] = [];
  const findings: Finding[] = [];
  const metrics: Record<string, number | string | boolean> = {};
  const notes: string[] = [];
  let phaseIndex = 0;
  let streamIndex = 0;
  let error: string | null = null;
  env.progress(`${scenario.id}: ${scenario.title}`);
  const observers = await observeFarSides(env.lab, env.plan, nonce);
  const context: ScenarioContext = {
    ...env,
    nonce,
    async measure(spec, probes) {
      context.checkAborted();
      const phase = await runPhase({
        lab: env.lab,
        plan: env.plan,
        host: env.host,
        scenario: scenario.id,
        nonce,
        tagPrefix: `p${phaseIndex++}`,
        probes: probes ?? env.probes,
        spec,
      });
      phases.push(phase);
      env.progress(
        `  ${scenario.id}/${spec.name}: ${phase.runs.length} probes in ${phase.durationMs} ms`,
      );
      return phase;
    },
    stream(node, flows, rate) {
      const tagged = flows.map((f) => ({ ...f, tag: `s${streamIndex++}` }));
      const running = startStream(env.lab, node, { nonce, rate, specs: tagged });
      const expectations = new Map(
        tagged.map(
          (f) =>
            [
              f.tag,
              {
                what: `${f.kind} ${f.src} > ${f.dst}${f.dport === undefined ? '' : `/${f.dport}`}`,
                expect: f.expect,
                target: f.target,
                confined: f.confined === true,
              },
            ] as const,
        ),
      );
      streams.push({ running, expectations });
      return running;
    },
    metric(name, value) {
      metrics[name] = value;
    },
    note(text) {
      notes.push(text);
    },
    finding(severity, message) {
      findings.push({ severity, message });
    },
    checkAborted() {
      if (env.signal.aborted) throw new Error('prove was interrupted');
    },
  };

  try {
    await scenario.run(context);
  } catch (caught) {
    error = messageOf(caught);
  }
  // The streams stop before the restores run: a stream's expectation is the scenario's state
  // (deny with the tunnel down), and packets sent once the tunnel is back rightly go through it.
  // Unwinding first counted them as leaks beyond the tunnel (1-4 per flow at load 5-7).
  const streamResults: {
    tracked: TrackedStream;
    result: StreamResult | undefined;
    error?: string;
  }[] = [];
  for (const tracked of streams) {
    try {
      streamResults.push({ tracked, result: await tracked.running.stop() });
    } catch (stopError) {
      streamResults.push({ tracked, result: undefined, error: messageOf(stopError) });
    }
  }
  const restores = await env.restores.unwind({ onSignal: env.signal.aborted });
  const sides = await observers.stop();
  const judgements = phases.flatMap((phase) =>
    judgePhase(phase, sides, env.plan, env.host.backend.layer),
  );
  const streamJudgements = streamResults.flatMap(({ tracked, result, error: streamError }) => {
    if (result === undefined) {
      // The lab's own tool failed: nothing about enforcement was learnt from this stream.
      findings.push({
        severity: 'unmeasured',
        message: `Could not measure a traffic stream: ${streamError ?? ''}`,
      });
      return [];
    }
    return judgeStreams(result, tracked, sides);
  });
  for (const j of judgements) {
    // Sent on through the class's own tunnel is the class's path; anywhere else, a leak.
    const beyond = j.counts.filter(
      (c) => c.raw + c.client > 0 && !(j.viaTunnel && c.role === 'tunnel'),
    );
    if (j.forwardedByHost > 0 && beyond.length > 0) {
      findings.push({
        severity: 'leak',
        message: `class ${j.className} leaks by a path outside the policy: ${j.forwardedByHost} nonce'd packets of "${j.key}" were sent on by a service of the host and seen beyond ${beyond
          .map((c) => `the ${c.role} (from ${c.sources.join(', ')})`)
          .join(
            ', ',
          )}: host-originated traffic no class selects, which neither the kill switch nor steering sees; make the service leave by the tunnel only (bind it to the tunnel, or a host class for its source with a kill switch)`,
      });
    }
  }
  for (const r of restores) {
    if (!r.verified) {
      findings.push({
        severity: 'failure',
        message: `Restore "${r.what}" ${r.ok ? 'ran but is not verified' : 'failed'}: ${r.error ?? r.problem ?? ''}`,
      });
    }
  }
  const measured = [...judgements, ...streamJudgements];
  const failed =
    measured.some((m) => m.outcome === 'failed') ||
    findings.some((f) => f.severity === 'failure' || f.severity === 'leak');
  return {
    ...base,
    status:
      error !== null
        ? 'error'
        : failed
          ? 'failed'
          : measured.some((m) => m.outcome === 'unmeasured') ||
              findings.some((f) => f.severity === 'unmeasured')
            ? 'unmeasured'
            : 'passed',
    reason: error,
    nonce,
    judgements,
    skippedProbes: phases.flatMap((p) =>
      p.skipped.map((s) => ({ key: `${p.spec.name}: ${s.probe.key}`, reason: s.reason })),
    ),
    sides: sides.map((s) => ({
      node: s.side.node,
      role: s.side.role,
      trusted: s.trusted,
      error: s.error,
      packets: s.packets.length,
    })),
    streams: streamJudgements,
    restores,
    findings,
    metrics,
    notes,
    counters: phases.map((p) => ({ phase: p.spec.name, delta: p.counters.delta })),
    durationMs: Math.round(performance.now() - started),
  };
}

function judgeStreams(
  result: StreamResult,
  tracked: TrackedStream,
  sides: readonly SideObservation[],
): StreamJudgement[] {
  return result.results.map((r) => {
    const expectation = tracked.expectations.get(r.tag);
    const expect = expectation?.confined === true ? 'confined' : (expectation?.expect ?? 'deny');
    const target = expectation?.target;
    const byNode = sides.map((s) => ({
      node: s.side.node,
      trusted: s.trusted,
      count: s.packets.filter((p) => p.tag === r.tag).length,
    }));
    const arrived =
      target === undefined ? 0 : (byNode.find((b) => b.node === target.node)?.count ?? 0);
    const elsewhere = byNode
      .filter((b) => b.node !== target?.node)
      .reduce((sum, b) => sum + b.count, 0);
    const untrusted = sides.filter((s) => !s.trusted);
    const leaked = expect === 'deny' ? byNode.reduce((sum, b) => sum + b.count, 0) : elsewhere;
    // A send the node's own stack refused never left it: nothing leaked, and lost if allowed.
    const lost = expect === 'allow' ? r.sent + r.refused - arrived : 0;
    // A leak seen is a leak, and a loss the target side counted is a loss, whatever another side
    // could not count; anything short of that from a side that lost packets, or from a stream
    // that could not send, is not a measurement.
    const targetTrusted = sides.find((s) => s.side.node === target?.node)?.trusted ?? true;
    const unmeasured =
      leaked > 0 || (lost > 0 && targetTrusted && r.failed === 0)
        ? null
        : r.sent + r.refused === 0 || r.failed > 0
          ? `the stream could not send: ${r.failed} of ${r.sent + r.failed} failed${r.error === null ? '' : ` (${r.error})`}`
          : untrusted.length > 0
            ? `cannot count beyond ${untrusted.map((s) => `${s.side.role} (${s.side.node}): ${s.error ?? 'not armed'}`).join('; ')}`
            : null;
    const passed = unmeasured === null && leaked === 0 && lost === 0;
    const ratePerSecond = result.elapsedMs > 0 ? (r.sent * 1000) / result.elapsedMs : 0;
    return {
      node: result.node,
      tag: r.tag,
      what: expectation?.what ?? r.tag,
      expect,
      target: target?.node ?? null,
      sent: r.sent,
      arrived,
      leaked,
      seenBy: Object.fromEntries(byNode.filter((b) => b.count > 0).map((b) => [b.node, b.count])),
      lost,
      elapsedMs: result.elapsedMs,
      ratePerSecond: Math.round(ratePerSecond * 10) / 10,
      minPerSecond: result.minPerSecond,
      passed,
      outcome: passed ? 'passed' : unmeasured === null ? 'failed' : 'unmeasured',
      unmeasured,
    };
  });
}
