import type { Command } from 'commander';
import type { CommandContext } from '../../command-context.js';
import { EXIT } from '../../exit-codes.js';
import { printJson } from '../../output.js';
import { withConnection, type FleetRun } from './fleet-connection.js';
import { isReady, printFleet, printHost } from './fleet-print.js';

/** `fleet status`: every host, or one host with its recent events. */
export function registerStatus(fleet: Command, ctx: CommandContext, run: FleetRun): void {
  withConnection(
    fleet
      .command('status')
      .description("Every host's conditions, hashes and last check-in; or one host with its events")
      .argument('[host]', 'one host, with its recent events'),
  ).action(
    run(async (client, opts, host: string | undefined) => {
      if (host !== undefined) {
        const [{ host: view }, { events }] = await Promise.all([
          client.host(host),
          client.hostEvents(host, 20),
        ]);
        if (opts.json === true) printJson(ctx.output, { host: view, events });
        else printHost(ctx.output, view, events);
        return isReady(view) ? EXIT.ok : EXIT.failed;
      }
      const [{ hosts }, { rollouts }] = await Promise.all([
        client.listHosts(),
        client.listRollouts(),
      ]);
      if (opts.json === true) printJson(ctx.output, { hosts, rollouts });
      else printFleet(ctx.output, hosts, rollouts);
      return hosts.every(isReady) ? EXIT.ok : EXIT.failed;
    }),
  );
}
