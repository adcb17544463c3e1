import type { Command } from 'commander';
import type { CommandContext } from '../command-context.js';
import { registerCheck } from './check.js';
import { registerCompile } from './compile.js';
import { registerExplain } from './explain.js';
import { registerFacts } from './facts.js';
import { registerSchema } from './schema.js';
import { registerPlan } from './plan.js';
import { registerApply } from './apply.js';
import { registerConfirm } from './confirm.js';
import { registerStatus } from './status.js';
import { registerRemove } from './remove.js';
import { registerRestore } from './restore.js';
import { registerRun } from './run.js';
import { registerUnits } from './units.js';
import { registerDoctor } from './doctor.js';
import { registerDrops } from './drops.js';

/** Every command, in the order `--help` lists them. One line each: add yours here. */
export const COMMANDS: readonly ((program: Command, ctx: CommandContext) => void)[] = [
  registerCheck,
  registerSchema,
  registerFacts,
  registerCompile,
  registerExplain,
  registerPlan,
  registerApply,
  registerConfirm,
  registerStatus,
  registerRemove,
  registerRestore,
  registerRun,
  registerUnits,
  registerDoctor,
  registerDrops,
];
