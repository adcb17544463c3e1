import { existsSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { registry, type Backend } from '../backends/index.js';
import { EgressguardError } from '../core/index.js';
import { readHostFacts, type HostFacts } from '../facts/index.js';
import { createHostView, evaluateProbes, lowerForHost, type ProbeResult } from '../ir/index.js';
import { formatIssue, hasErrors, loadPolicy, type Policy } from '../policy/index.js';
import { createRunner } from '../runner/index.js';
import { computeCoverage, type RequirementCoverage } from './coverage.js';
import { createHostControl, type CompiledPolicy, type HostControl } from './host-control.js';
import { captureLab } from './lab/capture-lab.js';
import { createLab, type Lab } from './lab/create-lab.js';
import { labPython } from './lab/lab-python.js';
import { deriveProbe, expandProbes, type SkippedProbe } from './lab-probes.js';
import { startLabServices } from './lab-services.js';
import { messageOf } from './measure-phase.js';
import { writePolicyVariant } from './policy-variant.js';
import { planProofLab } from './plan-proof-lab.js';
import { RestoreStack, type RestoreRecord } from './restore-stack.js';
import {
  runScenario,
  type ProofEnvironment,
  type Scenario,
  type ScenarioResult,
} from './scenario.js';
import { scenariosFor } from './scenarios/index.js';

/** Options of proveInLab. */
export interface ProveOptions {
  readonly policyFile: string;
  /** Host facts; default: facts.json beside the policy. */
  readonly factsFile?: string | undefined;
  /** The argv that runs this egressguard (`node bin/egressguard.js`): for `run`, `restore`… */
  readonly selfCommand: readonly string[];
  readonly version: string;
  /** Only these requirements' probes. */
  readonly only?: readonly string[] | undefined;
  /** Only these scenarios (the steady state always runs). */
  readonly scenarios?: readonly string[] | undefined;
  /** Applies of the reapply scenario; default 200. */
  readonly reapplies?: number | undefined;
  /** Packets per second of each flow while reapplying; default 150. */
  readonly rate?: number | undefined;
  /** Records every lab node's packets into `<captureDir>/<node>.pcap`. */
  readonly captureDir?: string | undefined;
  readonly progress?: ((line: string) => void) | undefined;
}

/** Tool versions and where the proof ran, for the evidence. */
export interface ProofVersions {
  readonly egressguard: string;
  /** The backend's tools and their versions. */
  readonly tools: Readonly<Record<string, string>>;
  readonly kernel: string;
  readonly iproute2: string;
  readonly python: string;
  readonly node: string;
}

/** Everything a proof measured: the evidence bundle's content. */
export interface ProofReport {
  readonly format: 'egressguard/proof/v1';
  readonly policy: string;
  readonly policyFile: string;
  readonly factsFile: string;
  readonly hash: string;
  /** The backend proven, and its layers as proofs name them. */
  readonly backend: string;
  readonly layers: readonly string[];
  readonly versions: ProofVersions;
  readonly lab: {
    readonly id: string;
    readonly namespaces: readonly string[];
    /** Facts interfaces no lab node stands for, with why (loopback, down, no address). */
    readonly leftOut: readonly string[];
    /** With --capture: every node's packets, one pcap file a node. */
    readonly captures?: readonly string[];
  };
  readonly startedAt: string;
  readonly durationMs: number;
  readonly l1: readonly {
    readonly requirement: string;
    readonly index: number;
    readonly verdict: string;
    readonly mismatches: readonly string[];
  }[];
  readonly probes: number;
  readonly skippedProbes: readonly SkippedProbe[];
  readonly scenarios: readonly ScenarioResult[];
  readonly coverage: readonly RequirementCoverage[];
  readonly restores: readonly RestoreRecord[];
  readonly resident: readonly { time: string; action: string; message: string }[];
  /** Every measurement passed, every restore verified. */
  readonly passed: boolean;
  /**
   * proven: every measurement passed; failed: enforcement failed somewhere (or the policy's own
   * probes, a restore or a scenario did); unmeasured: nothing failed, but the lab could not take
   * every measurement (see each scenario's unmeasured probes, flows and findings).
   */
  readonly outcome: 'proven' | 'failed' | 'unmeasured';
  /** --strict's reasons to fail, whether or not --strict was given. */
  readonly strictProblems: readonly string[];
}

const SIGNAL_EXIT: Readonly<Record<string, number>> = { SIGINT: 130, SIGTERM: 143 };

/**
 * `prove --lab`: builds a lab from the policy and its facts, applies with the real applier, runs
 * the real resident mode, then runs every scenario (steady state first) and judges every probe
 * with three oracles. The lab is torn down and the temporary state removed whatever happens,
 * also on SIGINT or SIGTERM, after every pending restore ran and was verified.
 */
export async function proveInLab(options: ProveOptions): Promise<ProofReport> {
  const started = performance.now();
  const startedAt = new Date().toISOString();
  const progress = options.progress ?? (() => undefined);
  const { policy, factsFile, facts } = loadInputs(options);
  const ir = lowerForHost(policy, facts);
  const view = createHostView(facts);
  const l1 = evaluateProbes(ir, view, policy.requirements);
  const { probes, skipped } = expandProbes(policy, ir, view, { only: options.only });
  const plan = planProofLab(ir, facts, probes);
  const backend = provableBackend(facts);
  const scenarios = selectScenarios(scenariosFor(backend), options.scenarios);

  const temp = mkdtempSync(join(tmpdir(), 'egressguard-prove-'));
  const restores = new RestoreStack();
  const controller = new AbortController();
  let lab: Lab | undefined;
  let host: ReturnType<typeof createHostControl> | undefined;
  const cleanup = async (): Promise<void> => {
    try {
      await lab?.destroy();
    } finally {
      await host?.stopResident().catch(() => undefined);
      rmSync(temp, { recursive: true, force: true });
    }
  };
  const onSignal = (signal: NodeJS.Signals): void => {
    if (controller.signal.aborted) return;
    controller.abort();
    process.stderr.write(
      `prove: ${signal}: running the pending restores and tearing the lab down\n`,
    );
    void cleanup()
      .catch((error: unknown) => {
        process.stderr.write(`prove: cleanup failed: ${messageOf(error)}\n`);
      })
      .finally(() => {
        const ran = restores.records.filter((r) => r.onSignal);
        process.stderr.write(
          `prove: interrupted; ${ran.length} restores ran (${ran.filter((r) => r.verified).length} verified), lab torn down\n`,
        );
        process.exit(SIGNAL_EXIT[signal] ?? 2);
      });
  };
  process.on('SIGINT', onSignal);
  process.on('SIGTERM', onSignal);

  try {
    const stateRoot = join(temp, 'state');
    const labFacts = join(temp, 'facts.json');
    writeFileSync(labFacts, `${JSON.stringify(facts, null, 2)}\n`);
    const fileB = writePolicyVariant(policy, options.policyFile, join(temp, 'policy-b'));
    const policyB = loadValid(fileB);

    progress(
      `building the lab for ${policy.name}: ${Object.keys(plan.topology.nodes).length} namespaces`,
    );
    lab = await createLab(plan.topology, { runner: createRunner({ guard: true }) });
    const theLab = lab;
    const captures =
      options.captureDir === undefined ? undefined : await captureLab(lab, options.captureDir);
    if (options.captureDir !== undefined) {
      progress(`capturing every lab node's packets into ${options.captureDir}`);
    }
    host = createHostControl({
      netns: lab.ns(plan.host),
      stateRoot,
      selfCommand: options.selfCommand,
      version: options.version,
      policyFile: options.policyFile,
      factsFile: labFacts,
      backend,
    });
    const theHost = host;
    // Torn down last: the resident stops only after every pending restore ran.
    lab.defer(() => theHost.stopResident());
    lab.defer(async () => {
      await restores.unwind({ onSignal: controller.signal.aborted });
    });
    await startLabServices(lab, plan);
    const policyA: CompiledPolicy = host.compile(ir, options.policyFile);
    const compiledB = host.compile(lowerForHost(policyB, facts), fileB);
    progress(
      `applying ${policy.name} (hash ${policyA.hash.slice(0, 12)}) and starting \`egressguard run\``,
    );
    await host.apply(policyA);
    await host.startResident();
    const versions = await readVersions(host, options.version);

    const env: ProofEnvironment = {
      lab,
      plan,
      host,
      probes,
      policyA,
      policyB: compiledB,
      restores,
      progress,
      signal: controller.signal,
      reapplies: options.reapplies ?? 200,
      rate: options.rate ?? 150,
      factsFile: labFacts,
      deriveProbe: (packet) => deriveProbe(ir, view, packet),
    };
    const results: ScenarioResult[] = [];
    for (const scenario of scenarios) {
      if (controller.signal.aborted) break;
      const result = await runScenario(env, scenario);
      results.push(result);
      progress(
        `${result.status === 'passed' ? '✓' : result.status === 'skipped' ? '-' : result.status === 'unmeasured' ? '?' : '✗'} ${scenario.id} ${result.status}${result.reason === null ? '' : `: ${result.reason}`} (${(result.durationMs / 1000).toFixed(1)} s)`,
      );
    }
    const resident = [...host.residentLog];
    const labInfo = {
      id: lab.id,
      namespaces: lab.nodes.map((n) => theLab.ns(n)),
      leftOut: plan.facts.skipped,
      ...(captures === undefined ? {} : { captures }),
    };
    await host.stopResident();
    await cleanup();
    lab = undefined;

    const coverage = computeCoverage({
      requirements: policy.requirements,
      l1,
      scenarios: results,
      only: options.only,
    });
    const strictProblems = coverage.flatMap((c) => c.strictProblems.map((p) => `${c.id}: ${p}`));
    const failed =
      results.some((r) => r.status === 'failed' || r.status === 'error') ||
      l1.some((r) => r.mismatches.length > 0) ||
      restores.records.some((r) => !r.verified);
    const outcome = failed
      ? 'failed'
      : results.some((r) => r.status === 'unmeasured')
        ? 'unmeasured'
        : 'proven';
    return {
      format: 'egressguard/proof/v1',
      policy: policy.name,
      policyFile: options.policyFile,
      factsFile,
      hash: policyA.hash,
      backend: backend.name,
      layers: backend.prove?.layers ?? [],
      versions,
      lab: labInfo,
      startedAt,
      durationMs: Math.round(performance.now() - started),
      l1: l1.map(summariseL1),
      probes: probes.length,
      skippedProbes: skipped,
      scenarios: results,
      coverage,
      restores: restores.records,
      resident,
      passed: outcome === 'proven',
      outcome,
      strictProblems,
    };
  } finally {
    await cleanup().catch(() => undefined);
    process.off('SIGINT', onSignal);
    process.off('SIGTERM', onSignal);
  }
}

function summariseL1(r: ProbeResult): ProofReport['l1'][number] {
  return {
    requirement: r.requirement,
    index: r.index,
    verdict: r.explanation.verdict,
    mismatches: r.mismatches,
  };
}

function loadInputs(options: ProveOptions): {
  policy: Policy;
  factsFile: string;
  facts: HostFacts;
} {
  const policy = loadValid(options.policyFile);
  const factsFile = options.factsFile ?? join(dirname(options.policyFile), 'facts.json');
  if (!existsSync(factsFile)) {
    throw new EgressguardError(
      'usage',
      `Cannot find host facts for policy "${options.policyFile}"`,
      {
        hint: 'pass --facts FILE (`egressguard facts --json > facts.json` on the host); the lab is built from them',
      },
    );
  }
  return { policy, factsFile, facts: readHostFacts(factsFile) };
}

function loadValid(file: string): Policy {
  const parsed = loadPolicy(file);
  if (parsed.policy === undefined || hasErrors(parsed.issues)) {
    const errors = parsed.issues.filter((i) => i.severity === 'error');
    throw new EgressguardError(
      'usage',
      `Cannot prove policy "${file}": it has ${errors.length} error${errors.length === 1 ? '' : 's'}:\n${errors.map(formatIssue).join('\n')}`,
      { hint: `run \`egressguard check ${file}\` for every problem` },
    );
  }
  return parsed.policy;
}

function selectScenarios(
  all: readonly Scenario[],
  ids: readonly string[] | undefined,
): readonly Scenario[] {
  if (ids === undefined) return all;
  const unknown = ids.filter((id) => !all.some((s) => s.id === id));
  if (unknown.length > 0) {
    throw new EgressguardError(
      'usage',
      `Cannot run scenario${unknown.length === 1 ? '' : 's'} ${unknown.map((u) => `"${u}"`).join(', ')}: no such scenario`,
      { hint: `choose from ${all.map((s) => s.id).join(', ')}` },
    );
  }
  return all.filter((s, i) => i === 0 || ids.includes(s.id));
}

/** The backend the facts choose, if a lab here can run its enforcer and measure it. */
function provableBackend(facts: HostFacts): Backend {
  const backend = registry.forFacts(facts);
  if (backend.prove === undefined || !backend.capabilities.runsHere) {
    throw new EgressguardError(
      'unsupported',
      `Cannot prove on ${backend.name} in a lab here: its enforcer does not run on this machine`,
      {
        hint: 'run its self-test on a host of its own (`egressguard selftest`), or prove the policy with Linux facts',
      },
    );
  }
  return backend;
}

async function readVersions(host: HostControl, version: string): Promise<ProofVersions> {
  const read = async (argv: readonly string[]): Promise<string> => {
    const result = await host.runner.run(argv, { effect: 'read', allowFailure: true });
    return (result.stdout || result.stderr).trim().split('\n')[0] ?? '';
  };
  const [tools, kernel, iproute2, python] = await Promise.all([
    host.backend.readVersions?.(host.runner) ?? {},
    read(['uname', '-r']),
    read(['ip', '-V']),
    labPython(host.runner).then((python) => read([python, '--version'])),
  ]);
  return { egressguard: version, tools, kernel, iproute2, python, node: process.version };
}
