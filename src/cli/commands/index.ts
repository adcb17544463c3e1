import type { Command } from 'commander';
import type { CommandContext } from '../command-context.js';
import { registerCheck } from './check.js';
import { registerCompile } from './compile.js';
import { registerExplain } from './explain.js';
import { registerFacts } from './facts.js';
import { registerSchema } from './schema.js';

/** Every command, in the order `--help` lists them. One line each: add yours here. */
export const COMMANDS: readonly ((program: Command, ctx: CommandContext) => void)[] = [
  registerCheck,
  registerSchema,
  registerFacts,
  registerCompile,
  registerExplain,
];
