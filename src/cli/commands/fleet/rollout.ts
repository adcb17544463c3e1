import type { Command } from 'commander';
import type { CommandContext } from '../../command-context.js';
import { EXIT } from '../../exit-codes.js';
import { printJson } from '../../output.js';
import { withConnection, type FleetRun } from './fleet-connection.js';
import { printRollout } from './fleet-print.js';

/** `fleet rollout resume|status`. */
export function registerRollout(fleet: Command, ctx: CommandContext, run: FleetRun): void {
  const rollout = fleet.command('rollout').description('Inspect and resume rollouts');
  withConnection(
    rollout
      .command('resume')
      .description('Continue a paused rollout: accept its paused wave and start the next')
      .argument('[id]', 'rollout id (default: the newest paused one)'),
  ).action(
    run(async (client, opts, id: string | undefined) => {
      const { rollout: view } = await client.resumeRollout(id ?? 'latest');
      if (opts.json === true) printJson(ctx.output, view);
      else printRollout(ctx.output, view);
      return EXIT.ok;
    }),
  );
  withConnection(
    rollout
      .command('status')
      .description('Recent rollouts and their waves')
      .argument('[id]', 'one rollout'),
  ).action(
    run(async (client, opts, id: string | undefined) => {
      const rollouts =
        id === undefined
          ? (await client.listRollouts()).rollouts
          : [(await client.rollout(id)).rollout];
      if (opts.json === true) printJson(ctx.output, rollouts);
      else for (const view of rollouts) printRollout(ctx.output, view);
      return EXIT.ok;
    }),
  );
}
