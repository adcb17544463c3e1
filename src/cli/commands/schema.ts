import type { Command } from 'commander';
import type { CommandContext } from '../command-context.js';
import { policyJsonSchema } from '../../policy/index.js';
import { EXIT } from '../exit-codes.js';
import { printJson, type Output } from '../output.js';

/** `schema`: the JSON Schema of policy v1, generated from the validator. */
export function runSchema(output: Output): number {
  printJson(output, policyJsonSchema());
  return EXIT.ok;
}

/** Registers `schema`. */
export function registerSchema(program: Command, ctx: CommandContext): void {
  program
    .command('schema')
    .description('Print the JSON Schema of policy v1 (for editor completion)')
    .action(() => {
      ctx.setExit(runSchema(ctx.output));
    });
}
