import type { Command } from 'commander';
import type { CommandContext } from '../../command-context.js';
import { EXIT } from '../../exit-codes.js';
import { printJson, printLine } from '../../output.js';
import { withConnection, type FleetRun } from './fleet-connection.js';

/** `fleet credential revoke <host>`. */
export function registerCredential(fleet: Command, ctx: CommandContext, run: FleetRun): void {
  const credential = fleet.command('credential').description('Host credentials');
  withConnection(
    credential
      .command('revoke')
      .description('Revoke every credential of a host')
      .argument('<host>', 'host name'),
  ).action(
    run(async (client, opts, host: string) => {
      const result = await client.revokeCredentials(host);
      if (opts.json === true) printJson(ctx.output, result);
      else printLine(ctx.output, `revoked ${result.revoked} credential(s) of ${host}`);
      return EXIT.ok;
    }),
  );
}
