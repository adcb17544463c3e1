import type { Command } from 'commander';
import { planPrepared, preparePolicy } from '../../host/index.js';
import type { CommandContext } from '../command-context.js';
import { EXIT } from '../exit-codes.js';
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
      .option('--json', 'print the plan as JSON'),
  )
    .addHelpText(
      'after',
      '\nExit code 0: the plan is valid (changes or not); 1: the firewall rejects it or state is in the way.',
    )
    .action(async (file: string, opts: TargetOptions & { facts?: string; json?: boolean }) => {
      const target = targetOf(opts);
      const prepared = await preparePolicy(target, { policy: file, facts: opts.facts, warn });
      const plan = await planPrepared(target, prepared);
      const ok = plan.problems.length === 0;
      if (opts.json === true) {
        printJson(ctx.output, {
          hash: prepared.hash,
          backend: prepared.backend.name,
          changes: plan.changes,
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
      ctx.setExit(ok ? EXIT.ok : EXIT.failed);
    });
}
