import type { Command } from 'commander';
import type { CommandContext } from '../command-context.js';
import { gatherFacts, resolveUplink } from '../../facts/index.js';
import { createRunner, requireNamespace } from '../../runner/index.js';
import { EXIT } from '../exit-codes.js';
import { parseLabel, readHostLabels } from '../../facts/index.js';
import { requirePolicy } from '../../host/index.js';
import { paint, printJson, printLine, type Output } from '../output.js';

export interface FactsOptions {
  readonly netns?: string | undefined;
  readonly policy?: string | undefined;
  readonly label?: readonly string[] | undefined;
  readonly json?: boolean | undefined;
}

/** `facts`: reads this host (or a namespace): interfaces, routes, uplink, versions, labels. */
export async function runFacts(options: FactsOptions, output: Output): Promise<number> {
  // The labels file first, then --label on top of it.
  const labels: Record<string, string> = { ...readHostLabels() };
  for (const entry of options.label ?? []) {
    const [key, value] = parseLabel(entry, '--label');
    labels[key] = value;
  }
  requireNamespace(options.netns);
  const facts = await gatherFacts(createRunner({ netns: options.netns }), { labels });
  const tunnels = options.policy === undefined ? [] : requirePolicy(options.policy).policy.tunnels;
  const uplinkSetting =
    options.policy === undefined ? 'default-route' : requirePolicy(options.policy).policy.uplink;
  let uplink: string | null = null;
  let uplinkProblem: string | null = null;
  try {
    uplink = resolveUplink(facts, uplinkSetting, tunnels);
  } catch (error) {
    uplinkProblem = (error as Error).message;
  }
  if (options.json === true) {
    // The file form: `egressguard facts --json > facts.json` is a valid --facts input.
    printJson(output, facts);
    return EXIT.ok;
  }
  printLine(
    output,
    `${paint(output, 'bold', 'host'.padEnd(10))}${facts.hostname} (${facts.os} ${facts.kernel ?? ''})`,
  );
  printLine(
    output,
    `${paint(output, 'bold', 'uplink'.padEnd(10))}${uplink ?? paint(output, 'yellow', uplinkProblem ?? '-')}`,
  );
  printLine(
    output,
    `${paint(output, 'bold', 'tools'.padEnd(10))}${
      Object.entries(facts.tools)
        .map(([k, v]) => `${k} ${v}`)
        .join(', ') || '-'
    }`,
  );
  printLine(
    output,
    `${paint(output, 'bold', 'labels'.padEnd(10))}${
      Object.entries(facts.labels)
        .map(([k, v]) => `${k}=${v}`)
        .join(', ') || '-'
    }`,
  );
  for (const iface of facts.interfaces) {
    printLine(
      output,
      `  ${iface.name.padEnd(16)}${iface.up ? 'up  ' : 'down'}  ${iface.addresses.join(' ')}`,
    );
  }
  for (const route of facts.routes) {
    printLine(
      output,
      `  route ${route.destination} dev ${route.interface}${route.gateway === undefined ? '' : ` via ${route.gateway}`}`,
    );
  }
  return EXIT.ok;
}

/** Registers `facts`. */
export function registerFacts(program: Command, ctx: CommandContext): void {
  program
    .command('facts')
    .description('Read host facts: interfaces, addresses, routes, uplink, OS and tool versions')
    .option('--netns <name>', 'read inside this network namespace')
    .option('--policy <file>', "resolve the uplink excluding this policy's tunnels")
    .option('--label <key=value...>', 'labels to record for this host')
    .option('--json', 'print facts.json (usable as --facts)')
    .action(async (opts: Parameters<typeof runFacts>[0]) => {
      ctx.setExit(await runFacts(opts, ctx.output));
    });
}
