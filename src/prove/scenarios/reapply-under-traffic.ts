import { parseAddress } from '../../core/index.js';
import type { LabProbe } from '../lab-probes.js';
import type { Flow, Scenario, ScenarioContext } from '../scenario.js';
import type { RunningStream } from '../traffic-stream.js';

// Sources no class owns (RFC 5737), for the denied flows: a spoofing workload.
const SPOOF_CANDIDATES = ['192.0.2.99', '198.51.100.99', '203.0.113.99'];
/** After the last reapply, traffic keeps flowing this long before the streams stop. */
const SETTLE_MS = 300;
/** The must-show floor: nonce'd packets per second per protocol and class. */
export const MIN_RATE = 100;

/**
 * The table replaced again and again (the policy alternating with a copy that differs in its
 * name and its class sets, so each apply is a real atomic replace that switches sets) while every class sends TCP, UDP and ICMP
 * at `rate` packets per second each, and a spoofing workload of each class sends what
 * anti-spoofing must drop: not one allowed packet lost, not one denied packet beyond a far side.
 */
export const reapplyUnderTraffic: Scenario = {
  id: 'reapply-under-traffic',
  title: 'reapply under continuous traffic',
  fault: true,
  skip: (env) =>
    flowsOf(env.probes, env).size === 0 ? 'no class has an allowed probe to a far side' : undefined,
  async run(ctx) {
    const streams: RunningStream[] = [];
    for (const [node, flows] of flowsOf(ctx.probes, ctx)) {
      streams.push(ctx.stream(node, flows, ctx.rate));
    }
    // The reapplies start once every stream sends, however long starting takes here.
    await Promise.all(streams.map((s) => s.sending()));
    const durations: number[] = [];
    const steps = new Map<string, number[]>();
    let changed = 0;
    const started = performance.now();
    for (let i = 0; i < ctx.reapplies; i++) {
      ctx.checkAborted();
      // Odd applies load the renamed copy, even ones the policy: the last one is the policy.
      const policy = (ctx.reapplies - i) % 2 === 0 ? ctx.policyB : ctx.policyA;
      const t0 = performance.now();
      const report = await ctx.host.apply(policy);
      durations.push(performance.now() - t0);
      for (const [step, ms] of Object.entries(report.timings)) {
        steps.set(step, [...(steps.get(step) ?? []), ms]);
      }
      if (report.changed) changed++;
      if ((i + 1) % 50 === 0) ctx.progress(`  reapply ${i + 1}/${ctx.reapplies}`);
    }
    const totalMs = performance.now() - started;
    await sleep(SETTLE_MS);
    const results = await Promise.all(streams.map((s) => s.stop()));
    durations.sort((a, b) => a - b);
    ctx.metric('reapplies', ctx.reapplies);
    ctx.metric('reappliesChanged', changed);
    ctx.metric('reapplyTotalMs', Math.round(totalMs));
    ctx.metric('reapplyMedianMs', Math.round(durations[Math.floor(durations.length / 2)] ?? 0));
    ctx.metric('reapplyMaxMs', Math.round(durations[durations.length - 1] ?? 0));
    // Where a reapply spends its time: the median of each step over the applies that ran it.
    for (const [step, list] of steps) {
      list.sort((a, b) => a - b);
      ctx.metric(
        `step ${step} medianMs`,
        Math.round((list[Math.floor(list.length / 2)] ?? 0) * 10) / 10,
      );
      ctx.metric(`step ${step} applies`, list.length);
    }
    for (const result of results) {
      // The traffic too short or too thin to cover every reapply: a gap the lab left (a busy
      // machine starves the senders), not a verdict on the enforcer.
      if (result.elapsedMs < totalMs) {
        ctx.finding(
          'unmeasured',
          `The traffic of node "${result.node}" ran ${result.elapsedMs} ms, shorter than the ${Math.round(totalMs)} ms of reapplies`,
        );
      }
      if (result.minPerSecond !== null && result.minPerSecond < MIN_RATE) {
        ctx.finding(
          'unmeasured',
          `Node "${result.node}" sent only ${result.minPerSecond} packets per flow in its slowest second (at least ${MIN_RATE} are required)`,
        );
      }
    }
    if (changed < ctx.reapplies) {
      ctx.note(
        `${ctx.reapplies - changed} of ${ctx.reapplies} applies found the host already converged (the resident had repaired to that generation)`,
      );
    }
  },
};

/**
 * Per workload node: for each class one allowed probe to a far side (the policy's own first),
 * as TCP, UDP and ICMP flows that must all arrive there; and for each class arriving on an
 * interface, the same flows from a spoofed source, which must arrive nowhere.
 */
function flowsOf(
  probes: readonly LabProbe[],
  ctx: Pick<ScenarioContext, 'plan'>,
): Map<string, Flow[]> {
  const flows = new Map<string, Flow[]>();
  const classes = [...new Set(probes.map((p) => p.className))];
  for (const className of classes) {
    const candidates = probes
      .filter(
        (p) =>
          p.className === className &&
          p.state === 'up' &&
          p.expect.verdict === 'allow' &&
          p.expect.via !== null &&
          ctx.plan.farSideOf(p.expect.via) !== undefined &&
          p.family === 4,
      )
      .sort((a, b) => Number(a.derived) - Number(b.derived));
    const probe = candidates[0];
    if (probe === undefined) continue;
    const target = probe.expect.via === null ? undefined : ctx.plan.farSideOf(probe.expect.via);
    const node = ctx.plan.nodeOf(probe);
    const list = flows.get(node) ?? [];
    const spoof = probe.ingress === undefined ? undefined : spoofSource(probes);
    for (const kind of ['tcp', 'udp', 'icmp'] as const) {
      if (kind !== 'icmp' && probe.port === undefined) continue;
      const dport = kind === 'icmp' ? undefined : probe.port;
      list.push({ kind, src: probe.from, dst: probe.to, dport, expect: 'allow', target });
      if (spoof !== undefined) {
        list.push({ kind, src: spoof, dst: probe.to, dport, expect: 'deny' });
      }
    }
    flows.set(node, list);
  }
  return flows;
}

function spoofSource(probes: readonly LabProbe[]): string | undefined {
  const used = new Set(probes.flatMap((p) => [p.from, p.to]));
  return SPOOF_CANDIDATES.find((a) => !used.has(a) && parseAddress(a) !== undefined);
}

function sleep(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms));
}
