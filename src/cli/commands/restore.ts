import type { Command } from 'commander';
import {
  clearPendingConfirm,
  FILES,
  readPendingConfirm,
  restoreGeneration,
} from '../../apply/index.js';
import type { CommandContext } from '../command-context.js';
import { EXIT } from '../exit-codes.js';
import { addTargetOptions, resolveTarget, type TargetOptions } from '../host-target.js';
import { printJson, printLine } from '../output.js';

/** Registers `restore`. */
export function registerRestore(program: Command, ctx: CommandContext): void {
  addTargetOptions(
    program
      .command('restore')
      .description(
        'Load the last applied generation (boot); with the state lost, load the class lockdown',
      )
      .option('--previous', 'restore the generation before the last one')
      .option(
        '--unconfirmed <generation>',
        'revert only if this generation is still unconfirmed (the confirm timer)',
      )
      .option('--after <seconds>', 'wait this long first (the confirm timer without systemd)')
      .option('--json', 'print the outcome as JSON'),
  ).action(
    async (
      opts: TargetOptions & {
        previous?: boolean;
        unconfirmed?: string;
        after?: string;
        json?: boolean;
      },
    ) => {
      const target = resolveTarget(opts);
      if (opts.after !== undefined)
        await new Promise((r) => setTimeout(r, Number(opts.after) * 1000));
      let from = opts.previous === true ? FILES.previous : undefined;
      if (opts.unconfirmed !== undefined) {
        const pending = readPendingConfirm(target.state);
        if (pending === undefined || String(pending.generation) !== opts.unconfirmed) {
          printLine(ctx.output, `generation ${opts.unconfirmed} was confirmed: nothing to revert`);
          ctx.setExit(EXIT.ok);
          return;
        }
        from = FILES.previous;
      }
      const outcome = await restoreGeneration({
        ...target,
        ...(from === undefined ? {} : { from }),
      });
      if (opts.unconfirmed !== undefined) clearPendingConfirm(target.state);
      if (opts.json === true) printJson(ctx.output, outcome);
      else if (outcome.kind === 'restored') {
        printLine(ctx.output, `restored generation ${outcome.generation}`);
        for (const d of outcome.deferred) printLine(ctx.output, `  waiting: ${d}`);
      } else printLine(ctx.output, `${outcome.kind}: ${outcome.reason}`);
      ctx.setExit(EXIT.ok);
    },
  );
}
