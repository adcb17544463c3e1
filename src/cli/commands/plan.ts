import type { Command } from 'commander';
import { planPrepared, preparePolicy } from '../../host/index.js';
import type { CommandContext } from '../command-context.js';
import { EXIT } from '../exit-codes.js';
import { checkMissingIngress } from '../missing-ingress.js';
import { paint, printJson, printLine } from '../output.js';
import {
  addTargetOptions,
  describeTarget,
  targetOf,
  warn,
  type TargetOptions,
} from '../target-options.js';

/** Registers `plan`. */
export function registerPlan(program: Command, ctx: CommandContext): void {
  addTargetOptions(
    program
      .command('plan')
      .description(
        'Show what apply would change (firewall, routes, rules) and check it; applies nothing',
      )
      .argument('<policy>', 'policy file (YAML)')
      .option('--facts <file>', 'host facts instead of reading the live host')
      .option('--json', 'print the plan as JSON')
      .option(
        '--detailed-exitcode',
        'exit 2 when apply would change something, 0 when not, 1 on a problem or an error',
      ),
  )
    .addHelpText(
      'after',
      [
        '',
        'Exit codes: 0 the plan is valid (changes or not); 1 the firewall rejects it or state is in',
        'the way; 2 bad usage or a runtime error. With --detailed-exitcode (as terraform plan):',
        '0 no changes, 1 a problem or an error, 2 valid with changes.',
      ].join('\n'),
    )
    .action(async (file: string, opts: PlanOptions) => {
      if (opts.detailedExitcode === true) ctx.setErrorExit(EXIT.failed);
      const target = targetOf(opts);
      const prepared = await preparePolicy(target, { policy: file, facts: opts.facts, warn });
      checkMissingIngress(prepared, { allowed: true, warn });
      const plan = await planPrepared(target, prepared);
      const ok = plan.problems.length === 0;
      if (opts.json === true) {
        printJson(ctx.output, {
          hash: prepared.hash,
          backend: prepared.backend.name,
          changes: plan.changes,
          // By rule id and address set, when what is live is known in that detail.
          firewall: plan.firewall ?? null,
          problems: plan.problems,
          valid: ok,
        });
      } else {
        printLine(
          ctx.output,
          `plan for ${describeTarget(target)} (${prepared.backend.name}): hash ${prepared.hash.slice(0, 12)}`,
        );
        if (plan.changes.length === 0) printLine(ctx.output, '  no changes: live state matches');
        for (const change of plan.changes) printLine(ctx.output, `  ${change}`);
        for (const problem of plan.problems)
          printLine(ctx.output, paint(ctx.output, 'red', `  problem: ${problem}`));
      }
      if (!ok) ctx.setExit(EXIT.failed);
      else
        ctx.setExit(
          opts.detailedExitcode === true && plan.changes.length > 0 ? EXIT.changes : EXIT.ok,
        );
    });
}

type PlanOptions = TargetOptions & { facts?: string; json?: boolean; detailedExitcode?: boolean };
