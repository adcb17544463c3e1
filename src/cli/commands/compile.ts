import { mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import type { Command } from 'commander';
import { prepareForFacts, requireFacts, requirePolicy } from '../../host/index.js';
import type { CommandContext } from '../command-context.js';
import { EXIT } from '../exit-codes.js';
import { printJson, printLine, type Output } from '../output.js';
import { addBackendOptions, targetOf, warn, type TargetOptions } from '../target-options.js';
import { registry } from '../../backends/index.js';

export interface CompileCommandOptions extends TargetOptions {
  readonly facts?: string | undefined;
  readonly out?: string | undefined;
  readonly json?: boolean | undefined;
}

/** `compile POLICY`: the artifacts a backend would apply, stamped with the host config hash. */
export function runCompile(file: string, options: CompileCommandOptions, output: Output): number {
  const { policy } = requirePolicy(file);
  const facts = requireFacts(file, options.facts);
  const target = targetOf(options);
  const { backend, artifacts, hash } = prepareForFacts(target, { policy, facts, warn });
  if (options.out !== undefined) {
    mkdirSync(options.out, { recursive: true });
    for (const a of artifacts) writeFileSync(join(options.out, a.name), a.content);
  }
  if (options.json === true) {
    printJson(output, { backend: backend.name, hash, artifacts });
  } else if (options.out === undefined) {
    for (const a of artifacts) {
      printLine(output, `# ---- ${a.name}`);
      output.out.write(a.content);
    }
  } else {
    printLine(
      output,
      `wrote ${artifacts.map((a) => a.name).join(', ')} to ${options.out} (hash ${hash})`,
    );
  }
  return EXIT.ok;
}

/** Registers `compile`. */
export function registerCompile(program: Command, ctx: CommandContext): void {
  addBackendOptions(
    program
      .command('compile')
      .description(
        'Compile a policy for a backend and print (or write) the artifacts, hash-stamped',
      )
      .argument('<policy>', 'policy file (YAML)')
      .option(
        '--target <backend>',
        `backend (${registry.names().join(', ')}; default: the one for the facts' OS)`,
      )
      .option('--facts <file>', 'host facts (default: facts.json beside the policy)')
      .option('--out <dir>', 'write the artifacts into this directory')
      .option('--json', 'print the artifacts and the hash as JSON'),
    registry.options(),
  ).action((file: string, opts: CompileCommandOptions) => {
    ctx.setExit(runCompile(file, opts, ctx.output));
  });
}
