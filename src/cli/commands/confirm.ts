import type { Command } from 'commander';
import { confirmGeneration } from '../../apply/index.js';
import type { CommandContext } from '../command-context.js';
import { EXIT } from '../exit-codes.js';
import { backendOf, hostContext } from '../../host/index.js';
import { printJson, printLine } from '../output.js';
import { addTargetOptions, targetOf, warnLockWait, type TargetOptions } from '../target-options.js';

/** Registers `confirm`. */
export function registerConfirm(program: Command, ctx: CommandContext): void {
  addTargetOptions(
    program
      .command('confirm')
      .description('Keep the generation applied with --confirm-within: cancel its revert')
      .option('--json', 'print the confirmed generation as JSON'),
  ).action(async (opts: TargetOptions & { json?: boolean }) => {
    const target = targetOf(opts);
    const pending = await confirmGeneration({
      ...hostContext(target, backendOf(target)),
      onLockWait: warnLockWait,
    });
    if (opts.json === true) printJson(ctx.output, { confirmed: pending.generation });
    else printLine(ctx.output, `confirmed generation ${pending.generation}`);
    ctx.setExit(EXIT.ok);
  });
}
