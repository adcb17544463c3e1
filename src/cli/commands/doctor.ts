import type { Command } from 'commander';
import type { CommandContext } from '../command-context.js';
import {
  buildSteering,
  createDoctorContext,
  DEFAULT_TABLE,
  diagnose,
  readDoctorSnapshot,
  type DoctorArea,
  type DoctorFinding,
  type DoctorReport,
  type DoctorSeverity,
} from '../../backends/index.js';
import { isEgressguardError } from '../../core/index.js';
import { gatherFacts, resolveUplink } from '../../facts/index.js';
import { lowerForHost } from '../../ir/index.js';
import { createRunner } from '../../runner/index.js';
import { EXIT } from '../exit-codes.js';
import { requirePolicy } from '../load-inputs.js';
import { paint, printJson, printLine, type Output } from '../output.js';

export interface DoctorOptions {
  readonly netns?: string | undefined;
  readonly table?: string | undefined;
  readonly json?: boolean | undefined;
}

/** `doctor [POLICY]`: what on this host can undo, bypass or collide with egressguard. */
export async function runDoctor(
  file: string | undefined,
  options: DoctorOptions,
  output: Output,
): Promise<number> {
  const policy = file === undefined ? undefined : requirePolicy(file).policy;
  const runner = createRunner({ netns: options.netns });
  const [facts, snapshot] = await Promise.all([
    gatherFacts(runner),
    readDoctorSnapshot(runner, { networkd: options.netns === undefined }),
  ]);
  let uplink: string | null = null;
  let uplinkProblem: string | null = null;
  try {
    uplink = resolveUplink(facts, policy?.uplink ?? 'default-route', policy?.tunnels ?? []);
  } catch (error) {
    if (!isEgressguardError(error)) throw error;
    uplinkProblem = error.message;
  }
  const steering =
    policy === undefined || uplink === null
      ? undefined
      : buildSteering(lowerForHost(policy, facts));
  const context = createDoctorContext({
    table: options.table ?? DEFAULT_TABLE,
    uplink,
    uplinkProblem,
    policy,
    steering,
  });
  const report = diagnose(snapshot, context);
  if (options.json === true) printJson(output, report);
  else printReport(output, report);
  return report.summary.errors > 0 ? EXIT.failed : EXIT.ok;
}

const AREA_TITLES: Record<DoctorArea, string> = {
  nftables: 'nftables: other tables on our hooks',
  routing: 'routing: tables and rule priorities',
  networkd: 'systemd-networkd',
  topology: 'topology: paths netfilter does not see',
};

function printReport(output: Output, report: DoctorReport): void {
  const mark: Record<DoctorSeverity, string> = {
    error: paint(output, 'red', 'error  '),
    warning: paint(output, 'yellow', 'warning'),
    info: paint(output, 'dim', 'info   '),
  };
  const areas = Object.keys(AREA_TITLES) as DoctorArea[];
  for (const area of areas) {
    const findings = report.findings.filter((f) => f.area === area);
    if (findings.length === 0) continue;
    printLine(output, paint(output, 'bold', AREA_TITLES[area]));
    for (const finding of findings) printFinding(output, finding, mark);
    printLine(output);
  }
  if (report.foreignChains.length > 0) {
    printLine(output, paint(output, 'bold', 'foreign base chains'));
    const rows = report.foreignChains.map((c) => [
      c.hook,
      `${c.family} ${c.table}`,
      c.chain,
      String(c.priority),
      c.policy,
      c.order,
      c.canDrop ? 'yes' : 'no',
    ]);
    printTable(output, ['hook', 'table', 'chain', 'priority', 'policy', 'runs', 'can drop'], rows);
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

function printTable(output: Output, header: readonly string[], rows: readonly string[][]): void {
  const widths = header.map((h, i) => Math.max(h.length, ...rows.map((r) => (r[i] ?? '').length)));
  const format = (cells: readonly string[]): string =>
    `  ${cells.map((c, i) => c.padEnd(widths[i] ?? 0)).join('  ')}`.trimEnd();
  printLine(output, paint(output, 'dim', format(header)));
  for (const row of rows) printLine(output, format(row));
}

function plural(n: number, word: string): string {
  return `${n} ${word}${n === 1 ? '' : 's'}`;
}

/** Registers `doctor`. */
export function registerDoctor(program: Command, ctx: CommandContext): void {
  program
    .command('doctor')
    .description(
      'Report what can undo, bypass or collide with egressguard here: other tables on our hooks, routing collisions, systemd-networkd, paths netfilter does not see',
    )
    .argument('[policy]', 'policy file (YAML): adds its class interfaces, tunnels and uplink')
    .option('--netns <name>', 'diagnose inside this network namespace')
    .option('--table <name>', 'owned nftables table (inet family)', DEFAULT_TABLE)
    .option('--json', 'print JSON: { findings, foreignChains, summary }')
    .addHelpText(
      'after',
      `
Each finding has a severity (error, warning, info), a stable code, a message and a hint.
Read-only: doctor runs listings only (nft -j -t list ruleset, ip, tc, sysctl). systemd-networkd
manages the machine's own namespace only, so it is not checked with --netns.

Exit codes:
  0  no error-severity findings (warnings allowed)
  1  at least one error-severity finding
  2  bad usage or a runtime error

Example:
  egressguard doctor testdata/policies/valid/linux-vpn-gateway/policy.yaml --json`,
    )
    .action(async (file: string | undefined, opts: DoctorOptions) => {
      ctx.setExit(await runDoctor(file, opts, ctx.output));
    });
}
