import { mkdirSync, writeFileSync } from 'node:fs';
import { isAbsolute, join, resolve } from 'node:path';
import type { Command } from 'commander';
import { backendOf, createHostTarget } from '../../host/index.js';
import { EgressguardError, packagePath } from '../../core/index.js';
import type { CommandContext } from '../command-context.js';
import { EXIT } from '../exit-codes.js';
import { printJson, printLine } from '../output.js';

/** Registers `units`. */
export function registerUnits(program: Command, ctx: CommandContext): void {
  program
    .command('units')
    .description(
      'Render the service definitions: boot-time restore before the network, the resident mode (systemd units on Linux)',
    )
    .option('--policy <file>', 'also render the resident service, which runs this policy')
    .option('--target <backend>', "backend (default: this host's)")
    .option(
      '--state-dir <dir>',
      'state directory the units use',
      process.env['EGRESSGUARD_STATE_DIR'] ?? '/var/lib/egressguard',
    )
    .option('--out <dir>', 'write the files into this directory (e.g. /etc/systemd/system)')
    .option('--json', 'print the files as JSON')
    .addHelpText(
      'after',
      '\nExample:\n  egressguard units --policy /etc/egressguard/policy.yaml --out /etc/systemd/system\n  systemd-analyze verify /etc/systemd/system/egressguard*.service && systemctl enable egressguard-restore egressguard',
    )
    .action(
      (opts: {
        policy?: string;
        stateDir: string;
        out?: string;
        json?: boolean;
        target?: string;
      }) => {
        const backend = backendOf(createHostTarget({ backend: opts.target }));
        if (backend.units === undefined) {
          throw new EgressguardError(
            'unsupported',
            `Backend "${backend.name}" has no units to render`,
          );
        }
        const units = backend.units.render({
          node: process.execPath,
          bin: packagePath('bin', 'egressguard.js'),
          stateDir: opts.stateDir,
          ...(opts.policy === undefined
            ? {}
            : { policy: isAbsolute(opts.policy) ? opts.policy : resolve(opts.policy) }),
        });
        if (opts.out !== undefined) {
          mkdirSync(opts.out, { recursive: true });
          for (const unit of units) writeFileSync(join(opts.out, unit.name), unit.content);
        }
        if (opts.json === true) printJson(ctx.output, units);
        else if (opts.out !== undefined)
          printLine(ctx.output, `wrote ${units.map((u) => u.name).join(', ')} to ${opts.out}`);
        else for (const unit of units) output(ctx, unit.name, unit.content);
        ctx.setExit(EXIT.ok);
      },
    );
}

function output(ctx: CommandContext, name: string, content: string): void {
  printLine(ctx.output, `# ---- ${name}`);
  ctx.output.out.write(content);
}
