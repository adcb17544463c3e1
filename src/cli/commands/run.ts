import type { Command } from 'commander';
import { runResident } from '../../apply/index.js';
import { EgressguardError } from '../../core/index.js';
import { applyPrepared, hostContext, preparePolicy } from '../../host/index.js';
import type { CommandContext } from '../command-context.js';
import { EXIT } from '../exit-codes.js';
import { printLine } from '../output.js';
import { addTargetOptions, targetOf, warn, type TargetOptions } from '../target-options.js';

/** Registers `run`. */
export function registerRun(program: Command, ctx: CommandContext): void {
  addTargetOptions(
    program
      .command('run')
      .description(
        'Apply, then stay resident: re-add routes when a tunnel returns, repair a deleted or edited table',
      )
      .argument('<policy>', 'policy file (YAML)')
      .option('--facts <file>', 'host facts instead of reading the live host')
      .option('--tick <ms>', 'periodic check interval in milliseconds', '10000')
      .option('--json', 'log JSON lines'),
  )
    .addHelpText(
      'after',
      '\nStops on SIGINT or SIGTERM. Rules and routes stay in place when it stops.',
    )
    .action(
      async (
        file: string,
        opts: TargetOptions & { facts?: string; tick: string; json?: boolean },
      ) => {
        const tickMs = parseTick(opts.tick);
        const target = targetOf(opts);
        const prepared = await preparePolicy(target, { policy: file, facts: opts.facts, warn });
        const report = await applyPrepared(target, prepared);
        const emit = (entry: { time: string; action: string; message: string }): void => {
          printLine(
            ctx.output,
            opts.json === true
              ? JSON.stringify(entry)
              : `${entry.time} ${entry.action}: ${entry.message}`,
          );
        };
        emit({
          time: new Date().toISOString(),
          action: report.changed ? 'applied' : 'unchanged',
          message: `generation ${report.generation.number}, hash ${report.generation.hash.slice(0, 12)}`,
        });
        const controller = new AbortController();
        const stop = (): void => {
          controller.abort();
        };
        // `on`, not `once`: execa's signal-exit re-raises a signal when no other listener is left
        // at the time it runs, and a `once` listener that already ran counts as none.
        process.on('SIGINT', stop);
        process.on('SIGTERM', stop);
        try {
          await runResident({
            ...hostContext(target, prepared.backend),
            log: emit,
            signal: controller.signal,
            tickMs,
            // The policy file and the host's facts are read again at every reconcile: an uplink
            // that changed moves the hash, and the new generation is applied.
            ownHash: prepared.hash,
            refresh: async () => {
              const fresh = await preparePolicy(target, { policy: file, facts: opts.facts });
              return {
                hash: fresh.hash,
                apply: async () => {
                  const now = await applyPrepared(target, fresh);
                  return {
                    changed: now.changed,
                    generation: now.generation.number,
                    hash: now.generation.hash,
                  };
                },
              };
            },
          });
        } finally {
          process.off('SIGINT', stop);
          process.off('SIGTERM', stop);
        }
        ctx.setExit(EXIT.ok);
      },
    );
}

/** The periodic check interval: at least 100 ms, or `run` would spin on its listings. */
function parseTick(text: string): number {
  const ms = Number(text);
  if (!/^\d+$/.test(text) || ms < 100) {
    throw new EgressguardError('usage', `Cannot use --tick "${text}"`, {
      hint: 'give the interval in milliseconds, at least 100 (default 10000)',
    });
  }
  return ms;
}
