import { EgressguardError } from '../../core/index.js';
import type { HostFacts } from '../../facts/index.js';
import type { HostIR } from '../../ir/index.js';
import type { Policy } from '../../policy/index.js';
import type { Artifact, BackendOption, BackendOptions } from '../backend.js';
import {
  emitChainsawSuite,
  type ChainsawProbe,
  type ChainsawRequirement,
  type ChainsawSuiteInput,
} from './chainsaw-suite.js';
import { egressGatewayPolicyName } from './cilium-compiler.js';

/** The options of `prove --emit chainsaw`, offered as flags through the suite capability. */
export const CHAINSAW_OPTIONS: readonly BackendOption[] = [
  {
    key: 'echoUrl',
    flag: '--echo-url <url>',
    description:
      "with --emit chainsaw: an HTTP service beyond the gateway that answers with the client address it sees (default: the facts' cluster.tunnelExits)",
  },
  {
    key: 'tunnelUnit',
    flag: '--tunnel-unit <unit>',
    description:
      'with --emit chainsaw: the systemd unit of the tunnel on the gateway node (default wg-quick@TUNNEL.service)',
  },
  {
    key: 'residentUnit',
    flag: '--resident-unit <unit>',
    description:
      "with --emit chainsaw: the systemd unit of egressguard's gateway resident on the gateway node (default egressguard-gateway.service)",
  },
  {
    key: 'wanAddress',
    flag: '--wan-address <ips>',
    description:
      "with --emit chainsaw: the site's WAN addresses, comma-separated, that a tunnel class's answer must never show (default: the gateway's uplink addresses)",
  },
  {
    key: 'tunnelExit',
    flag: '--tunnel-exit <ips>',
    description:
      "with --emit chainsaw: the addresses the echo service sees through the tunnel, comma-separated (default: the facts' cluster.tunnelExits); required for a safety-critical requirement",
  },
  {
    key: 'podNamespace',
    flag: '--pod-namespace <name>',
    description:
      'with --emit chainsaw: the namespace probe pods of a class without one run in (default "default")',
  },
];

function list(text: string | undefined): string[] {
  return (text ?? '')
    .split(',')
    .map((s) => s.trim())
    .filter((s) => s !== '');
}

/**
 * The chainsaw suite input from a policy: probe pods per Kubernetes class, the gateway from the
 * class's kill switch (its node label) and the facts (the gateway node's name and uplink), and a
 * test per requirement with pod probes, L3 when one of them needs the tunnel down.
 */
export function chainsawInputFromPolicy(
  source: { readonly policy: Policy; readonly ir: HostIR; readonly facts: HostFacts },
  options: BackendOptions,
): { input: ChainsawSuiteInput; notes: string[] } {
  const { policy, ir, facts } = source;
  const tunnelName = ir.podClasses.find((c) => c.via.kind === 'tunnel')?.via;
  const exit =
    tunnelName?.kind === 'tunnel' ? ir.cluster?.tunnelExits[tunnelName.interface] : undefined;
  const echoUrl = options['echoUrl'] ?? exit?.echoUrl;
  if (echoUrl === undefined || echoUrl === '') {
    throw new EgressguardError('usage', 'Cannot write the chainsaw suite without --echo-url', {
      hint: 'give an HTTP service beyond the gateway that answers with the client address it sees (--echo-url http://203.0.113.80:8080/)',
    });
  }
  const tunnelClasses = ir.podClasses.filter(
    (c) => c.via.kind === 'tunnel' && c.killSwitch !== null,
  );
  const gatewayClass = tunnelClasses[0];
  if (
    gatewayClass === undefined ||
    gatewayClass.killSwitch === null ||
    gatewayClass.via.kind !== 'tunnel'
  ) {
    throw new EgressguardError(
      'unsupported',
      `Cannot write a chainsaw suite for policy "${policy.name}": it has no Kubernetes class that leaves by a tunnel with a kill switch`,
      { hint: 'the suite proves the egress gateway and its kill switch; add such a class' },
    );
  }
  if (tunnelClasses.length > 1) {
    throw new EgressguardError(
      'unsupported',
      `Cannot write one chainsaw suite for ${tunnelClasses.length} tunnel classes (${tunnelClasses.map((c) => `"${c.name}"`).join(', ')}): a suite drives one gateway`,
      { hint: 'split the policy, one tunnel class per policy' },
    );
  }
  const tunnel = gatewayClass.via.interface;
  const given = list(options['wanAddress']);
  const uplinkAddresses =
    given.length > 0
      ? given
      : facts.interfaces
          .filter((i) => i.name === ir.uplink)
          .flatMap((i) => i.addresses.map((a) => a.split('/')[0] as string));
  const notes: string[] = [];
  const requirements: ChainsawRequirement[] = [];
  for (const r of policy.requirements) {
    if (r.podProbes.length === 0) {
      notes.push(
        `${r.id} has no pod probe: it is proved by \`prove --lab\` and \`check\`, not on the cluster`,
      );
      continue;
    }
    const probes: ChainsawProbe[] = r.podProbes.map((p) => {
      if (p.proto !== 'tcp' && p.proto !== 'udp' && p.proto !== 'icmp') {
        throw new EgressguardError(
          'unsupported',
          `Cannot write probe "${p.id}" of ${r.id} to the chainsaw suite: protocol ${String(p.proto)} (the probe pods send TCP, UDP and ICMP)`,
          { hint: 'probe with tcp, udp or icmp' },
        );
      }
      return {
        from: p.pod,
        to: p.to,
        proto: p.proto,
        ...(p.port === undefined ? {} : { port: p.port }),
        expect: p.expect,
        tunnel: p.tunnel,
      };
    });
    requirements.push({
      id: r.id,
      statement: r.statement,
      level: probes.some((p) => p.tunnel === 'down') ? 'L3' : 'L2',
      safetyCritical: r.safetyCritical,
      probes,
    });
  }
  const input: ChainsawSuiteInput = {
    policy: policy.name,
    classes: ir.podClasses.map((c) => ({
      name: c.name,
      namespace: c.selector.namespace ?? options['podNamespace'] ?? 'default',
      podLabels: { ...c.selector.labels },
      viaTunnel: c.via.kind === 'tunnel',
    })),
    gateway: {
      nodeName: facts.hostname,
      label: gatewayClass.killSwitch.nodeLabel,
      tunnelUnit: options['tunnelUnit'] ?? `wg-quick@${tunnel}.service`,
      residentUnit: options['residentUnit'] ?? 'egressguard-gateway.service',
      egressGatewayPolicy: egressGatewayPolicyName(ir, gatewayClass),
      wanAddresses: uplinkAddresses,
      tunnelExitAddresses:
        options['tunnelExit'] === undefined
          ? [...(exit?.addresses ?? [])]
          : list(options['tunnelExit']),
    },
    echoUrl,
    requirements,
  };
  return { input, notes };
}

/** `prove --emit chainsaw`: the suite's files, or a `usage` error with every input problem. */
export function emitChainsawFromPolicy(input: {
  readonly policy: Policy;
  readonly ir: HostIR;
  readonly facts: HostFacts;
  readonly options: BackendOptions;
}): { files: Artifact[]; notes: string[] } {
  const { input: suite, notes } = chainsawInputFromPolicy(input, input.options);
  const { files, problems } = emitChainsawSuite(suite);
  if (problems.length > 0) {
    throw new EgressguardError(
      'usage',
      `Cannot write the chainsaw suite for policy "${input.policy.name}": ${problems.map((p) => `${p.path}: ${p.message}`).join('; ')}`,
      { hint: 'fix the policy or the --emit options as each problem says' },
    );
  }
  return { files: files.map((f) => ({ name: f.path, content: f.content })), notes };
}
