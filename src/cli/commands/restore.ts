import type { Command } from 'commander';
import {
  FILES,
  restoreGeneration,
  revertUnconfirmed,
  type RestoreOutcome,
  type RevertOutcome,
} from '../../apply/index.js';
import { EgressguardError } from '../../core/index.js';
import type { CommandContext } from '../command-context.js';
import { EXIT } from '../exit-codes.js';
import { describeLiveProblem } from '../../backends/index.js';
import { backendOf, hostContext } from '../../host/index.js';
import { printJson, printLine } from '../output.js';
import { addTargetOptions, targetOf, warnLockWait, type TargetOptions } from '../target-options.js';

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
      .option(
        '--lock-wait <seconds>',
        'wait this long for the host lock (default 30, then boot loads the lockdown; 60 with --unconfirmed)',
      )
      .option('--json', 'print the outcome as JSON'),
  )
    .addHelpText(
      'after',
      '\nExit code 0 when the generation, the class lockdown or nothing (after `remove`) was loaded,\n' +
        'or a generation left unconfirmed by a reboot was reverted: a boot unit must not fail when it\n' +
        'did fail closed. The output says which, and why.',
    )
    .action(
      async (
        opts: TargetOptions & {
          previous?: boolean;
          unconfirmed?: string;
          after?: string;
          lockWait?: string;
          json?: boolean;
        },
      ) => {
        const target = targetOf(opts);
        const context = hostContext(target, backendOf(target));
        const lockWait =
          opts.lockWait === undefined
            ? {}
            : { lockWaitMs: parseSeconds('--lock-wait', opts.lockWait) * 1000 };
        // Checked before the wait: a typo must not become a revert that fires at once.
        const after = opts.after === undefined ? 0 : parseSeconds('--after', opts.after);
        if (after > 0) await new Promise((r) => setTimeout(r, after * 1000));
        if (opts.unconfirmed !== undefined) {
          const generation = Number(opts.unconfirmed);
          if (!Number.isInteger(generation) || generation <= 0) {
            throw new EgressguardError(
              'usage',
              `Cannot revert generation "${opts.unconfirmed}": not a generation number`,
            );
          }
          const outcome = await revertUnconfirmed({
            ...context,
            generation,
            ...lockWait,
            onLockWait: warnLockWait,
          });
          if (opts.json === true) printJson(ctx.output, outcome);
          else printOutcome(ctx, outcome);
          ctx.setExit(EXIT.ok);
          return;
        }
        const outcome = await restoreGeneration({
          ...context,
          ...(opts.previous === true ? { from: FILES.previous } : {}),
          ...lockWait,
          onLockWait: warnLockWait,
        });
        if (opts.json === true) printJson(ctx.output, outcome);
        else printOutcome(ctx, outcome);
        ctx.setExit(EXIT.ok);
      },
    );
}

function printOutcome(ctx: CommandContext, outcome: RestoreOutcome | RevertOutcome): void {
  const o = ctx.output;
  switch (outcome.kind) {
    case 'restored':
      printLine(o, `restored generation ${outcome.generation}`);
      for (const d of outcome.deferred) printLine(o, `  waiting: ${describeLiveProblem(d)}`);
      return;
    case 'reverted':
      printLine(
        o,
        `reverted generation ${outcome.generation}: generation ${outcome.restored} is live again`,
      );
      if ('reason' in outcome) printLine(o, `  why: ${outcome.reason}`);
      for (const d of outcome.deferred) printLine(o, `  waiting: ${describeLiveProblem(d)}`);
      return;
    case 'removed':
      printLine(
        o,
        `reverted generation ${outcome.generation}, the first: removed what egressguard owns`,
      );
      if ('reason' in outcome) printLine(o, `  why: ${outcome.reason}`);
      for (const r of outcome.removed) printLine(o, `  removed ${r}`);
      return;
    case 'lockdown':
    case 'nothing':
      printLine(o, `${outcome.kind}: ${outcome.reason}`);
  }
}

function parseSeconds(option: string, text: string): number {
  if (!/^\d+(\.\d+)?$/.test(text.trim())) {
    throw new EgressguardError('usage', `Cannot use ${option} "${text}": it takes seconds`, {
      hint: `write ${option} 30`,
    });
  }
  return Number(text);
}
