import type { Command } from 'commander';
import type { CommandContext } from '../command-context.js';

type Register = (program: Command, ctx: CommandContext) => void;

/**
 * Every command, in the order `--help` lists them, loaded on demand: a call loads only its own
 * command's modules (an apply does not pay for prove's), `--help` loads them all. One line each.
 */
export const COMMANDS: Readonly<Record<string, () => Promise<Register>>> = {
  check: async () => (await import('./check.js')).registerCheck,
  schema: async () => (await import('./schema.js')).registerSchema,
  facts: async () => (await import('./facts.js')).registerFacts,
  compile: async () => (await import('./compile.js')).registerCompile,
  explain: async () => (await import('./explain.js')).registerExplain,
  plan: async () => (await import('./plan.js')).registerPlan,
  apply: async () => (await import('./apply.js')).registerApply,
  confirm: async () => (await import('./confirm.js')).registerConfirm,
  status: async () => (await import('./status.js')).registerStatus,
  remove: async () => (await import('./remove.js')).registerRemove,
  restore: async () => (await import('./restore.js')).registerRestore,
  run: async () => (await import('./run.js')).registerRun,
  units: async () => (await import('./units.js')).registerUnits,
  doctor: async () => (await import('./doctor.js')).registerDoctor,
  drops: async () => (await import('./drops.js')).registerDrops,
  prove: async () => (await import('./prove.js')).registerProve,
  selftest: async () => (await import('./selftest.js')).registerSelftest,
  server: async () => (await import('./server.js')).registerServer,
  fleet: async () => (await import('./fleet/index.js')).registerFleet,
  agent: async () => (await import('./agent.js')).registerAgent,
};

/** Registers the command named in `args` (the words after the binary), or every command. */
export async function registerCommands(
  program: Command,
  ctx: CommandContext,
  args: readonly string[],
): Promise<void> {
  const named = args.find((a) => !a.startsWith('-'));
  const only = named === undefined ? undefined : COMMANDS[named];
  const loaders = only === undefined ? Object.values(COMMANDS) : [only];
  for (const register of await Promise.all(loaders.map((load) => load()))) register(program, ctx);
}
