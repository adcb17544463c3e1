import type { Command } from 'commander';
import { removeGeneration } from '../../apply/index.js';
import type { CommandContext } from '../command-context.js';
import { EXIT } from '../exit-codes.js';
import { backendOf, hostContext } from '../../host/index.js';
import { printJson, printLine } from '../output.js';
import { addTargetOptions, targetOf, type TargetOptions } from '../target-options.js';

/** Registers `remove`. */
export function registerRemove(program: Command, ctx: CommandContext): void {
  addTargetOptions(
    program
      .command('remove')
      .description(
        'Remove what egressguard owns: its routes and rules first, then its firewall state; nothing else',
      )
      .option('--json', 'print what was removed as JSON'),
  ).action(async (opts: TargetOptions & { json?: boolean }) => {
    const target = targetOf(opts);
    const removed = await removeGeneration(hostContext(target, backendOf(target)));
    if (opts.json === true) printJson(ctx.output, { removed });
    else if (removed.length === 0) printLine(ctx.output, 'nothing to remove');
    else for (const r of removed) printLine(ctx.output, `removed ${r}`);
    ctx.setExit(EXIT.ok);
  });
}
