import { writeFileSync } from 'node:fs';
import type { Command } from 'commander';
import { parseLabel } from '../../../facts/index.js';
import type { CommandContext } from '../../command-context.js';
import { EXIT } from '../../exit-codes.js';
import { parseDurationMs, parseWholeNumber } from '../../fleet-options.js';
import { printJson, printLine } from '../../output.js';
import { withConnection, type ConnectOptions, type FleetRun } from './fleet-connection.js';

/** `fleet token create`: mint a bootstrap token. */
export function registerToken(fleet: Command, ctx: CommandContext, run: FleetRun): void {
  const token = fleet.command('token').description('Bootstrap tokens that enroll agents');
  withConnection(
    token
      .command('create')
      .description('Mint a bootstrap token (it carries the controller CA’s pin)')
      .option('--uses <n>', 'how many hosts it may enroll', '1')
      .option('--ttl <duration>', 'how long it stays valid', '24h')
      .option(
        '--label <key=value>',
        'a label for every host it enrolls (repeatable)',
        (v: string, p: string[]) => [...p, v],
        [],
      )
      .option('--out <file>', 'write the token to this file (0600) instead of printing it'),
  ).action(
    run(async (client, opts) => {
      const o = opts as ConnectOptions & {
        uses: string;
        ttl: string;
        label: string[];
        out?: string;
      };
      const labels = Object.fromEntries(o.label.map((entry) => parseLabel(entry, '--label')));
      const ttlMs = parseDurationMs(o.ttl, '--ttl');
      const created = await client.createToken({
        uses: parseWholeNumber(o.uses, '--uses', 1),
        ttlSeconds: Math.max(1, Math.round(ttlMs / 1000)),
        labels,
      });
      if (o.out !== undefined) writeFileSync(o.out, `${created.token}\n`, { mode: 0o600 });
      if (opts.json === true)
        printJson(
          ctx.output,
          o.out === undefined
            ? created
            : { id: created.id, expiresAt: created.expiresAt, file: o.out },
        );
      else if (o.out !== undefined)
        printLine(
          ctx.output,
          `wrote token ${created.id} to ${o.out} (expires ${new Date(created.expiresAt).toISOString()})`,
        );
      else printLine(ctx.output, created.token);
      return EXIT.ok;
    }),
  );
}
