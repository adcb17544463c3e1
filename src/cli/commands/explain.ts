import { Option, type Command } from 'commander';
import type { CommandContext } from '../command-context.js';
import { EgressguardError } from '../../core/index.js';
import { createHostView, evaluatePacket, lowerPolicy, parsePacket } from '../../ir/index.js';
import type { Protocol } from '../../policy/index.js';
import { EXIT } from '../exit-codes.js';
import { requireFacts, requirePolicy } from '../load-inputs.js';
import { paint, printJson, printLine, type Output } from '../output.js';

export interface ExplainOptions {
  readonly from: string;
  readonly to: string;
  readonly in?: string | undefined;
  readonly proto?: string | undefined;
  readonly port?: string | undefined;
  readonly tunnel?: string | undefined;
  readonly facts?: string | undefined;
  readonly json?: boolean | undefined;
}

const PROTOCOL_NAMES: Record<string, Protocol> = {
  tcp: 'tcp',
  udp: 'udp',
  icmp: 'icmp',
  icmpv6: 'icmp',
  gre: 47,
  esp: 50,
  ah: 51,
  sctp: 132,
};

/** `explain POLICY --from IP --to IP …`: what happens to this packet, and which layer decides. */
export function runExplain(file: string, options: ExplainOptions, output: Output): number {
  const { policy } = requirePolicy(file);
  const facts = requireFacts(file, options.facts);
  const ir = lowerPolicy(policy, facts);
  const tunnel = options.tunnel ?? 'up';
  if (tunnel !== 'up' && tunnel !== 'down') {
    throw new EgressguardError('usage', `Cannot use --tunnel "${tunnel}"`, {
      hint: 'use up or down',
    });
  }
  let packet;
  try {
    packet = parsePacket({
      from: options.from,
      to: options.to,
      ingress: options.in,
      protocol: parseProtocol(options.proto),
      port: parsePort(options.port),
    });
  } catch (error) {
    throw new EgressguardError('usage', (error as Error).message, {
      hint: 'give addresses like 192.0.2.10 or 2001:db8::10, both of one family',
    });
  }
  const result = evaluatePacket(ir, createHostView(facts), packet, { tunnel });
  const filterLayer = facts.os === 'darwin' ? 'pf' : 'nftables';
  const layers = result.layers.map((l) => (l === 'filter' ? filterLayer : l));
  if (options.json === true) {
    printJson(output, {
      class: result.class,
      verdict: result.verdict,
      rule: result.decidedBy.id,
      decidedBy: result.decidedBy,
      via: result.via,
      egress: result.egress,
      hook: result.hook,
      layers,
      notes: result.notes,
    });
    return EXIT.ok;
  }
  const decided =
    result.decidedBy.kind === 'rule'
      ? `rule "${result.decidedBy.id}" (${result.decidedBy.action})`
      : result.decidedBy.id === null
        ? result.decidedBy.kind
        : `${result.decidedBy.kind} "${result.decidedBy.id}"`;
  const verdict =
    result.verdict === 'allow' ? paint(output, 'green', 'allow') : paint(output, 'red', 'deny');
  const rows: [string, string][] = [
    ['class', result.class ?? 'unmanaged'],
    ['verdict', verdict],
    ['decided by', decided],
    ['leaves by', result.via ?? '-'],
    ['egress as', result.egress ?? '-'],
    ['hook', result.hook ?? '-'],
    ['enforced by', layers.length === 0 ? '- (not ours)' : layers.join(' + ')],
  ];
  for (const [label, value] of rows)
    printLine(output, `${paint(output, 'bold', label.padEnd(12))}${value}`);
  for (const note of result.notes) printLine(output, paint(output, 'dim', `note: ${note}`));
  return EXIT.ok;
}

function parseProtocol(text: string | undefined): Protocol | undefined {
  if (text === undefined) return undefined;
  const named = PROTOCOL_NAMES[text.toLowerCase()];
  if (named !== undefined) return named;
  if (/^\d{1,3}$/.test(text) && Number(text) <= 255) {
    const n = Number(text);
    return n === 6 ? 'tcp' : n === 17 ? 'udp' : n;
  }
  throw new EgressguardError('usage', `Cannot use protocol "${text}"`, {
    hint: 'use tcp, udp, icmp, gre, esp, ah, sctp or a number from 0 to 255',
  });
}

function parsePort(text: string | undefined): number | undefined {
  if (text === undefined) return undefined;
  const n = Number(text);
  if (!/^\d+$/.test(text) || n < 1 || n > 65535) {
    throw new EgressguardError('usage', `Cannot use port "${text}"`, {
      hint: 'use a number from 1 to 65535',
    });
  }
  return n;
}

/** Registers `explain`. */
export function registerExplain(program: Command, ctx: CommandContext): void {
  program
    .command('explain')
    .description(
      'What happens to one packet: class, verdict, deciding rule, exit interface, layers',
    )
    .argument('<policy>', 'policy file (YAML)')
    .requiredOption('--from <ip>', 'source address')
    .requiredOption('--to <ip>', 'destination address')
    .option('--in <iface>', 'ingress interface (default: found from the source)')
    .option('--proto <proto>', 'tcp, udp, icmp, gre, esp, ah, sctp or a number', 'tcp')
    .option('--port <n>', 'destination port')
    .addOption(new Option('--tunnel <state>', 'tunnel state').choices(['up', 'down']).default('up'))
    .option('--facts <file>', 'host facts (default: facts.json beside the policy)')
    .option('--json', 'print JSON: class, verdict, rule, via, layers, …')
    .addHelpText(
      'after',
      '\nExample:\n  egressguard explain testdata/policies/valid/linux-vpn-gateway/policy.yaml \\\n    --from 10.10.0.5 --to 203.0.113.7 --proto tcp --port 443 --tunnel down',
    )
    .action((file: string, opts: Parameters<typeof runExplain>[1]) => {
      ctx.setExit(runExplain(file, opts, ctx.output));
    });
}
