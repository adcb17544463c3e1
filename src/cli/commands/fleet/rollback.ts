import type { Command } from 'commander';
import type { RollbackResponse } from '../../../fleet/index.js';
import type { CommandContext } from '../../command-context.js';
import { EXIT } from '../../exit-codes.js';
import { printJson, printLine } from '../../output.js';
import { withConnection, type FleetRun } from './fleet-connection.js';

/** `fleet rollback`: back to the policy pushed before the current one. */
export function registerRollback(fleet: Command, ctx: CommandContext, run: FleetRun): void {
  withConnection(
    fleet
      .command('rollback')
      .description('Roll the fleet back to the policy pushed before the current one, in one wave'),
  ).action(
    run(async (client, opts) => {
      const result = await client.rollback({});
      if (opts.json === true) printJson(ctx.output, result);
      else printLine(ctx.output, describeRollback(result));
      return EXIT.ok;
    }),
  );
}

function describeRollback(result: RollbackResponse): string {
  return `rolled back to the policy of ${result.restoredPushId}: push ${result.pushId}, rollout ${result.rolloutId}`;
}
