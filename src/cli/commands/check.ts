import type { Command } from 'commander';
import { formatAddress } from '../../core/index.js';
import type { CommandContext } from '../command-context.js';
import {
  createHostView,
  evaluatePodProbes,
  findMasqueradeWithoutAddress,
  findMissingIngress,
  evaluateProbes,
  lowerForHost,
  type PodProbeResult,
  type ProbeResult,
} from '../../ir/index.js';
import {
  formatIssue,
  hasErrors,
  loadPolicy,
  unreadablePolicy,
  type PolicyIssue,
} from '../../policy/index.js';
import { EXIT } from '../exit-codes.js';
import { findFactsFile } from '../../host/index.js';
import { readHostFacts } from '../../facts/index.js';
import { paint, printJson, printLine, type Output } from '../output.js';

interface FileReport {
  readonly file: string;
  readonly valid: boolean;
  readonly issues: readonly PolicyIssue[];
  readonly facts: string | null;
  readonly probes: readonly {
    requirement: string;
    probe: string;
    expect: string;
    verdict: string;
    decidedBy: string | null;
    agrees: boolean;
  }[];
  readonly requirements: readonly { id: string; safetyCritical: boolean; level: 'L1' | null }[];
}

/** `check POLICY…`: validates, then runs each probe through the reference evaluator. */
export function runCheck(
  files: readonly string[],
  options: { facts?: string | undefined; json?: boolean | undefined; strict?: boolean | undefined },
  output: Output,
): number {
  const reports = files.map((file) => checkFile(file, options.facts, options.strict === true));
  if (options.json === true) {
    printJson(output, { valid: reports.every((r) => r.valid), files: reports });
  } else {
    for (const report of reports) printReport(report, output);
  }
  if (reports.some((r) => unreadablePolicy(r.issues) !== undefined)) return EXIT.error;
  return reports.every((r) => r.valid) ? EXIT.ok : EXIT.failed;
}

function checkFile(file: string, factsOption: string | undefined, strict: boolean): FileReport {
  const parsed = loadPolicy(file);
  const issues = [...parsed.issues];
  const policy = parsed.policy;
  const factsFile = policy === undefined ? undefined : findFactsFile(file, factsOption);
  let results: ProbeResult[] = [];
  let podResults: PodProbeResult[] = [];
  if (policy !== undefined && factsFile !== undefined) {
    const facts = readHostFacts(factsFile);
    const ir = lowerForHost(policy, facts);
    for (const missing of findMissingIngress(
      ir,
      facts.interfaces.map((i) => i.name),
    )) {
      const index =
        policy.classes.find((c) => c.name === missing.class)?.ingress.indexOf(missing.interface) ??
        0;
      issues.push(
        parsed.report(
          ['classes', missing.class, 'ingress', index],
          'ingress-not-on-host',
          `Ingress "${missing.interface}" of class "${missing.class}" is not an interface of host "${facts.hostname}" in ${factsFile}${missing.suggestion}: this class filters nothing there, and workloads behind the interface they really use leave unfiltered; fix the name, or keep it if the interface is created later (then apply needs --allow-missing-ingress)`,
        ),
      );
    }
    const host = createHostView(facts);
    for (const found of findMasqueradeWithoutAddress(ir, host.sourceCandidates)) {
      const instead = found.fallbacks
        .map((s) => `${formatAddress(6, s.address.start)} of "${s.interface}"`)
        .join(', ');
      issues.push(
        parsed.report(
          ['classes', found.class, 'nat'],
          'masquerade-without-address',
          `Class "${found.class}" masquerades its IPv6 out of tunnel "${found.tunnel}", which has no IPv6 address of its own in ${factsFile}: the kernel gives the packets another source of the host (${instead === '' ? 'none: it drops them' : `by RFC 6724 source selection, one of ${instead}`}), which the tunnel's far end did not assign, so no reply comes back; give "${found.tunnel}" an IPv6 address, or leave IPv6 out of the class's sources (its IPv6 is then blocked)`,
        ),
      );
    }
    results = evaluateProbes(ir, host, policy.requirements);
    podResults = evaluatePodProbes(ir, host, policy.requirements);
    for (const result of podResults) {
      if (result.mismatches.length === 0) continue;
      const index = policy.requirements.findIndex((r) => r.id === result.requirement);
      const { probe } = result;
      issues.push(
        parsed.report(
          ['requirements', index, 'probes', probe.index],
          'probe-mismatch',
          `Probe "${probe.id}" (a pod of class "${probe.pod}" → ${probe.to} ${String(probe.proto)}${probe.port === undefined ? '' : `/${probe.port}`}, tunnel ${probe.tunnel}) disagrees with the policy: ${result.mismatches.join('; ')}; fix the rules or the probe's expectation`,
        ),
      );
    }
    for (const result of results) {
      if (result.mismatches.length === 0) continue;
      const index = policy.requirements.findIndex((r) => r.id === result.requirement);
      issues.push(
        parsed.report(
          ['requirements', index, 'probes', result.index],
          'probe-mismatch',
          `Probe "${result.probe.id}" (${result.probe.from} → ${result.probe.to} ${String(result.probe.proto)}${result.probe.port === undefined ? '' : `/${result.probe.port}`}, tunnel ${result.probe.tunnel}) disagrees with the policy: ${result.mismatches.join('; ')}; fix the rules or the probe's expectation`,
        ),
      );
    }
  }
  const requirements = (policy?.requirements ?? []).map((r) => {
    const own = [...results, ...podResults].filter((p) => p.requirement === r.id);
    const proven = own.length > 0 && own.every((p) => p.mismatches.length === 0);
    return { id: r.id, safetyCritical: r.safetyCritical, level: proven ? ('L1' as const) : null };
  });
  return {
    file,
    valid: !hasErrors(issues) && !(strict && issues.length > 0),
    issues,
    facts: factsFile ?? null,
    probes: [...results, ...podResults].map((r) => ({
      requirement: r.requirement,
      probe: r.probe.id,
      expect: r.probe.expect,
      verdict: r.explanation.verdict,
      decidedBy: r.explanation.decidedBy.id,
      agrees: r.mismatches.length === 0,
    })),
    requirements,
  };
}

function printReport(report: FileReport, output: Output): void {
  for (const issue of report.issues) {
    const line = formatIssue(issue);
    printLine(
      output,
      issue.severity === 'error' ? paint(output, 'red', line) : paint(output, 'yellow', line),
    );
  }
  const errors = report.issues.filter((i) => i.severity === 'error').length;
  const warnings = report.issues.length - errors;
  const counts = `${errors} error${errors === 1 ? '' : 's'}, ${warnings} warning${warnings === 1 ? '' : 's'}`;
  if (!report.valid) {
    // A policy that cannot be read is not invalid: nothing of it was seen.
    const verdict =
      unreadablePolicy(report.issues) !== undefined
        ? 'cannot be read'
        : errors === 0
          ? 'invalid under --strict, which fails on warnings'
          : 'invalid';
    printLine(output, paint(output, 'red', `✗ ${report.file}: ${verdict} (${counts})`));
    return;
  }
  const agreeing = report.probes.filter((p) => p.agrees).length;
  const probeText =
    report.facts === null
      ? 'probes not evaluated: no facts.json beside the policy (pass --facts FILE)'
      : `${agreeing}/${report.probes.length} probes agree with the evaluator (facts: ${report.facts})`;
  const levels = report.requirements.filter((r) => r.level === 'L1').length;
  printLine(
    output,
    paint(
      output,
      'green',
      `✓ ${report.file}: valid (${counts}); ${probeText}; ${levels}/${report.requirements.length} requirements at L1`,
    ),
  );
}

/** Registers `check`. */
export function registerCheck(program: Command, ctx: CommandContext): void {
  program
    .command('check')
    .description('Validate policies and evaluate their probes with the reference evaluator')
    .argument('<policy...>', 'policy files (YAML)')
    .option('--facts <file>', 'host facts (default: facts.json beside each policy)')
    .option('--json', 'print the issues and probe results as JSON')
    .option('--strict', 'fail (exit 1) on warnings too')
    .addHelpText(
      'after',
      '\nExample:\n  egressguard check testdata/policies/valid/linux-vpn-gateway/policy.yaml',
    )
    .action((files: string[], opts: { facts?: string; json?: boolean; strict?: boolean }) => {
      ctx.setExit(runCheck(files, opts, ctx.output));
    });
}
