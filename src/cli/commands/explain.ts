import { Option, type Command } from 'commander';
import type { CommandContext } from '../command-context.js';
import { EgressguardError } from '../../core/index.js';
import { parsePacketArguments, type PacketArguments } from '../../ir/index.js';
import { EXIT } from '../exit-codes.js';
import { explainPacket, explainPodPacket, requireFacts, requirePolicy } from '../../host/index.js';
import { paint, printJson, printLine, type Output } from '../output.js';

export interface ExplainOptions extends Omit<PacketArguments, 'from'> {
  readonly from?: string | undefined;
  /** A Kubernetes class whose pod sends the packet (instead of --from). */
  readonly pod?: string | undefined;
  /** The backend whose layers to name (default: the one for the facts' OS). */
  readonly target?: string | undefined;
  readonly tunnel?: string | undefined;
  readonly facts?: string | undefined;
  readonly json?: boolean | undefined;
}

/** `explain POLICY --from IP --to IP …`: what happens to this packet, and which layer decides. */
export function runExplain(file: string, options: ExplainOptions, output: Output): number {
  const { from, pod } = options;
  if ((from === undefined) === (pod === undefined)) {
    throw new EgressguardError(
      'usage',
      from === undefined
        ? 'Cannot explain a packet without a source'
        : 'Cannot explain a packet from both --from and --pod',
      { hint: 'give --from IP for a host class, or --pod CLASS for a pod of a Kubernetes class' },
    );
  }
  // The packet first: a typo in it is reported before the policy is read.
  parsePacketArguments({ ...options, from: from ?? options.to });
  const tunnel = options.tunnel ?? 'up';
  if (tunnel !== 'up' && tunnel !== 'down') {
    throw new EgressguardError('usage', `Cannot use --tunnel "${tunnel}"`, {
      hint: 'use up or down',
    });
  }
  const { policy } = requirePolicy(file);
  const facts = requireFacts(file, options.facts);
  const result =
    pod === undefined
      ? explainPacket(
          policy,
          facts,
          { ...options, from: from ?? '' },
          { tunnel, backend: options.target },
        )
      : explainPodPacket(policy, facts, { ...options, pod }, { tunnel });
  const layers = result.layers;
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

/** Registers `explain`. */
export function registerExplain(program: Command, ctx: CommandContext): void {
  program
    .command('explain')
    .description(
      'What happens to one packet: class, verdict, deciding rule, exit interface, layers',
    )
    .argument('<policy>', 'policy file (YAML)')
    .option('--from <ip>', 'source address (a host class)')
    .option('--pod <class>', 'a pod of this Kubernetes class sends it (instead of --from)')
    .requiredOption('--to <ip>', 'destination address')
    .option('--in <iface>', 'ingress interface (default: found from the source)')
    .option('--proto <proto>', 'tcp, udp, icmp, gre, esp, ah, sctp or a number', 'tcp')
    .option('--port <n>', 'destination port (tcp, udp and sctp)')
    .option('--icmp-type <n>', 'ICMP or ICMPv6 type (default: echo request)')
    .option(
      '--fragment <part>',
      'a fragment: first or non-first (of a datagram that completes), or alone (one that never does)',
    )
    .addOption(new Option('--tunnel <state>', 'tunnel state').choices(['up', 'down']).default('up'))
    .option('--facts <file>', 'host facts (default: facts.json beside the policy)')
    .option('--target <backend>', "the backend whose layers to name (default: the facts' OS's)")
    .option('--json', 'print JSON: class, verdict, rule, via, layers, …')
    .addHelpText(
      'after',
      '\nExample:\n  egressguard explain testdata/policies/valid/linux-vpn-gateway/policy.yaml \\\n    --from 10.10.0.5 --to 203.0.113.7 --proto tcp --port 443 --tunnel down\n  egressguard explain testdata/policies/valid/k3s-vpn-egress/policy.yaml \\\n    --pod vpn --to 203.0.113.7 --proto tcp --port 443 --tunnel down',
    )
    .action((file: string, opts: Parameters<typeof runExplain>[1]) => {
      ctx.setExit(runExplain(file, opts, ctx.output));
    });
}
