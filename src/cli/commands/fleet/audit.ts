import type { Command } from 'commander';
import type { CommandContext } from '../../command-context.js';
import { EXIT } from '../../exit-codes.js';
import { parseWholeNumber } from '../../fleet-options.js';
import { printJson, printLine } from '../../output.js';
import { withConnection, type FleetRun } from './fleet-connection.js';

/** `fleet audit`: the audit log. */
export function registerAudit(fleet: Command, ctx: CommandContext, run: FleetRun): void {
  withConnection(
    fleet
      .command('audit')
      .description('The audit log: pushes, retries, forces, rollbacks, revocations')
      .option('--limit <n>', 'entries', '50'),
  ).action(
    run(async (client, opts) => {
      const limit = parseWholeNumber((opts as { limit: string }).limit, '--limit', 1);
      const { audit } = await client.auditLog(limit);
      if (opts.json === true) printJson(ctx.output, audit);
      else
        for (const entry of audit)
          printLine(
            ctx.output,
            `${new Date(entry.at).toISOString()} ${entry.actor} ${entry.action} ${entry.target}`,
          );
      return EXIT.ok;
    }),
  );
}
