import type { Command } from 'commander';
import { registry } from '../../backends/index.js';
import { EgressguardError } from '../../core/index.js';
import { createHostTarget } from '../../host/index.js';
import type { CommandContext } from '../command-context.js';
import { EXIT } from '../exit-codes.js';
import { printJson, printLine } from '../output.js';
import { addBackendOptions, backendOptionsOf, type TargetOptions } from '../target-options.js';

/** Registers `selftest`: a backend's checks against the real enforcer of this machine. */
export function registerSelftest(program: Command, ctx: CommandContext): void {
  addBackendOptions(
    program
      .command('selftest')
      .description(
        "Check a backend's model assumptions against the real tool on this machine (pf: run on a Mac)",
      )
      .requiredOption('--backend <name>', `the backend (${registry.names().join(', ')})`)
      .option('--json', 'print the checks as JSON'),
    registry.options(),
  )
    .addHelpText(
      'after',
      '\nExample (on a Mac, as root):\n  sudo egressguard selftest --backend pf',
    )
    .action(async (opts: TargetOptions & { backend: string; json?: boolean }) => {
      const backend = registry.get(opts.backend);
      if (backend.selftest === undefined) {
        throw new EgressguardError('unsupported', `Backend "${backend.name}" has no self-test`, {
          hint: 'its tests run against the real tool already (capabilities.runsHere)',
        });
      }
      const target = createHostTarget({ options: backendOptionsOf(opts) });
      const checks = await backend.selftest.run({ runner: target.runner, options: target.options });
      const confirmed = checks
        .filter((c) => c.ok && c.assumption !== null)
        .map((c) => c.assumption);
      const failed = (c: (typeof checks)[number]): boolean => !c.ok && c.cannotTell === undefined;
      const refuted = checks
        .filter((c) => failed(c) && c.assumption !== null)
        .map((c) => c.assumption);
      const cannotTell = checks
        .filter((c) => c.cannotTell !== undefined)
        .map((c) => ({ name: c.name, reason: c.cannotTell }));
      if (opts.json === true) {
        printJson(ctx.output, { backend: backend.name, checks, confirmed, refuted, cannotTell });
      } else {
        for (const c of checks) {
          const mark = c.ok ? 'ok  ' : c.cannotTell === undefined ? 'FAIL' : 'n/a ';
          const reason = c.cannotTell === undefined ? '' : ` (cannot tell: ${c.cannotTell})`;
          printLine(ctx.output, `${mark} ${c.name}: ${c.detail}${reason}`);
        }
        printLine(ctx.output, `\nConfirmed model assumptions (${confirmed.length}):`);
        for (const a of confirmed) printLine(ctx.output, `  - ${a}`);
        if (refuted.length > 0) {
          printLine(ctx.output, `Not confirmed here (${refuted.length}):`);
          for (const a of refuted) printLine(ctx.output, `  - ${a}`);
        }
      }
      ctx.setExit(checks.some(failed) ? EXIT.failed : EXIT.ok);
    });
}
