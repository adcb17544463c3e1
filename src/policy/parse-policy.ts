import { readFileSync } from 'node:fs';
import { LineCounter, parseDocument } from 'yaml';
import { AddressSet, parseAddress } from '../core/index.js';
import { didYouMean } from './did-you-mean.js';
import { hasErrors, type IssueCode, type PolicyIssue } from './issue.js';
import { IssueCollector, type Path } from './locator.js';
import type {
  Destination,
  Policy,
  PolicyClass,
  PolicyRule,
  PortRange,
  Probe,
  Protocol,
  Requirement,
} from './policy.js';
import { NetworkResolver } from './resolve-networks.js';
import {
  policySchema,
  type ClassDefinition,
  type PolicyDocument,
  type ProbeDefinition,
  type ProtocolSpec,
  type RuleDefinition,
} from './schema.js';
import { findShadowedRules } from './shadowed-rules.js';
import { reportZodIssues } from './zod-issues.js';

export interface ParseResult {
  /** Present when there is no error (warnings allowed). */
  readonly policy: Policy | undefined;
  readonly issues: readonly PolicyIssue[];
  /** Reports a later finding (a probe that disagrees) at a place in the policy. */
  readonly report: (path: Path, code: IssueCode, message: string) => PolicyIssue;
}

const PROTOCOL_NUMBERS: Record<string, Protocol> = { gre: 47, esp: 50, ah: 51, sctp: 132 };
const PORT_PROTOCOLS = new Set<Protocol>(['tcp', 'udp', 132]);
const INTERFACE_NAME = /^[A-Za-z0-9_.:@-]{1,15}\*?$/;

/** Reads and validates a policy file; every problem is returned at once, nothing is thrown. */
export function loadPolicy(file: string): ParseResult {
  let text: string;
  try {
    text = readFileSync(file, 'utf8');
  } catch (error) {
    const reason = (error as NodeJS.ErrnoException).code ?? String(error);
    return {
      policy: undefined,
      report: () => {
        throw new Error('unreachable: an unreadable policy has no places to report at');
      },
      issues: [
        {
          code: 'unreadable-file',
          severity: 'error',
          file,
          line: 1,
          column: 1,
          path: '',
          message: `Cannot read policy "${file}": ${reason}: check the path and its permissions`,
        },
      ],
    };
  }
  return parsePolicy(text, file);
}

/** Validates policy text; list files are read relative to `file`. */
export function parsePolicy(text: string, file: string): ParseResult {
  const lines = new LineCounter();
  const doc = parseDocument(text, { lineCounter: lines, prettyErrors: false, uniqueKeys: true });
  const collector = new IssueCollector(file, doc, lines);
  for (const error of doc.errors) {
    const code = error.code === 'DUPLICATE_KEY' ? 'duplicate-key' : 'yaml-syntax';
    const message =
      code === 'duplicate-key'
        ? 'Duplicate key: each key may appear once in a mapping; merge the two entries'
        : `Cannot parse YAML: ${error.message.split('\n')[0] ?? ''}`;
    collector.atOffset(error.pos[0], code, message);
  }
  const report = (path: Path, code: IssueCode, message: string): PolicyIssue => {
    collector.at(path, code, message);
    const issue = collector.issues.at(-1);
    if (issue === undefined) throw new Error('unreachable: an issue was just added');
    return issue;
  };
  if (doc.errors.length > 0) return { policy: undefined, issues: collector.issues, report };

  const parsed = policySchema.safeParse(doc.toJS(), { reportInput: true });
  if (!parsed.success) {
    reportZodIssues(parsed.error.issues, collector);
    return { policy: undefined, issues: sortIssues(collector.issues), report };
  }
  const policy = resolvePolicy(parsed.data, collector, file);
  const issues = sortIssues(collector.issues);
  return { policy: hasErrors(issues) ? undefined : policy, issues, report };
}

function sortIssues(issues: readonly PolicyIssue[]): PolicyIssue[] {
  return [...issues].sort(
    (a, b) => a.file.localeCompare(b.file) || a.line - b.line || a.column - b.column,
  );
}

function resolvePolicy(doc: PolicyDocument, collector: IssueCollector, file: string): Policy {
  const networks = new NetworkResolver(doc.networks, collector, file);
  networks.resolveAll();

  const tunnels = Object.keys(doc.interfaces.tunnels);
  for (const tunnel of tunnels) {
    if (!INTERFACE_NAME.test(tunnel) || tunnel.endsWith('*')) {
      collector.atKey(
        ['interfaces', 'tunnels', tunnel],
        'invalid-interface-name',
        `Tunnel name "${tunnel}" is not a Linux or macOS interface name: use at most 15 letters, digits, ".", "_" or "-"`,
      );
    }
  }
  if (doc.interfaces.uplink !== 'default-route' && !INTERFACE_NAME.test(doc.interfaces.uplink)) {
    collector.at(
      ['interfaces', 'uplink'],
      'invalid-interface-name',
      `Uplink "${doc.interfaces.uplink}" is not an interface name: use "default-route" or a name like eth0`,
    );
  }

  const ruleIds = new Map<string, string>();
  const classes = Object.entries(doc.classes).map(([name, definition]) =>
    resolveClass(name, definition, { collector, networks, tunnels, ruleIds }),
  );
  checkSourceOverlaps(classes, doc, collector);

  const requirementIds = new Set<string>();
  const requirements = doc.requirements.map((requirement, i): Requirement => {
    const path: Path = ['requirements', i];
    if (requirementIds.has(requirement.id)) {
      collector.at(
        [...path, 'id'],
        'duplicate-id',
        `Requirement id "${requirement.id}" is used twice: give each requirement its own id`,
      );
    }
    requirementIds.add(requirement.id);
    return {
      id: requirement.id,
      statement: requirement.statement,
      safetyCritical: requirement.safetyCritical,
      probes: requirement.probes.map((probe, j) =>
        resolveProbe(probe, {
          path: [...path, 'probes', j],
          id: `${requirement.id}#${j + 1}`,
          collector,
        }),
      ),
    };
  });

  return {
    file,
    name: doc.metadata.name,
    uplink: doc.interfaces.uplink,
    tunnels,
    classes,
    requirements,
  };
}

interface ClassContext {
  readonly collector: IssueCollector;
  readonly networks: NetworkResolver;
  readonly tunnels: readonly string[];
  readonly ruleIds: Map<string, string>;
}

function resolveClass(name: string, def: ClassDefinition, ctx: ClassContext): PolicyClass {
  const { collector } = ctx;
  const path: Path = ['classes', name];
  if (!/^[a-z][a-z0-9-]{0,30}$/.test(name)) {
    collector.atKey(
      path,
      'invalid-value',
      `Class name "${name}" is not valid: use lowercase letters, digits and "-", starting with a letter, at most 31 characters`,
    );
  }
  const ingress = def.ingress ?? [];
  if (def.origin === 'forwarded' && ingress.length === 0) {
    collector.atKey(
      path,
      'missing-ingress',
      `Class "${name}" has no ingress interfaces: list the bridge or interfaces its workloads arrive on under "ingress", or set origin: host`,
    );
  }
  if (def.origin === 'host' && ingress.length > 0) {
    collector.at(
      [...path, 'ingress'],
      'ingress-on-host-class',
      `Class "${name}" is host-originated and cannot have ingress interfaces: remove "ingress" or set origin: forwarded`,
    );
  }
  ingress.forEach((iface, i) => {
    if (!INTERFACE_NAME.test(iface)) {
      collector.at(
        [...path, 'ingress', i],
        'invalid-interface-name',
        `Ingress "${iface}" is not an interface name: use at most 15 letters, digits, ".", "_" or "-", optionally ending in "*"`,
      );
    }
  });
  const sources = ctx.networks.resolveEntries(def.sources, [...path, 'sources']);

  let via: PolicyClass['via'] = { kind: 'uplink' };
  if (def.via !== 'uplink') {
    if (ctx.tunnels.includes(def.via)) {
      via = { kind: 'tunnel', name: def.via };
    } else {
      collector.at(
        [...path, 'via'],
        'unknown-interface',
        `Unknown interface "${def.via}" in via${didYouMean(def.via, ['uplink', ...ctx.tunnels])}: use "uplink" or a tunnel declared under interfaces.tunnels`,
      );
    }
  }

  let killSwitch: PolicyClass['killSwitch'] = null;
  if (def.killSwitch !== undefined) {
    const ksPath = [...path, 'killSwitch'];
    if (def.killSwitch.mode === 'audit') {
      collector.at(
        [...ksPath, 'mode'],
        'kill-switch-audit',
        `The kill switch of class "${name}" cannot be in audit mode: logging instead of dropping lets traffic out the uplink when the tunnel fails; remove "mode" (enforce)`,
      );
    }
    if (!collector.has([...path, 'via'])) {
      collector.atKey(
        ksPath,
        'tunnel-class-without-tunnel',
        `Class "${name}" has a kill switch but no tunnel: set "via" to a tunnel declared under interfaces.tunnels`,
      );
    } else if (def.via === 'uplink') {
      collector.at(
        [...path, 'via'],
        'kill-switch-on-uplink',
        `Class "${name}" leaves by the uplink, so a kill switch would block all of it: set "via" to a tunnel, or remove the kill switch`,
      );
    }
    killSwitch = {
      except: ctx.networks.resolveEntries(def.killSwitch.except, [...ksPath, 'except']),
      exceptNames: def.killSwitch.except,
    };
  }

  const rules = def.rules.map((rule, i) => resolveRule(rule, [...path, 'rules', i], ctx));
  rules.forEach((rule, i) => {
    const previous = ctx.ruleIds.get(rule.id);
    if (previous !== undefined) {
      collector.at(
        [...path, 'rules', i, 'id'],
        'duplicate-id',
        `Rule id "${rule.id}" is already used in ${previous}: rule ids name counters and log entries, so each must be unique`,
      );
    } else {
      ctx.ruleIds.set(rule.id, `class "${name}"`);
    }
  });
  const ipv6 = def.ipv6 ?? 'block';
  checkFamilies(name, rules, { sources, ipv6, path, collector });
  for (const { index, by } of findShadowedRules(rules)) {
    collector.at(
      [...path, 'rules', index, 'id'],
      'shadowed-rule',
      `Rule "${rules[index]?.id ?? ''}" never matches: the earlier rule "${by}" matches all its packets; reorder or remove it`,
    );
  }

  return {
    name,
    origin: def.origin,
    ingress,
    sources,
    ipv6,
    labels: def.hosts?.labels ?? {},
    via,
    killSwitch,
    rules,
    defaultAction: def.default,
    nat: def.nat === 'masquerade',
    mssClamp: def.mssClamp ?? null,
  };
}

function resolveRule(rule: RuleDefinition, path: Path, ctx: ClassContext): PolicyRule {
  const { collector } = ctx;
  let destination: Destination;
  if (rule.to === 'any' || rule.to === 'self') {
    destination = { kind: rule.to };
  } else {
    const entries = typeof rule.to === 'string' ? [rule.to] : rule.to;
    const set = ctx.networks.resolveEntries(entries, [...path, 'to']);
    destination = { kind: 'addresses', set, names: entries };
  }

  let protocols: Protocol[] | null = null;
  if (rule.proto !== undefined) {
    const specs = Array.isArray(rule.proto) ? rule.proto : [rule.proto];
    protocols = [];
    specs.forEach((spec, i) => {
      const at = Array.isArray(rule.proto) ? [...path, 'proto', i] : [...path, 'proto'];
      const protocol = toProtocol(spec, at, collector);
      if (protocol !== undefined && !protocols?.includes(protocol)) protocols?.push(protocol);
    });
  }

  let ports: PortRange[] | null = null;
  if (rule.ports !== undefined) {
    ports = [];
    rule.ports.forEach((spec, i) => {
      const range = parsePortRange(spec, [...path, 'ports', i], collector);
      if (range !== undefined) ports?.push(range);
    });
    if (protocols === null) {
      collector.at(
        [...path, 'ports'],
        'ports-without-protocol',
        `Rule "${rule.id}" lists ports but no protocol: add proto: tcp, udp or [tcp, udp]`,
      );
    } else {
      const portless = protocols.filter((p) => !PORT_PROTOCOLS.has(p));
      if (portless.length > 0) {
        collector.at(
          [...path, 'ports'],
          'ports-without-protocol',
          `Rule "${rule.id}" lists ports but protocol ${portless.map((p) => `"${String(p)}"`).join(', ')} has none: ports apply to tcp, udp and sctp; split the rule`,
        );
      }
    }
  }
  return { id: rule.id, action: rule.action, destination, protocols, ports };
}

function toProtocol(
  spec: ProtocolSpec,
  path: Path,
  collector: IssueCollector,
): Protocol | undefined {
  if (typeof spec === 'string') {
    return spec === 'tcp' || spec === 'udp' || spec === 'icmp' ? spec : PROTOCOL_NUMBERS[spec];
  }
  if (spec < 0 || spec > 255) {
    collector.at(
      path,
      'invalid-protocol',
      `Protocol number ${spec} is out of range: use 0 to 255 or a name (tcp, udp, icmp, gre, esp, ah, sctp)`,
    );
    return undefined;
  }
  if (spec === 6) return 'tcp';
  if (spec === 17) return 'udp';
  return spec;
}

function parsePortRange(
  spec: number | string,
  path: Path,
  collector: IssueCollector,
): PortRange | undefined {
  const match = typeof spec === 'number' ? null : /^\s*(\d+)\s*-\s*(\d+)\s*$/.exec(spec);
  const from = typeof spec === 'number' ? spec : match ? Number(match[1]) : NaN;
  const to = typeof spec === 'number' ? spec : match ? Number(match[2]) : NaN;
  if (Number.isNaN(from) || Number.isNaN(to)) {
    collector.at(
      path,
      'port-range',
      `Cannot parse port "${String(spec)}": write a port (443) or a range ("30000-32767")`,
    );
    return undefined;
  }
  if (from < 1 || to > 65535 || from > to) {
    collector.at(
      path,
      'port-range',
      `Port ${typeof spec === 'number' ? spec : `range "${spec}"`} is out of range: ports go from 1 to 65535, low to high`,
    );
    return undefined;
  }
  return { from, to };
}

function checkFamilies(
  name: string,
  rules: readonly PolicyRule[],
  ctx: { sources: AddressSet; ipv6: 'block' | 'allow'; path: Path; collector: IssueCollector },
): void {
  const produces = { 4: ctx.sources.has(4), 6: ctx.sources.has(6) };
  rules.forEach((rule, i) => {
    if (rule.destination.kind !== 'addresses') return;
    for (const family of [4, 6] as const) {
      if (rule.destination.set.has(family) && !produces[family]) {
        ctx.collector.at(
          [...ctx.path, 'rules', i, 'to'],
          'unreachable-family',
          `Rule "${rule.id}" names IPv${family} destinations, but class "${name}" has no IPv${family} source prefix: that part never matches`,
        );
      }
    }
  });
}

function checkSourceOverlaps(
  classes: readonly PolicyClass[],
  doc: PolicyDocument,
  collector: IssueCollector,
): void {
  for (let i = 0; i < classes.length; i++) {
    for (let j = i + 1; j < classes.length; j++) {
      const a = classes[i];
      const b = classes[j];
      if (a === undefined || b === undefined || a.origin !== b.origin) continue;
      if (labelsDisjoint(a.labels, b.labels)) continue;
      const overlap = a.sources.intersect(b.sources);
      if (overlap.isEmpty()) continue;
      const sourcesAt: Path = ['classes', b.name, 'sources'];
      collector.at(
        doc.classes[b.name] === undefined ? [] : sourcesAt,
        'source-overlap',
        `Sources of class "${b.name}" overlap class "${a.name}" (${overlap.describe(3)}): a source belongs to one class only; split the prefixes`,
      );
    }
  }
}

/** Two classes that require different values of one label never meet on a host. */
function labelsDisjoint(
  a: Readonly<Record<string, string>>,
  b: Readonly<Record<string, string>>,
): boolean {
  return Object.entries(a).some(([k, v]) => k in b && b[k] !== v);
}

function resolveProbe(
  probe: ProbeDefinition,
  ctx: { path: Path; id: string; collector: IssueCollector },
): Probe {
  for (const field of ['from', 'to', 'egress'] as const) {
    const value = probe[field];
    if (value !== undefined && parseAddress(value) === undefined) {
      ctx.collector.at(
        [...ctx.path, field],
        'malformed-address',
        `Cannot parse "${value}" as an address: write one address, like 192.0.2.10 or 2001:db8::10`,
      );
    }
  }
  const proto = toProtocol(probe.proto, [...ctx.path, 'proto'], ctx.collector) ?? 'tcp';
  if (probe.port !== undefined && (probe.port < 1 || probe.port > 65535)) {
    ctx.collector.at(
      [...ctx.path, 'port'],
      'port-range',
      `Port ${probe.port} is out of range: ports go from 1 to 65535`,
    );
  }
  return {
    id: probe.id ?? ctx.id,
    from: probe.from,
    in: probe.in,
    to: probe.to,
    proto,
    port: probe.port,
    tunnel: probe.tunnel,
    expect: probe.expect,
    egress: probe.egress,
    via: probe.via,
  };
}
