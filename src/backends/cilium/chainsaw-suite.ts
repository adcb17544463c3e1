import { createHash } from 'node:crypto';
import { stringify } from 'yaml';
import { parseAddress } from '../../core/index.js';
import {
  type ProbeCommand,
  buildFaultNamespace,
  buildProbePod,
  buildRunnerRbac,
  gatewayScript,
  probeScript,
  labelNodeScript,
  reapplyPolicyScript,
  runJobScript,
  sourceScript,
  waitGatewayScript,
  waitPodReadyScript,
} from './chainsaw-manifests.js';

/*
 * Writes a kyverno chainsaw (v0.2.15, chainsaw.kyverno.io/v1alpha1) suite that proves a policy's
 * requirements on a real k3s + Cilium cluster. Facts it relies on (shared/reference/chainsaw/
 * NOTES.md): a step's `finally` always runs after its `try`, and accepts only command, delete,
 * describe, events, get, podLogs, script, sleep and wait, so the tunnel restore is a script
 * there; there is no test-level finally; a script's default timeout is 5 s, so each sets one;
 * `=~` is no operator in chainsaw's JMESPath, contains() and regex_match() are. All YAML is block
 * style: a flow map breaks on a comma in a value.
 */

export interface ChainsawClass {
  readonly name: string;
  /** The namespace the class's pods run in; it must exist on the cluster. */
  readonly namespace: string;
  /** The labels that make Cilium's policies select a pod of this class. */
  readonly podLabels: Readonly<Record<string, string>>;
  /** Whether the class leaves through the gateway's tunnel (its answers are checked for leaks). */
  readonly viaTunnel: boolean;
}

export interface ChainsawGateway {
  /**
   * The gateway node's name. The fault Jobs are pinned to it by name: the gateway label is gone
   * while the tunnel is down, and the restart Job must still land there.
   */
  readonly nodeName: string;
  /** The label egressguard keeps on the gateway node only while the tunnel is up. */
  readonly label: { readonly key: string; readonly value: string };
  /** The systemd unit that runs the tunnel on the gateway node, e.g. wg-quick@tun0.service. */
  readonly tunnelUnit: string;
  /** The systemd unit of egressguard's gateway resident there (egressguard-gateway.service). */
  readonly residentUnit: string;
  /** The CiliumEgressGatewayPolicy to re-apply after the tunnel restarts. */
  readonly egressGatewayPolicy: string;
  /** What the echo service sees when traffic leaves by the site's uplink: never for a tunnel class. */
  readonly wanAddresses: readonly string[];
  /**
   * What the echo service sees through the tunnel: every answer to a tunnel class must be one of
   * these. Required when a requirement is safety-critical; without it only "never the WAN address"
   * is checked, which cannot see a leak by another address (a site's NAT).
   */
  readonly tunnelExitAddresses: readonly string[];
}

export interface ChainsawProbe {
  /** A class name. */
  readonly from: string;
  readonly to: string;
  readonly proto: 'tcp' | 'udp' | 'icmp';
  readonly port?: number;
  readonly expect: 'allow' | 'deny';
  readonly tunnel: 'up' | 'down';
}

export type RequirementLevel = 'L1' | 'L2' | 'L3';

export interface ChainsawRequirement {
  readonly id: string;
  readonly statement: string;
  /** L1 is static (the evaluator agrees): nothing to run on a cluster, so no test is written. */
  readonly level: RequirementLevel;
  readonly safetyCritical: boolean;
  readonly probes: readonly ChainsawProbe[];
}

export interface ChainsawSuiteInput {
  /** The policy's name, for descriptions. */
  readonly policy: string;
  readonly classes: readonly ChainsawClass[];
  readonly gateway: ChainsawGateway;
  /** An HTTP service beyond the gateway that answers with the client address it sees, as text. */
  readonly echoUrl: string;
  readonly requirements: readonly ChainsawRequirement[];
  /** Needs nc (-z, -u, -w), wget and ping (busybox has them). */
  readonly probeImage?: string;
  /** Needs nsenter. */
  readonly faultImage?: string;
  /** Where the fault Jobs and the runner's ServiceAccount live (Pod Security "privileged"). */
  readonly faultNamespace?: string;
}

export type SuiteProblemCode =
  | 'invalid-name'
  | 'invalid-label'
  | 'invalid-address'
  | 'unsafe-value'
  | 'duplicate-class'
  | 'duplicate-requirement'
  | 'unknown-class'
  | 'missing-port'
  | 'no-probes'
  | 'safety-critical-below-l3'
  | 'l3-without-fault'
  | 'missing-tunnel-exit';

/** A problem in the suite's input, as data. */
export interface SuiteProblem {
  readonly code: SuiteProblemCode;
  /** Dotted path in the input, e.g. requirements[1].probes[0].from. */
  readonly path: string;
  readonly message: string;
}

export interface EmittedFile {
  /** Relative to the suite's directory. */
  readonly path: string;
  readonly content: string;
}

export const DEFAULT_PROBE_IMAGE = 'docker.io/library/busybox:1.36.1';
export const DEFAULT_FAULT_IMAGE = 'docker.io/library/busybox:1.36.1';
export const DEFAULT_FAULT_NAMESPACE = 'egressguard-chainsaw';
const RUNNER_SERVICE_ACCOUNT = 'egressguard-chainsaw-runner';

const TIMEOUT = {
  probe: '30s',
  source: '30s',
  apply: '30s',
  podReady: '150s',
  precondition: '30s',
  job: '180s',
  gatewayGone: '60s',
  gatewayBack: '180s',
  reapply: '30s',
} as const;

const DNS_LABEL = /^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$/;
const DNS_SUBDOMAIN =
  /^(?=.{1,253}$)[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$/;
const LABEL_NAME = /^(?=.{1,63}$)[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$/;
const LABEL_VALUE = /^(?=.{0,63}$)(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$/;
const UNIT = /^[A-Za-z0-9@._:-]+$/;
const IMAGE = /^[A-Za-z0-9./:@_-]+$/;
const REQUIREMENT_ID = /^[A-Za-z0-9][A-Za-z0-9._-]{0,39}$/;

function isLabelKey(key: string): boolean {
  const slash = key.lastIndexOf('/');
  if (slash === -1) return LABEL_NAME.test(key);
  return DNS_SUBDOMAIN.test(key.slice(0, slash)) && LABEL_NAME.test(key.slice(slash + 1));
}

/** Lowercase DNS-label text from anything. */
function slug(text: string): string {
  return text
    .toLowerCase()
    .replace(/[^a-z0-9]+/g, '-')
    .replace(/^-+|-+$/g, '');
}

/** A DNS label of at most `max` characters: shortened with a hash of the whole when too long. */
function shortName(max: number, ...parts: string[]): string {
  const whole = parts
    .map(slug)
    .filter((p) => p !== '')
    .join('-');
  if (whole.length <= max) return whole;
  const hash = createHash('sha256').update(whole).digest('hex').slice(0, 8);
  return `${whole.slice(0, max - 9).replace(/-+$/, '')}-${hash}`;
}

function dnsName(...parts: string[]): string {
  return shortName(63, ...parts);
}

/** Checks the input; an empty list means emitChainsawSuite will write the suite. */
export function checkChainsawSuiteInput(input: ChainsawSuiteInput): SuiteProblem[] {
  const problems: SuiteProblem[] = [];
  const report = (code: SuiteProblemCode, path: string, message: string) => {
    problems.push({ code, path, message });
  };
  const address = (value: string, path: string) => {
    if (parseAddress(value) === undefined) {
      report(
        'invalid-address',
        path,
        `"${value}" is not an IPv4 or IPv6 address: write the address itself`,
      );
    }
  };
  const classes = new Set<string>();
  input.classes.forEach((c, i) => {
    const path = `classes[${i}]`;
    if (classes.has(c.name))
      report(
        'duplicate-class',
        `${path}.name`,
        `Class "${c.name}" is listed twice: list each class once`,
      );
    classes.add(c.name);
    if (slug(c.name) === '')
      report(
        'invalid-name',
        `${path}.name`,
        `Class name "${c.name}" has no letter or digit: name it`,
      );
    if (!DNS_LABEL.test(c.namespace)) {
      report(
        'invalid-name',
        `${path}.namespace`,
        `Namespace "${c.namespace}" is not a DNS label: use lowercase letters, digits and '-'`,
      );
    }
    const labels = Object.entries(c.podLabels);
    if (labels.length === 0) {
      report(
        'invalid-label',
        `${path}.podLabels`,
        `Class "${c.name}" has no pod labels: its probe pods would match no policy; give the labels that select the class`,
      );
    }
    for (const [key, value] of labels) {
      if (!isLabelKey(key) || !LABEL_VALUE.test(value)) {
        report(
          'invalid-label',
          `${path}.podLabels`,
          `Label "${key}=${value}" is not a valid Kubernetes label: see "Syntax and character set" in the Kubernetes labels docs`,
        );
      }
    }
  });

  const g = input.gateway;
  if (!DNS_SUBDOMAIN.test(g.nodeName))
    report(
      'invalid-name',
      'gateway.nodeName',
      `Node name "${g.nodeName}" is not a DNS subdomain: give the node's name as kubectl shows it`,
    );
  if (!isLabelKey(g.label.key) || !LABEL_VALUE.test(g.label.value) || g.label.value === '') {
    report(
      'invalid-label',
      'gateway.label',
      `Gateway label "${g.label.key}=${g.label.value}" is not a valid, non-empty Kubernetes label`,
    );
  }
  if (!UNIT.test(g.residentUnit)) {
    report(
      'unsafe-value',
      'gateway.residentUnit',
      `Resident unit "${g.residentUnit}" has characters a systemd unit name cannot have: give the unit's name, e.g. egressguard-gateway.service`,
    );
  }
  if (g.tunnelExitAddresses.length === 0) {
    const critical = input.requirements.find((r) => r.safetyCritical);
    if (critical !== undefined) {
      report(
        'missing-tunnel-exit',
        'gateway.tunnelExitAddresses',
        `Requirement "${critical.id}" is safety-critical, and without the tunnel's exit addresses the suite can only check that an answer is not the WAN address, which a leak by another address passes: give --tunnel-exit (what the echo service sees through the tunnel)`,
      );
    }
  }
  if (!UNIT.test(g.tunnelUnit)) {
    report(
      'unsafe-value',
      'gateway.tunnelUnit',
      `Tunnel unit "${g.tunnelUnit}" has characters a systemd unit name cannot have: give the unit's name, e.g. wg-quick@tun0.service`,
    );
  }
  if (!DNS_SUBDOMAIN.test(g.egressGatewayPolicy)) {
    report(
      'invalid-name',
      'gateway.egressGatewayPolicy',
      `Policy name "${g.egressGatewayPolicy}" is not a DNS subdomain: give the CiliumEgressGatewayPolicy's name`,
    );
  }
  if (g.wanAddresses.length === 0) {
    report(
      'invalid-address',
      'gateway.wanAddresses',
      'No WAN address given: the suite cannot check that a tunnel class never leaves as the WAN address; give what the echo service sees from the uplink',
    );
  }
  g.wanAddresses.forEach((a, i) => {
    address(a, `gateway.wanAddresses[${i}]`);
  });
  g.tunnelExitAddresses.forEach((a, i) => {
    address(a, `gateway.tunnelExitAddresses[${i}]`);
  });
  if (!/^https?:\/\/[^\s'"\\`$]+$/.test(input.echoUrl)) {
    report(
      'unsafe-value',
      'echoUrl',
      `Echo URL "${input.echoUrl}" must be http(s) without quotes, spaces, backslashes or "$"`,
    );
  }
  for (const [field, value] of [
    ['probeImage', input.probeImage],
    ['faultImage', input.faultImage],
  ] as const) {
    if (value !== undefined && !IMAGE.test(value))
      report('unsafe-value', field, `Image "${value}" is not an image reference`);
  }
  if (input.faultNamespace !== undefined && !DNS_LABEL.test(input.faultNamespace)) {
    report(
      'invalid-name',
      'faultNamespace',
      `Namespace "${input.faultNamespace}" is not a DNS label`,
    );
  }

  const ids = new Set<string>();
  input.requirements.forEach((r, i) => {
    const path = `requirements[${i}]`;
    if (!REQUIREMENT_ID.test(r.id))
      report(
        'invalid-name',
        `${path}.id`,
        `Requirement id "${r.id}" must be at most 40 letters, digits, '.', '_' or '-': it names the test and labels it`,
      );
    if (ids.has(r.id))
      report(
        'duplicate-requirement',
        `${path}.id`,
        `Requirement "${r.id}" appears twice: ids must be unique`,
      );
    ids.add(r.id);
    if (r.safetyCritical && r.level !== 'L3') {
      report(
        'safety-critical-below-l3',
        `${path}.level`,
        `Requirement "${r.id}" is safety-critical at ${r.level}: a safety-critical requirement needs L3 (measured under a fault)`,
      );
    }
    if (r.level === 'L1') return;
    if (r.probes.length === 0)
      report(
        'no-probes',
        `${path}.probes`,
        `Requirement "${r.id}" has no probes: nothing to run on the cluster`,
      );
    if (r.level === 'L3' && !r.probes.some((p) => p.tunnel === 'down')) {
      report(
        'l3-without-fault',
        `${path}.level`,
        `Requirement "${r.id}" is L3 but has no probe with the tunnel down: add one, or lower it to L2`,
      );
    }
    r.probes.forEach((p, j) => {
      const at = `${path}.probes[${j}]`;
      if (!classes.has(p.from))
        report(
          'unknown-class',
          `${at}.from`,
          `Probe from unknown class "${p.from}": use one of ${[...classes].map((c) => `"${c}"`).join(', ')}`,
        );
      address(p.to, `${at}.to`);
      if (
        p.proto !== 'icmp' &&
        (p.port === undefined || !Number.isInteger(p.port) || p.port < 1 || p.port > 65535)
      ) {
        report('missing-port', `${at}.port`, `A ${p.proto} probe needs a port from 1 to 65535`);
      }
    });
  });
  return problems;
}

type Check = Record<string, boolean>;

function script(description: string, content: string, timeout: string, check: Check): object {
  return { description, script: { content, timeout, check } };
}

function describeProbe(p: ChainsawProbe): string {
  const port = p.proto === 'icmp' ? '' : `/${String(p.port)}`;
  return `${p.from} -> ${p.to} ${p.proto}${port}: expect ${p.expect} (tunnel ${p.tunnel})`;
}

interface TestPlan {
  readonly name: string;
  readonly files: EmittedFile[];
}

/**
 * Block-style YAML documents, each opened by `---` (yamllint's document-start), no aliases.
 * Written to YAML 1.1 rules, so "yes", "on" or "0123" are quoted: kubectl and chainsaw read
 * YAML with go-yaml, which would turn them into a boolean or a number.
 */
function toYaml(documents: readonly object[]): string {
  return documents
    .map((d) =>
      stringify(d, {
        version: '1.1',
        directives: true,
        // yaml counts the width from the scalar's indentation: 60 keeps nested lines within 80.
        lineWidth: 60,
        blockQuote: 'literal',
        aliasDuplicateObjects: false,
      }),
    )
    .join('');
}

/** A manifest inside a script's here-document: no document marker, no folding. */
function toEmbeddedYaml(manifest: object): string {
  return stringify(manifest, { version: '1.1', lineWidth: 0, aliasDuplicateObjects: false });
}

/** A fault step: what breaks which layer, and what restores it. */
interface FaultPlan {
  /** The layer the step proves alone, for the step's name. */
  readonly layer: string;
  /** The operations that break it (the first one starts the fault). */
  readonly breaks: object[];
  /** What must hold before the probes run. */
  readonly settled: object[];
  /** The restore, in the step's finally. */
  readonly restore: object[];
}

function planTest(
  input: ChainsawSuiteInput,
  r: ChainsawRequirement,
  classes: Map<string, ChainsawClass>,
): TestPlan {
  const g = input.gateway;
  const faultNamespace = input.faultNamespace ?? DEFAULT_FAULT_NAMESPACE;
  const name = dnsName(r.id, r.level, ...(r.safetyCritical ? ['safety-critical'] : []));
  const tag = `${r.id} ${r.level}`;
  const used = [...new Set(r.probes.map((p) => p.from))]
    .map((c) => classes.get(c))
    .filter((c): c is ChainsawClass => c !== undefined);
  const podOf = (c: ChainsawClass) => dnsName('eg', name, c.name);
  const probeFile = (c: ChainsawClass) => `probe-${shortName(40, c.name)}.yaml`;
  const tunnelClasses = used.filter((c) => c.viaTunnel);
  const up = r.probes.filter((p) => p.tunnel === 'up');
  const down = r.probes.filter((p) => p.tunnel === 'down');
  // UDP probes other than DNS need the far side to echo: a pod of no class sends the same
  // datagram first, so a target that echoes nothing fails the test instead of passing a deny.
  const echoed = r.probes.filter((p) => p.proto === 'udp' && p.port !== 53);
  const controlPod = dnsName('eg', name, 'control');
  const controlFile = 'control.yaml';

  const probeOps = (probes: readonly ChainsawProbe[]) =>
    probes.map((p) => {
      const c = classes.get(p.from) as ChainsawClass;
      const command: ProbeCommand = { to: p.to, proto: p.proto, port: p.port };
      return script(
        `${tag} probe ${describeProbe(p)}`,
        probeScript(c.namespace, podOf(c), command),
        TIMEOUT.probe,
        {
          '($error == null)': true,
          [`(contains($stdout, 'egressguard-probe=${p.expect}'))`]: true,
        },
      );
    });
  const controlOps = (probes: readonly ChainsawProbe[]) =>
    [...new Map(probes.map((p) => [`${p.to}/${String(p.port)}`, p])).values()].map((p) =>
      script(
        `${tag} control: ${p.to} udp/${String(p.port)} echoes a datagram to a pod of no class`,
        probeScript(faultNamespace, controlPod, { to: p.to, proto: 'udp', port: p.port }),
        TIMEOUT.probe,
        { '($error == null)': true, "(contains($stdout, 'egressguard-probe=allow'))": true },
      ),
    );
  const positive = g.tunnelExitAddresses.length > 0;
  const sourceOps = (tunnel: 'up' | 'down') =>
    tunnelClasses.map((c) => {
      const content = sourceScript(c.namespace, podOf(c), {
        url: input.echoUrl,
        wanAddresses: g.wanAddresses,
        tunnelExitAddresses: g.tunnelExitAddresses,
      });
      const check: Check = { '($error == null)': true };
      if (tunnel === 'down') {
        // Fail closed: with the layer broken, nothing answers at all.
        check["(contains($stdout, 'egressguard-source=none'))"] = true;
      } else if (positive) {
        // The rule: the answer came from the tunnel's exit, and from nothing else.
        check["(contains($stdout, 'egressguard-source=tunnel'))"] = true;
      } else {
        // Weak: only "not the WAN address" (no --tunnel-exit); a leak by another address passes.
        check["(regex_match('egressguard-address=[0-9A-Fa-f.:]+', $stdout))"] = true;
        check["(contains($stdout, 'egressguard-source=wan'))"] = false;
      }
      const expectation =
        tunnel === 'down'
          ? 'no answer at all'
          : positive
            ? 'the tunnel exit'
            : 'an answer, not the WAN address (no --tunnel-exit given)';
      return script(
        `${tag} egress source of ${c.name}: ${expectation}`,
        content,
        TIMEOUT.source,
        check,
      );
    });

  const files: EmittedFile[] = used.map((c) => ({
    path: `${name}/${probeFile(c)}`,
    content: toYaml([
      buildProbePod({
        name: podOf(c),
        namespace: c.namespace,
        labels: c.podLabels,
        image: input.probeImage ?? DEFAULT_PROBE_IMAGE,
      }),
    ]),
  }));
  if (echoed.length > 0) {
    files.push({
      path: `${name}/${controlFile}`,
      content: toYaml([
        buildProbePod({
          name: controlPod,
          namespace: faultNamespace,
          labels: { 'egressguard.dev/control': 'true' },
          image: input.probeImage ?? DEFAULT_PROBE_IMAGE,
        }),
      ]),
    });
  }

  const label = (until: 'gone' | 'back', where: 'nodes' | 'ciliumnodes', restore = false) =>
    script(
      `${restore ? 'Restore: the' : 'The'} gateway label ${until === 'gone' ? 'leaves' : 'returns to'} ${where === 'nodes' ? 'the Node' : 'the CiliumNode (what the egress gateway reads)'} ${g.nodeName}`,
      waitGatewayScript(g.label.key, g.label.value, until, g.nodeName, where),
      until === 'gone' ? TIMEOUT.gatewayGone : TIMEOUT.gatewayBack,
      { '($error == null)': true },
    );
  const steps: object[] = [
    {
      name: `${tag}: probe pods and the gateway precondition`,
      try: [
        ...used.map((c) => ({
          description: `Probe pod of class ${c.name} in namespace ${c.namespace}`,
          apply: { file: probeFile(c), timeout: TIMEOUT.apply },
        })),
        ...(echoed.length > 0
          ? [
              {
                description: `Control pod of no class in namespace ${faultNamespace}`,
                apply: { file: controlFile, timeout: TIMEOUT.apply },
              },
            ]
          : []),
        ...[
          ...used.map((c) => ({ ns: c.namespace, pod: podOf(c), what: `the ${c.name} probe pod` })),
          ...(echoed.length > 0
            ? [{ ns: faultNamespace, pod: controlPod, what: 'the control pod' }]
            : []),
        ].map((x) =>
          script(`Wait for ${x.what}`, waitPodReadyScript(x.ns, x.pod), TIMEOUT.podReady, {
            '($error == null)': true,
          }),
        ),
        script(
          `Gateway node ${g.nodeName} carries ${g.label.key}=${g.label.value}`,
          gatewayScript(g.label.key, g.label.value, g.nodeName),
          TIMEOUT.precondition,
          {
            '($error == null)': true,
            "(contains($stdout, 'egressguard-gateway=present'))": true,
          },
        ),
        label('back', 'ciliumnodes'),
      ],
    },
  ];
  if (up.length > 0 || tunnelClasses.length > 0) {
    steps.push({
      name: `${tag}: tunnel up`,
      try: [...controlOps(echoed), ...probeOps(up), ...sourceOps('up')],
    });
  }
  if (down.length > 0) {
    // One name per action: fault tests never run concurrently, and each run replaces the Job.
    const job = (unit: 'tunnel' | 'resident', action: 'stop' | 'start') =>
      script(
        `${action === 'start' ? 'Restore: start' : 'Stop'} ${unit === 'tunnel' ? g.tunnelUnit : g.residentUnit} on ${g.nodeName}`,
        runJobScript(
          {
            namespace: faultNamespace,
            job: `egressguard-${unit}-${action}`,
            node: g.nodeName,
            unit: unit === 'tunnel' ? g.tunnelUnit : g.residentUnit,
            image: input.faultImage ?? DEFAULT_FAULT_IMAGE,
            action,
            fault: `${unit}-${action}`,
          },
          toEmbeddedYaml,
        ),
        TIMEOUT.job,
        { '($error == null)': true },
      );
    const reapply = script(
      `Restore: re-apply ${g.egressGatewayPolicy} (Cilium keeps the old egress IP until then)`,
      reapplyPolicyScript(g.egressGatewayPolicy),
      TIMEOUT.reapply,
      { '($error == null)': true },
    );
    // Every restore brings both units back and waits for the label on the Node and on the
    // CiliumNode: whichever fault ran, the next step starts from a working gateway.
    const restore = [
      job('tunnel', 'start'),
      job('resident', 'start'),
      label('back', 'nodes', true),
      label('back', 'ciliumnodes', true),
      reapply,
    ];
    const faults: FaultPlan[] = [
      {
        // The resident takes the label off as it stops (SIGTERM) and nothing puts it back: the
        // tunnel and the node's routing stay up, so only the missing label can stop the class.
        layer: 'the gateway label alone (the tunnel stays up)',
        breaks: [job('resident', 'stop')],
        settled: [label('gone', 'nodes'), label('gone', 'ciliumnodes')],
        restore,
      },
      {
        // The label back by hand with the resident stopped, then the tunnel down: only the
        // gateway node's routing (its rule for the SNAT address and the blackhole) can drop.
        layer: "the gateway node's routing alone (the label kept on by hand)",
        breaks: [
          job('resident', 'stop'),
          script(
            `Keep ${g.label.key}=${g.label.value} on ${g.nodeName} by hand`,
            labelNodeScript(g.label.key, g.label.value, g.nodeName),
            TIMEOUT.apply,
            { '($error == null)': true },
          ),
          label('back', 'ciliumnodes'),
          {
            ...(reapply as { description: string }),
            description: `Re-apply ${g.egressGatewayPolicy} with the tunnel up`,
          },
          job('tunnel', 'stop'),
        ],
        settled: [],
        restore,
      },
      {
        // The field's fault: the tunnel stops with the resident running; every layer acts.
        layer: `every layer (stop ${g.tunnelUnit} with the resident running)`,
        breaks: [job('tunnel', 'stop')],
        settled: [label('gone', 'nodes'), label('gone', 'ciliumnodes')],
        restore,
      },
    ];
    for (const fault of faults) {
      steps.push({
        name: `${tag}: tunnel down, ${fault.layer}`,
        try: [
          ...fault.breaks,
          ...fault.settled,
          ...controlOps(echoed),
          ...probeOps(down),
          ...sourceOps('down'),
        ],
        // The restore runs whatever happened in try: it was registered before the fault began.
        finally: fault.restore,
      });
    }
    steps.push({
      name: `${tag}: after the faults`,
      try: [...controlOps(echoed), ...probeOps(up), ...sourceOps('up')],
    });
  }

  const test = {
    apiVersion: 'chainsaw.kyverno.io/v1alpha1',
    kind: 'Test',
    metadata: {
      name,
      labels: {
        'app.kubernetes.io/managed-by': 'egressguard',
        'egressguard.dev/requirement': r.id,
        'egressguard.dev/level': r.level,
        'egressguard.dev/safety-critical': String(r.safetyCritical),
      },
    },
    spec: {
      description: `${r.id} (${r.level}${r.safetyCritical ? ', safety-critical' : ''}): ${r.statement} [policy ${input.policy}]`,
      // A tunnel fault touches a node every test shares.
      ...(down.length > 0 ? { concurrent: false } : {}),
      steps,
    },
  };
  files.unshift({ path: `${name}/chainsaw-test.yaml`, content: toYaml([test]) });
  return { name, files };
}

function readme(
  input: ChainsawSuiteInput,
  tests: readonly string[],
  skipped: readonly string[],
): string {
  const namespace = input.faultNamespace ?? DEFAULT_FAULT_NAMESPACE;
  return [
    `# Chainsaw suite for policy ${input.policy}`,
    '',
    'Generated by egressguard; do not edit. Each test proves one requirement on the cluster; its',
    'name carries the requirement id and level, and its labels carry `egressguard.dev/requirement`,',
    '`egressguard.dev/level` and `egressguard.dev/safety-critical` (select with `--selector`).',
    '',
    '## Before the first run (a cluster admin, once)',
    '',
    '```sh',
    'kubectl apply -f setup/egressguard-chainsaw.yaml',
    '```',
    '',
    `This creates namespace \`${namespace}\` (Pod Security \`privileged\`: the tunnel fault Jobs run`,
    'privileged with the host PID namespace on the gateway node) and the ServiceAccount',
    `\`${RUNNER_SERVICE_ACCOUNT}\` with the ClusterRole the runner needs. Run chainsaw with that`,
    'identity. The class namespaces must exist; probe pods pass Pod Security `restricted`.',
    '',
    '## Run',
    '',
    '```sh',
    'chainsaw test --test-dir .',
    '```',
    '',
    'Tests with faults run alone (`concurrent: false`). Each fault breaks one layer: the gateway',
    'label alone (the resident stopped, the tunnel up), the gateway node routing alone (the label',
    'kept on by hand, the resident stopped, the tunnel down), and then every layer (the tunnel',
    'stopped with the resident running). Before probing, each waits until the CiliumNode (what',
    "Cilium's egress gateway reads) carries the change. The restore (both units started, the label",
    'back on the Node and the CiliumNode, the egress gateway policy re-applied) sits in the fault',
    "step's `finally`, so it runs whatever happens.",
    '',
    '## Tests',
    '',
    ...tests.map((t) => `- \`${t}\``),
    ...(skipped.length === 0
      ? []
      : [
          '',
          'Not run on the cluster (L1, proved statically by `egressguard check`):',
          '',
          ...skipped.map((s) => `- ${s}`),
        ]),
    '',
    '## Assumptions',
    '',
    `- \`${input.echoUrl}\` answers an HTTP GET with the client address it sees, as plain text;`,
    input.gateway.tunnelExitAddresses.length > 0
      ? `  every answer to a tunnel class must be the tunnel exit (${input.gateway.tunnelExitAddresses.join(', ')}).`
      : '  without --tunnel-exit an answer is only checked not to be the WAN address (weak).',
    '- Probes to port 53 send a real DNS query and pass on any DNS answer.',
    '- Other UDP probes need the target to echo the datagram back: a pod of no class sends it',
    '  first (the control), so a target that does not echo fails the test.',
    `- The gateway node runs the tunnel as \`${input.gateway.tunnelUnit}\` and egressguard's`,
    `  resident as \`${input.gateway.residentUnit}\`.`,
    '- The probe image has `nc` (with `-z`, `-u`, `-w`), `wget` and `ping`; the fault image has',
    '  `nsenter`. Both default to busybox.',
    '',
  ].join('\n');
}

/**
 * Writes the chainsaw suite for a policy's requirements, or returns the input's problems (and no
 * files). Pure: the caller writes the files.
 */
export function emitChainsawSuite(input: ChainsawSuiteInput): {
  readonly files: readonly EmittedFile[];
  readonly problems: readonly SuiteProblem[];
} {
  const problems = checkChainsawSuiteInput(input);
  if (problems.length > 0) return { files: [], problems };
  const classes = new Map(input.classes.map((c) => [c.name, c]));
  const namespace = input.faultNamespace ?? DEFAULT_FAULT_NAMESPACE;
  const files: EmittedFile[] = [
    {
      path: 'setup/egressguard-chainsaw.yaml',
      content: toYaml([
        buildFaultNamespace(namespace),
        ...buildRunnerRbac(namespace, RUNNER_SERVICE_ACCOUNT),
      ]),
    },
  ];
  const tests: string[] = [];
  const skipped: string[] = [];
  for (const r of input.requirements) {
    if (r.level === 'L1') {
      skipped.push(`${r.id}: ${r.statement}`);
      continue;
    }
    const plan = planTest(input, r, classes);
    tests.push(plan.name);
    files.push(...plan.files);
  }
  files.push({ path: 'README.md', content: readme(input, tests, skipped) });
  return {
    files: files.sort((a, b) => (a.path < b.path ? -1 : a.path > b.path ? 1 : 0)),
    problems: [],
  };
}
