import type { Command } from 'commander';
import type { CommandContext } from '../command-context.js';
import { mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { lowerForHost } from '../../ir/index.js';
import { compileWithHash } from '../../backends/index.js';
import { EXIT } from '../exit-codes.js';
import { requireFacts, requirePolicy } from '../load-inputs.js';
import { printJson, printLine, type Output } from '../output.js';
import { VERSION } from '../version.js';
import { registry } from '../host-target.js';

export interface CompileCommandOptions {
  readonly target?: string | undefined;
  readonly facts?: string | undefined;
  readonly out?: string | undefined;
  readonly table?: string | undefined;
  readonly json?: boolean | undefined;
}

/** `compile POLICY`: the artifacts a backend would apply, stamped with the host config hash. */
export function runCompile(file: string, options: CompileCommandOptions, output: Output): number {
  const { policy } = requirePolicy(file);
  const facts = requireFacts(file, options.facts);
  const backend =
    options.target === undefined ? registry.forFacts(facts) : registry.get(options.target);
  const ir = lowerForHost(policy, facts);
  const { artifacts, hash } = compileWithHash(backend.createCompiler(), {
    ir,
    tableName: options.table,
    versions: { compiler: VERSION, agent: VERSION },
  });
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
  program
    .command('compile')
    .description('Compile a policy for a backend and print (or write) the artifacts, hash-stamped')
    .argument('<policy>', 'policy file (YAML)')
    .option('--target <backend>', "backend (default: the one for the facts' OS)")
    .option('--facts <file>', 'host facts (default: facts.json beside the policy)')
    .option('--table <name>', 'owned table name', 'egressguard')
    .option('--out <dir>', 'write the artifacts into this directory')
    .option('--json', 'print the artifacts and the hash as JSON')
    .action((file: string, opts: Parameters<typeof runCompile>[1]) => {
      ctx.setExit(runCompile(file, opts, ctx.output));
    });
}
