import { mkdirSync, writeFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { Option, type Command } from 'commander';
import { registry, type BackendOption } from '../../backends/index.js';
import { EgressguardError } from '../../core/index.js';
import { requireFacts, requirePolicy } from '../../host/index.js';
import { lowerForHost } from '../../ir/index.js';
import { addBackendOptions, backendOptionsOf } from '../target-options.js';
import { proveInLab, renderJunit, renderSummary } from '../../prove/index.js';
import type { CommandContext } from '../command-context.js';
import { EXIT } from '../exit-codes.js';
import { paint, printLine } from '../output.js';
import { VERSION } from '../../core/index.js';
import { selfCommand } from './apply.js';

interface ProveCliOptions {
  readonly lab?: boolean;
  readonly facts?: string;
  readonly json?: string;
  readonly junit?: string;
  readonly strict?: boolean;
  readonly only?: string[];
  readonly scenarios?: string;
  readonly reapplies?: string;
  readonly rate?: string;
  readonly capture?: string;
  readonly progress?: boolean;
  readonly emit?: string;
  readonly [suiteOption: string]: unknown;
}

/** The options of every backend's generated suites (`--echo-url` for chainsaw, say). */
function suiteOptions(): { option: BackendOption; backends: string[] }[] {
  return registry
    .all()
    .flatMap((b) => (b.suites?.options ?? []).map((option) => ({ option, backends: [b.name] })));
}

/**
 * `prove POLICY --emit FORMAT DIR`: writes the test suite a backend generates from the policy's
 * requirements and probes, for an environment egressguard cannot run (a cluster).
 */
function runEmit(
  file: string,
  dir: string | undefined,
  opts: ProveCliOptions,
  ctx: CommandContext,
): void {
  const format = opts.emit ?? '';
  const backend = registry.all().find((b) => b.suites?.formats.includes(format) === true);
  if (backend?.suites === undefined) {
    const known = registry.all().flatMap((b) => b.suites?.formats ?? []);
    throw new EgressguardError('usage', `Cannot emit a "${format}" suite`, {
      hint: `use one of: ${known.join(', ')}`,
    });
  }
  if (dir === undefined) {
    throw new EgressguardError('usage', `Cannot emit the ${format} suite without a directory`, {
      hint: `egressguard prove ${file} --emit ${format} DIR`,
    });
  }
  const { policy } = requirePolicy(file);
  const facts = requireFacts(file, opts.facts);
  const { files, notes } = backend.suites.emit({
    format,
    policy,
    ir: lowerForHost(policy, facts),
    facts,
    options: backendOptionsOf(opts, suiteOptions()),
  });
  for (const f of files) {
    mkdirSync(dirname(join(dir, f.name)), { recursive: true });
    writeFileSync(join(dir, f.name), f.content);
  }
  for (const note of notes) printLine(ctx.output, paint(ctx.output, 'dim', `note: ${note}`));
  printLine(ctx.output, `wrote the ${format} suite (${files.length} files) to ${dir}`);
}

/** Registers `prove`. */
export function registerProve(program: Command, ctx: CommandContext): void {
  const command = program
    .command('prove')
    .description(
      'Prove the policy by measurement: a lab from the policy and its facts, the real applier and resident mode, every probe under faults, three oracles',
    )
    .argument('<policy>', 'policy file (YAML)')
    .argument('[dir]', 'with --emit: the directory to write the suite into')
    .option(
      '--emit <format>',
      'write a test suite for a cluster instead of proving here (chainsaw), into DIR',
    )
    .option('--lab', 'build a throwaway lab of network namespaces (the only mode so far)')
    .option(
      '--facts <file>',
      'host facts the lab is built from (default: facts.json beside the policy)',
    )
    .option('--json <file>', 'write the JSON evidence bundle (every count, nonce, version, hash)')
    .option('--junit <file>', 'write JUnit XML (requirement ids as properties)')
    .option(
      '--strict',
      'fail when a safety-critical requirement lacks a passing L3 measurement or a requirement has no probe',
    )
    .option('--only <requirement...>', 'only the probes of these requirements')
    .option(
      '--scenarios <ids>',
      'only these scenarios, comma-separated (the steady state always runs)',
    )
    .addOption(
      new Option('--reapplies <n>', 'applies in the reapply-under-traffic scenario').default('200'),
    )
    .addOption(
      new Option('--rate <pps>', 'packets per second per flow while reapplying').default('150'),
    )
    .option(
      '--capture <dir>',
      "record every lab node's packets into DIR/<node>.pcap (tcpdump -i any): evidence for a measurement that went wrong",
    )
    .option('--progress', 'progress lines on stderr even when it is not a terminal')
    .addHelpText(
      'after',
      `
Needs root (network namespaces); nothing outside the lab's namespaces is touched, and the lab is
torn down whatever happens, also on SIGINT and SIGTERM after every pending restore ran.

Example:
  egressguard prove testdata/policies/valid/linux-vpn-gateway/policy.yaml --lab --json proof.json --junit proof.xml --strict
  egressguard prove testdata/policies/valid/k3s-vpn-egress/policy.yaml --emit chainsaw suite/ --echo-url http://203.0.113.80:8080/

Exit codes: 0 every measurement agreed (and, with --strict, every requirement is covered);
1 enforcement failed (a measurement disagreed with the policy) or --strict is unmet; 2 bad usage,
a runtime error, or a measurement the lab could not take while nothing measured failed.`,
    );
  addBackendOptions(command, suiteOptions());
  command.action(async (file: string, dir: string | undefined, opts: ProveCliOptions) => {
    if (opts.emit !== undefined) {
      runEmit(file, dir, opts, ctx);
      return;
    }
    if (opts.lab !== true) {
      throw new EgressguardError('usage', 'Cannot prove without a lab yet', {
        hint: 'add --lab: the proof runs in network namespaces it builds and deletes',
      });
    }
    const reapplies = parseCount(opts.reapplies ?? '200', '--reapplies', 2, 10_000);
    const rate = parseCount(opts.rate ?? '150', '--rate', 1, 2000);
    const showProgress = opts.progress === true || process.stderr.isTTY;
    const report = await proveInLab({
      policyFile: file,
      factsFile: opts.facts,
      selfCommand: selfCommand([]),
      version: VERSION,
      only: opts.only,
      scenarios: opts.scenarios
        ?.split(',')
        .map((s) => s.trim())
        .filter((s) => s !== ''),
      reapplies,
      rate,
      captureDir: opts.capture,
      progress: showProgress
        ? (line) => {
            ctx.output.err.write(`${paint(ctx.output, 'dim', line)}\n`);
          }
        : undefined,
    });
    if (opts.json !== undefined) writeFileSync(opts.json, `${JSON.stringify(report, null, 2)}\n`);
    if (opts.junit !== undefined) {
      writeFileSync(opts.junit, renderJunit(report, { strict: opts.strict === true }));
    }
    printLine(
      ctx.output,
      renderSummary(report, {
        strict: opts.strict === true,
        paint: (style, text) => paint(ctx.output, style, text),
      }).trimEnd(),
    );
    const strictFailed = opts.strict === true && report.strictProblems.length > 0;
    ctx.setExit(
      report.outcome === 'failed'
        ? EXIT.failed
        : report.outcome === 'unmeasured'
          ? EXIT.error
          : strictFailed
            ? EXIT.failed
            : EXIT.ok,
    );
  });
}

function parseCount(text: string, flag: string, min: number, max: number): number {
  const value = Number(text);
  if (!Number.isInteger(value) || value < min || value > max) {
    throw new EgressguardError('usage', `Cannot use ${flag} "${text}"`, {
      hint: `give an integer from ${min} to ${max}`,
    });
  }
  return value;
}
