import { existsSync } from 'node:fs';
import type { Command } from 'commander';
import type { CommandContext } from '../command-context.js';
import {
  registry,
  type DoctorFinding,
  type DoctorReport,
  type DoctorSeverity,
} from '../../backends/index.js';
import { EgressguardError, isEgressguardError } from '../../core/index.js';
import { gatherFacts } from '../../facts/index.js';
import { bindHost, lowerPolicy, type HostIR, type PolicyIR } from '../../ir/index.js';
import { backendOf, requirePolicy } from '../../host/index.js';
import { EXIT } from '../exit-codes.js';
import { paint, printJson, printLine, printTable, type Output } from '../output.js';
import { addTargetOptions, targetOf, type TargetOptions } from '../target-options.js';

export interface DoctorOptions extends TargetOptions {
  readonly json?: boolean | undefined;
  readonly k8s?: boolean | undefined;
  readonly kubeconfig?: string | undefined;
}

/** `doctor --k8s`: what must hold on the cluster, read from it when credentials are given. */
async function runClusterDoctor(options: DoctorOptions, output: Output): Promise<number> {
  if (options.kubeconfig !== undefined && !existsSync(options.kubeconfig)) {
    throw new EgressguardError(
      'usage',
      `Cannot read --kubeconfig "${options.kubeconfig}": no such file`,
      { hint: 'give the path of a kubeconfig file, or leave it out for the checklist alone' },
    );
  }
  const report = await registry.cluster().diagnose({ credentials: options.kubeconfig });
  if (options.json === true) printJson(output, report);
  else printReport(output, report);
  return report.summary.errors > 0 ? EXIT.failed : EXIT.ok;
}

/** `doctor [POLICY]`: what on this host can undo, bypass or collide with egressguard. */
export async function runDoctor(
  file: string | undefined,
  options: DoctorOptions,
  output: Output,
): Promise<number> {
  if (options.k8s === true) {
    if (file !== undefined) {
      throw new EgressguardError('usage', `Cannot check policy "${file}" with --k8s`, {
        hint: 'run `egressguard doctor --k8s` for the cluster and `egressguard doctor POLICY` on the gateway node',
      });
    }
    return runClusterDoctor(options, output);
  }
  if (options.kubeconfig !== undefined) {
    throw new EgressguardError('usage', 'Cannot use --kubeconfig without --k8s', {
      hint: 'add --k8s to check the cluster',
    });
  }
  const policy: PolicyIR | undefined =
    file === undefined ? undefined : lowerPolicy(requirePolicy(file).policy);
  const target = targetOf(options);
  const backend = backendOf(target);
  const doctor = backend.doctor;
  if (doctor === undefined) {
    throw new EgressguardError('unsupported', `Backend "${backend.name}" has no doctor`, {
      hint: 'run `egressguard status` for what egressguard itself applied',
    });
  }
  const os = target.registry.osOf(backend);
  const facts = await gatherFacts(target.runner, {
    ...(backend.readVersions === undefined ? {} : { readVersions: backend.readVersions }),
    // The backend's OS: pf's host is a Mac (its tools modelled, where this is not one).
    ...(os === undefined ? {} : { os }),
  });
  let ir: HostIR | undefined;
  let bindProblem: string | undefined;
  if (policy !== undefined) {
    try {
      ir = bindHost(policy, facts);
    } catch (error) {
      if (!isEgressguardError(error)) throw error;
      bindProblem = error.message;
    }
  }
  const report = await doctor.diagnose({
    runner: target.runner,
    options: target.options,
    facts,
    policy,
    ir,
    bindProblem,
    wholeHost: target.netns === undefined,
  });
  if (options.json === true) printJson(output, report);
  else printReport(output, report);
  return report.summary.errors > 0 ? EXIT.failed : EXIT.ok;
}

function printReport(output: Output, report: DoctorReport): void {
  const mark: Record<DoctorSeverity, string> = {
    error: paint(output, 'red', 'error  '),
    warning: paint(output, 'yellow', 'warning'),
    info: paint(output, 'dim', 'info   '),
  };
  for (const area of report.areas) {
    const findings = report.findings.filter((f) => f.area === area.id);
    if (findings.length === 0) continue;
    printLine(output, paint(output, 'bold', area.title));
    for (const finding of findings) printFinding(output, finding, mark);
    printLine(output);
  }
  for (const table of report.tables) {
    printLine(output, paint(output, 'bold', table.title));
    printTable(output, table.header, table.rows, { indent: '  ', headerStyle: 'dim' });
    printLine(output);
  }
  const { errors, warnings, infos } = report.summary;
  const counts = `${plural(errors, 'error')}, ${plural(warnings, 'warning')}, ${plural(infos, 'note')}`;
  printLine(
    output,
    errors > 0
      ? paint(output, 'red', counts)
      : warnings > 0
        ? paint(output, 'yellow', counts)
        : paint(output, 'green', counts),
  );
}

function printFinding(
  output: Output,
  finding: DoctorFinding,
  mark: Record<DoctorSeverity, string>,
): void {
  printLine(output, `  ${mark[finding.severity]} ${finding.code}: ${finding.message}`);
  const [first = '', ...rest] = finding.hint.split('\n');
  printLine(output, paint(output, 'dim', `          hint: ${first}`));
  for (const line of rest) if (line !== '') printLine(output, `            ${line}`);
}

function plural(n: number, word: string): string {
  return `${n} ${word}${n === 1 ? '' : 's'}`;
}

/** Registers `doctor`. */
export function registerDoctor(program: Command, ctx: CommandContext): void {
  addTargetOptions(
    program
      .command('doctor')
      .description(
        'Report what can undo, bypass or collide with egressguard here: other firewall state on our hooks, routing collisions, services that rewrite routing, paths the firewall does not see',
      )
      .argument('[policy]', 'policy file (YAML): adds its class interfaces, tunnels and uplink')
      .option('--json', "print JSON: { findings, summary, and the backend's own tables }")
      .option(
        '--k8s',
        'check the cluster instead: what its egress gateway needs (the checklist alone without --kubeconfig)',
      )
      .option('--kubeconfig <file>', 'with --k8s: read the cluster through these credentials'),
  )
    .addHelpText(
      'after',
      `
Each finding has a severity (error, warning, info), a stable code, a message and a hint.
${registry
  .all()
  .flatMap((b) => (b.doctor === undefined ? [] : [`${b.name}: ${b.doctor.description}`]))
  .join('\n')}

Exit codes:
  0  no error-severity findings (warnings allowed)
  1  at least one error-severity finding
  2  bad usage or a runtime error

Examples:
  egressguard doctor testdata/policies/valid/linux-vpn-gateway/policy.yaml --json
  egressguard doctor --k8s --kubeconfig ~/.kube/config`,
    )
    .action(async (file: string | undefined, opts: DoctorOptions) => {
      ctx.setExit(await runDoctor(file, opts, ctx.output));
    });
}
