import type { Command } from 'commander';
import type { HostVerb } from '../../../fleet/index.js';
import type { CommandContext } from '../../command-context.js';
import { EXIT } from '../../exit-codes.js';
import { printJson, printLine } from '../../output.js';
import { withConnection, type FleetRun } from './fleet-connection.js';
import { summarise } from './fleet-print.js';

/** The verbs on one host; one action serves them all, since each is one call and one line. */
const HOST_VERB_HELP: readonly (readonly [HostVerb, string])[] = [
  ['retry', 'Re-arm a host’s failure budget: its agent tries again now'],
  ['force', 'Make a host’s agent apply its bundle again, even when nothing changed'],
  ['suspend', 'Stop a host from taking new bundles (it keeps enforcing what it has)'],
  ['resume', 'Let a suspended host take new bundles again'],
  ['decommission', 'Retire a host: revoke its credentials and stop its agent (history is kept)'],
];

/** `fleet retry|force|suspend|resume|decommission <host>`. */
export function registerHostVerbs(fleet: Command, ctx: CommandContext, run: FleetRun): void {
  for (const [verb, description] of HOST_VERB_HELP) {
    withConnection(
      fleet.command(verb).description(description).argument('<host>', 'host name'),
    ).action(
      run(async (client, opts, host: string) => {
        const { host: view } = await client.steerHost(verb, host);
        if (opts.json === true) printJson(ctx.output, view);
        else printLine(ctx.output, `${verb}: ${view.name} (${summarise(view)})`);
        return EXIT.ok;
      }),
    );
  }
}
