import type { Command } from 'commander';
import { readStatus } from '../../apply/index.js';
import type { LiveTunnel } from '../../backends/index.js';
import { backendOf, hostContext, preparePolicy } from '../../host/index.js';
import type { CommandContext } from '../command-context.js';
import { EXIT } from '../exit-codes.js';
import { paint, printJson, printLine } from '../output.js';
import { addTargetOptions, targetOf, warn, type TargetOptions } from '../target-options.js';

/** Registers `status`. */
export function registerStatus(program: Command, ctx: CommandContext): void {
  addTargetOptions(
    program
      .command('status')
      .description(
        'Desired vs applied vs live hash, drift, missing routes or rules, counters, tunnel state, the last failure',
      )
      .argument('[policy]', 'policy file: also show whether it is the one applied')
      .option('--facts <file>', 'host facts for the policy instead of reading the live host')
      .option('--json', 'print the status as JSON'),
  )
    .addHelpText(
      'after',
      '\nExit code 0: in sync; 3: drifted, partially applied, interrupted or not applied. The last\n' +
        'failed apply (the re-converge) or boot that loaded the lockdown is listed, and in --json as\n' +
        '`failure`, until an apply goes in; it does not change the exit code (live state may be fine).',
    )
    .action(
      async (
        file: string | undefined,
        opts: TargetOptions & { facts?: string; json?: boolean },
      ) => {
        const target = targetOf(opts);
        const prepared =
          file === undefined
            ? undefined
            : await preparePolicy(target, { policy: file, facts: opts.facts, warn });
        const desiredHash = prepared?.hash;
        const status = await readStatus({
          ...hostContext(target, prepared?.backend ?? backendOf(target)),
          desiredHash,
        });
        const differsFromDesired = desiredHash !== undefined && desiredHash !== status.appliedHash;
        if (opts.json === true) {
          printJson(ctx.output, { ...status, differsFromDesired });
        } else {
          const o = ctx.output;
          const colour = status.condition === 'InSync' ? 'green' : 'red';
          printLine(o, paint(o, colour, status.condition));
          for (const reason of status.reasons) printLine(o, `  ${reason}`);
          const h = (v: string | null): string => (v === null ? '-' : v.slice(0, 12));
          printLine(
            o,
            `  desired ${h(status.desiredHash)}  applied ${h(status.appliedHash)} (generation ${status.generation ?? '-'})  live ${h(status.liveHash)}`,
          );
          if (differsFromDesired)
            printLine(
              o,
              paint(o, 'yellow', '  the policy given differs from the one applied: run apply'),
            );
          for (const t of status.live.tunnels) printLine(o, `  ${describeTunnel(t)}`);
          const counters = [...status.live.counters].sort((a, b) => a.id.localeCompare(b.id));
          if (counters.length > 0) printLine(o, '  counters (packets, bytes):');
          for (const c of counters)
            printLine(
              o,
              `    ${c.id.padEnd(40)} ${String(c.packets).padStart(10)} ${String(c.bytes).padStart(12)}`,
            );
        }
        ctx.setExit(status.condition === 'InSync' ? EXIT.ok : EXIT.drift);
      },
    );
}

/** `tunnel utun3 (vpn): up, 10.8.0.2/32 --> 10.8.0.1`, and where a tunnel found by match is now. */
function describeTunnel(t: LiveTunnel): string {
  const name =
    t.declared === undefined || t.declared === t.name ? t.name : `${t.name} (${t.declared})`;
  const addresses =
    t.addresses === undefined || t.addresses.length === 0 ? '' : `, ${t.addresses.join(' ')}`;
  const peer = t.peer === undefined ? '' : ` --> ${t.peer}`;
  const now =
    t.matchesNow === undefined || t.matchesNow === t.name
      ? ''
      : t.matchesNow === null
        ? '; no interface matches it now'
        : `; it matches ${t.matchesNow} now`;
  return `tunnel ${name}: ${t.state}${addresses}${peer}${now}`;
}
