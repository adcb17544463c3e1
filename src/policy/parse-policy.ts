import { readFileSync } from 'node:fs';
import { LineCounter, parseDocument } from 'yaml';
import { AddressSet, parseAddress, type Family } from '../core/index.js';
import { didYouMean } from './did-you-mean.js';
import {
  partsOfDocument,
  salvageDocumentParts,
  type ClassPart,
  type DocumentParts,
  type RulePart,
} from './document-parts.js';
import { formatPath, hasErrors, type IssueCode, type PolicyIssue } from './issue.js';
import { findInterfaceNameProblem, matchesInterface } from './interface-name.js';
import { IssueCollector, type Path } from './locator.js';
import type {
  PodClass,
  PodProbe,
  Destination,
  Policy,
  PolicyClass,
  PolicyRule,
  PortRange,
  Probe,
  Protocol,
  Requirement,
  TunnelMatch,
} from './policy.js';
import { NetworkResolver, describeReadError } from './resolve-networks.js';
import {
  NAME_PATTERN,
  policySchema,
  type ClassDefinition,
  type PodSelectorDefinition,
  type ProbeDefinition,
  type ProtocolSpec,
} from './schema.js';
import { findDhcpToHostDenial } from './dhcp-to-host.js';
import { findShadowedRules } from './shadowed-rules.js';
import { hasPorts, parseProtocol, PROTOCOL_NAMES } from './protocol.js';
import { reportZodIssues } from './zod-issues.js';

export interface ParseResult {
  /** Present when there is no error (warnings allowed). */
  readonly policy: Policy | undefined;
  readonly issues: readonly PolicyIssue[];
  /** Reports a later finding (a probe that disagrees) at a place in the policy. */
  readonly report: (path: Path, code: IssueCode, message: string) => PolicyIssue;
}

// Rule ids become firewall object names and labels; "/" separates the generated ids (vm/default).
const RULE_ID = /^[A-Za-z0-9][A-Za-z0-9_.-]{0,62}$/;

/** Reads and validates a policy file; every problem is returned at once, nothing is thrown. */
export function loadPolicy(file: string): ParseResult {
  let text: string;
  try {
    text = readFileSync(file, 'utf8');
  } catch (error) {
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
          message: `Cannot read policy "${file}": ${describeReadError(error)}: check the path and its permissions`,
        },
      ],
    };
  }
  return parsePolicy(text, file);
}

export interface ParseOptions {
  /**
   * Whether `files:` lists are read (relative to `file`). A server given policy text by a client
   * passes false: it never opens a path a client sent it, and each `files:` is an error that says
   * how to inline the lists instead.
   */
  readonly readListFiles?: boolean;
}

/** Validates policy text; list files are read relative to `file`. */
export function parsePolicy(text: string, file: string, options: ParseOptions = {}): ParseResult {
  const lines = new LineCounter();
  const doc = parseDocument(text, { lineCounter: lines, prettyErrors: false, uniqueKeys: true });
  const collector = new IssueCollector(file, doc, lines);
  const report = (path: Path, code: IssueCode, message: string): PolicyIssue => {
    collector.at(path, code, message);
    const issue = collector.issues.at(-1);
    if (issue === undefined) throw new Error('unreachable: an issue was just added');
    return issue;
  };
  let syntaxError = false;
  for (const error of doc.errors) {
    if (error.code === 'DUPLICATE_KEY') {
      const key = collector.keyAtOffset(error.pos[0]);
      const where =
        key === undefined || key.parent.length === 0 ? 'the policy' : `"${formatPath(key.parent)}"`;
      collector.atOffset(
        error.pos[0],
        'duplicate-key',
        `Duplicate key${key === undefined ? '' : ` "${key.key}"`} in ${where}: a key may appear once in a mapping; merge the two entries or rename one`,
      );
    } else if (!syntaxError) {
      // Only the first: after a syntax error the parser's later complaints are mostly echoes.
      syntaxError = true;
      const detail = (error.message.split('\n')[0] ?? '').replace(
        / at line \d+, column \d+:?$/,
        '',
      );
      collector.atOffset(error.pos[0], 'yaml-syntax', `Cannot parse YAML: ${detail}`);
    }
  }
  // A duplicate key leaves a usable document (the last entry wins): check the rest too.
  if (syntaxError) return { policy: undefined, issues: collector.ordered(), report };

  // An empty file is an empty policy: report its missing fields rather than a type.
  let raw: unknown = {};
  try {
    if (doc.contents !== null) raw = doc.toJS();
  } catch (error) {
    // toJS throws on an alias to no anchor, and on too many aliases (a "billion laughs").
    const alias = collector.findUnresolvedAlias();
    if (alias === undefined) {
      const message = (error as Error).message;
      collector.atOffset(
        0,
        'yaml-syntax',
        message.startsWith('Excessive alias count')
          ? 'Cannot parse YAML: its aliases expand too often (more than 100 times), the shape of a resource exhaustion attack: write the values out, or use fewer aliases'
          : `Cannot parse YAML: ${message}`,
      );
    } else {
      collector.atOffset(
        alias.offset,
        'yaml-syntax',
        `Cannot parse YAML: alias "*${alias.name}" refers to no anchor before it${didYouMean(alias.name, alias.anchors)}: define "&${alias.name}" earlier, or fix the name`,
      );
    }
    return { policy: undefined, issues: collector.ordered(), report };
  }
  const parsed = policySchema.safeParse(raw, { reportInput: true });
  let parts: DocumentParts | undefined;
  if (parsed.success) {
    parts = partsOfDocument(parsed.data);
  } else {
    reportZodIssues(parsed.error.issues, collector);
    parts = salvageDocumentParts(raw);
  }
  const policy =
    parts === undefined
      ? undefined
      : resolvePolicy(parts, collector, { file, readListFiles: options.readListFiles ?? true });
  const issues = collector.ordered();
  return { policy: parsed.success && !hasErrors(issues) ? policy : undefined, issues, report };
}

function resolvePolicy(
  parts: DocumentParts,
  collector: IssueCollector,
  source: { readonly file: string; readonly readListFiles: boolean },
): Policy {
  const { file } = source;
  const networks = new NetworkResolver(parts.networks, collector, {
    policyFile: file,
    readListFiles: source.readListFiles,
    broken: parts.brokenNetworks,
  });
  networks.resolveAll();

  const { tunnels, uplink } = parts;
  for (const tunnel of tunnels) {
    const problem = findInterfaceNameProblem(tunnel, { prefix: false });
    if (problem !== undefined) {
      collector.atKey(
        ['interfaces', 'tunnels', tunnel],
        'invalid-interface-name',
        `Tunnel "${tunnel}" is not an interface name: ${problem}`,
      );
    } else if (tunnel === 'uplink') {
      collector.atKey(
        ['interfaces', 'tunnels', tunnel],
        'invalid-interface-name',
        'Tunnel name "uplink" is reserved: "via: uplink" means the uplink; rename the tunnel',
      );
    }
  }
  const tunnelMatches = resolveTunnelMatches(parts, collector);
  if (uplink !== 'default-route') {
    const problem = findInterfaceNameProblem(uplink, { prefix: false });
    if (problem !== undefined) {
      collector.at(
        ['interfaces', 'uplink'],
        'invalid-interface-name',
        `Uplink "${uplink}" is not an interface name: ${problem} (or use "default-route")`,
      );
    } else if (tunnels.includes(uplink)) {
      collector.at(
        ['interfaces', 'uplink'],
        'invalid-value',
        `Uplink "${uplink}" is also declared as a tunnel: the uplink is the way out that tunnel classes must never take; name another interface or use "default-route"`,
      );
    }
  }

  const ruleIds = new Map<string, string>();
  const ctx: ClassContext = { collector, networks, tunnels, uplink, ruleIds };
  const classes: PolicyClass[] = [];
  const podClasses: PodClass[] = [];
  for (const part of parts.classes) {
    if (part.definition.pods === undefined) classes.push(resolveClass(part, ctx));
    else podClasses.push(resolvePodClass(part, part.definition.pods, ctx));
  }
  checkPodSelectorOverlaps(podClasses, collector);
  checkSourceOverlaps(classes, collector);
  checkIngressOverlaps(classes, collector);

  const requirementIds = new Set<string>();
  const probeIds = new Map<string, { path: Path; explicit: boolean }>();
  const requirements = parts.requirements.map(({ index, definition, probes }): Requirement => {
    const path: Path = ['requirements', index];
    if (requirementIds.has(definition.id)) {
      collector.at(
        [...path, 'id'],
        'duplicate-id',
        `Requirement id "${definition.id}" is used twice: give each requirement its own id`,
      );
    }
    requirementIds.add(definition.id);
    const podProbes: PodProbe[] = [];
    const hostProbes = probes.filter(({ index: j, value }) => {
      const probePath: Path = [...path, 'probes', j];
      const podProbe = resolvePodProbe(value, {
        path: probePath,
        index: j,
        id: `${definition.id}#${j + 1}`,
        collector,
        podClasses: parts.classes.filter((c) => c.definition.pods !== undefined).map((c) => c.name),
      });
      if (podProbe === 'host') return true;
      if (podProbe !== undefined) podProbes.push(podProbe);
      return false;
    });
    return {
      id: definition.id,
      statement: definition.statement,
      safetyCritical: definition.safetyCritical,
      podProbes,
      probes: hostProbes.map(({ index: j, value }) => {
        const probePath: Path = [...path, 'probes', j];
        const probe = resolveProbe(
          { ...value, from: value.from ?? '' },
          {
            path: probePath,
            id: `${definition.id}#${j + 1}`,
            collector,
          },
        );
        const previous = probeIds.get(probe.id);
        const explicit = value.id !== undefined;
        if (previous === undefined) {
          probeIds.set(probe.id, { path: probePath, explicit });
        } else if (explicit || previous.explicit) {
          // Two derived ids collide only when requirement ids do, which is reported above.
          collector.at(
            value.id === undefined ? probePath : [...probePath, 'id'],
            'duplicate-id',
            `Probe id "${probe.id}" is already used at "${formatPath(previous.path)}": results and evidence are keyed by it; give this probe its own id`,
          );
        }
        return probe;
      }),
    };
  });

  return {
    file,
    name: parts.name,
    uplink,
    tunnels,
    tunnelMatches,
    classes,
    podClasses,
    requirements,
  };
}

/** Each tunnel's `match`: one address each for `address` and `peer`, at least one of them. */
function resolveTunnelMatches(
  parts: DocumentParts,
  collector: IssueCollector,
): Record<string, TunnelMatch> {
  const out: Record<string, TunnelMatch> = {};
  for (const [name, match] of Object.entries(parts.tunnelMatches)) {
    const path = ['interfaces', 'tunnels', name, 'match'];
    if (match.address === undefined && match.peer === undefined) {
      collector.at(
        path,
        'empty-tunnel-match',
        `The match of tunnel "${name}" names neither an address nor a peer, so it would find no interface: give "address" (the tunnel's own address) or "peer" (its far end), or remove "match" to find the tunnel by its name`,
      );
      continue;
    }
    let sound = true;
    for (const field of ['address', 'peer'] as const) {
      const value = match[field];
      if (value === undefined || parseAddress(value) !== undefined) continue;
      sound = false;
      collector.at(
        [...path, field],
        'malformed-address',
        `Cannot parse "${value}" as an address: write one address without a prefix length, like 10.8.0.2 or 2001:db8::2`,
      );
    }
    if (sound) out[name] = { address: match.address ?? null, peer: match.peer ?? null };
  }
  return out;
}

interface ClassContext {
  readonly collector: IssueCollector;
  readonly networks: NetworkResolver;
  readonly tunnels: readonly string[];
  /** "default-route" or the uplink's name. */
  readonly uplink: string;
  readonly ruleIds: Map<string, string>;
}

function checkClassName(
  name: string,
  at: { readonly collector: IssueCollector; readonly path: Path },
): void {
  if (NAME_PATTERN.test(name)) return;
  at.collector.atKey(
    at.path,
    'invalid-value',
    `Class name "${name}" is not valid: use lowercase letters, digits and "-", starting with a letter, at most 31 characters`,
  );
}

function resolveClass(part: ClassPart, ctx: ClassContext): PolicyClass {
  const { collector } = ctx;
  const { name, definition: def } = part;
  const path: Path = ['classes', name];
  checkClassName(name, { collector, path });
  const ingress = def.ingress ?? [];
  if (def.origin === 'forwarded' && ingress.length === 0) {
    collector.atKey(
      path,
      'missing-ingress',
      `Class "${name}" has no ingress interfaces: list the bridge or interfaces its workloads arrive on under "ingress", or set "origin: host" for traffic the host itself sends`,
      { absent: { object: path, field: 'ingress' } },
    );
  }
  if (def.origin === 'host' && ingress.length > 0) {
    collector.at(
      [...path, 'ingress'],
      'ingress-on-host-class',
      `Class "${name}" is host-originated and cannot have ingress interfaces: remove "ingress" or set "origin: forwarded"`,
    );
  }
  ingress.forEach((iface, i) => {
    const problem = findInterfaceNameProblem(iface, { prefix: true });
    if (problem !== undefined) {
      collector.at(
        [...path, 'ingress', i],
        'invalid-interface-name',
        `Ingress "${iface}" is not an interface name or prefix: ${problem}`,
      );
      return;
    }
    // A class arrives on the interfaces its workloads sit behind, never on a way out: its rules
    // would judge what comes back from the internet or out of the tunnel. (An uplink found from
    // the default route is checked per host, when the policy is bound to its facts.)
    const exits = [...ctx.tunnels, ...(ctx.uplink === 'default-route' ? [] : [ctx.uplink])];
    const exit = exits.find((name) => matchesInterface(iface, name));
    if (exit !== undefined) {
      collector.at(
        [...path, 'ingress', i],
        'ingress-on-exit',
        `Ingress "${iface}" of class "${name}" matches ${exit === ctx.uplink ? 'the uplink' : 'tunnel'} "${exit}", a way out, not where workloads arrive: list the bridge or interfaces the class's workloads sit behind`,
      );
    }
  });
  if (def.sources === undefined) {
    collector.atKey(
      path,
      'missing-field',
      `Missing required field "sources" in "classes.${name}": add it (source prefixes of the class, both families), or select Kubernetes pods with "pods"`,
    );
  }
  const sources = ctx.networks.resolveEntries(def.sources ?? [], [...path, 'sources']);

  const { via, killSwitch } = resolveExit(name, def, { path, ctx, sources });

  const resolved = resolveClassRules(part, path, ctx);
  const rules = resolved.map((r) => r.rule);
  const ipv6 = def.ipv6 ?? 'block';
  if (def.ipv6 === 'block' && sources.has(6)) {
    collector.at(
      [...path, 'ipv6'],
      'ipv6-block-with-ipv6-sources',
      `Class "${name}" says "ipv6: block" but lists IPv6 sources (${sources.only(6).describe(3)}): "block" only applies to a class without IPv6 prefixes, so its IPv6 would pass; remove the IPv6 sources to block its IPv6, or remove "ipv6: block"`,
    );
  }
  checkFamilies(name, resolved, { def, sources, ipv6, path, collector });
  if (via.kind === 'tunnel' && ipv6 === 'allow' && !sources.isEmpty() && !sources.has(6)) {
    // Steering is an `ip rule from <source>`: with no IPv6 prefix no rule selects the class's
    // IPv6, which then takes the main table (or dies in the kill switch), not the tunnel.
    collector.at(
      [...path, 'ipv6'],
      'unsteerable-ipv6',
      `Class "${name}" leaves by tunnel "${via.name}" and lets its IPv6 through ("ipv6: allow"), but has no IPv6 source prefix: tunnel steering selects a class's packets by source, so its IPv6 would never reach the tunnel; add the class's IPv6 prefixes to sources, or leave ipv6 blocked`,
    );
  }
  checkShadowedRules(resolved, path, collector);
  checkDhcpToHost({ origin: def.origin, ingress }, resolved, {
    name,
    path,
    collector,
  });

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

/** `via` and the kill switch of a class, host or pod (sources null: a pod class, both families). */
function resolveExit(
  name: string,
  def: Pick<ClassDefinition, 'via' | 'killSwitch'>,
  where: { path: Path; ctx: ClassContext; sources: AddressSet | null },
): { via: PolicyClass['via']; killSwitch: PolicyClass['killSwitch'] } {
  const { path, ctx, sources } = where;
  const { collector } = ctx;
  let via: PolicyClass['via'] = { kind: 'uplink' };
  if (def.via !== 'uplink') {
    if (ctx.tunnels.includes(def.via)) {
      via = { kind: 'tunnel', name: def.via };
    } else {
      collector.at(
        [...path, 'via'],
        'unknown-interface',
        `Unknown interface "${def.via}" in "via"${didYouMean(def.via, ['uplink', ...ctx.tunnels])}: use "uplink" or a tunnel declared under "interfaces.tunnels"`,
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
        `The kill switch of class "${name}" cannot be in audit mode: logging instead of dropping lets traffic out the uplink when the tunnel fails; remove "mode" (or set it to "enforce")`,
      );
    }
    if (!collector.has([...path, 'via'])) {
      collector.atKey(
        ksPath,
        'tunnel-class-without-tunnel',
        ctx.tunnels.length === 0
          ? `Class "${name}" has a kill switch but no tunnel: declare the tunnel under "interfaces.tunnels" and set "via" to it`
          : `Class "${name}" has a kill switch but no tunnel: set "via" to a tunnel (${ctx.tunnels.map((t) => `"${t}"`).join(', ')})`,
      );
    } else if (def.via === 'uplink') {
      collector.at(
        [...path, 'via'],
        'kill-switch-on-uplink',
        `Class "${name}" leaves by the uplink, so its kill switch would block all of its traffic: set "via" to a tunnel, or remove "killSwitch"`,
      );
    }
    killSwitch = {
      except: ctx.networks.resolveEntries(def.killSwitch.except, [...ksPath, 'except']),
      exceptNames: def.killSwitch.except,
    };
    for (const f of [4, 6] as const) {
      if ((sources !== null && !sources.has(f)) || !coversFamily(killSwitch.except, f)) continue;
      collector.at(
        [...ksPath, 'except'],
        'kill-switch-covers-everything',
        `The kill switch of class "${name}" excepts every IPv${f} destination, so its IPv${f} never uses tunnel "${def.via}" (it leaves by the main routing table): except only the networks that may bypass the tunnel (the LAN, the tunnel's endpoint)`,
      );
    }
  } else if (via.kind === 'tunnel') {
    collector.at(
      [...path, 'via'],
      'tunnel-without-kill-switch',
      `Class "${name}" leaves by tunnel "${via.name}" without a kill switch: while the tunnel is down its traffic falls back to the main table and leaves by the uplink; add "killSwitch: {}" unless that is intended`,
      { absent: { object: path, field: 'killSwitch' } },
    );
  }

  return { via, killSwitch };
}

function resolveClassRules(
  part: ClassPart,
  path: Path,
  ctx: ClassContext,
): { index: number; rule: PolicyRule }[] {
  const { collector } = ctx;
  const { name } = part;
  const resolved = part.rules.map(({ index, value }) => ({
    index,
    rule: resolveRule(value, [...path, 'rules', index], ctx),
  }));
  for (const { index, rule } of resolved) {
    const previous = ctx.ruleIds.get(rule.id);
    if (!RULE_ID.test(rule.id)) {
      collector.at(
        [...path, 'rules', index, 'id'],
        'invalid-value',
        rule.id.includes('/')
          ? `Rule id "${rule.id}" is not valid: "/" is reserved for the ids egressguard generates (like "${name}/default" and "${name}/kill-switch"); use letters, digits, ".", "_" and "-"`
          : `Rule id "${rule.id}" is not valid: it names firewall counters and labels, so use at most 63 letters, digits, ".", "_" and "-", starting with a letter or digit`,
      );
    } else if (previous !== undefined) {
      collector.at(
        [...path, 'rules', index, 'id'],
        'duplicate-id',
        `Rule id "${rule.id}" is already used in ${previous}: rule ids name counters and log entries, so each must be unique; rename one`,
      );
    } else {
      ctx.ruleIds.set(rule.id, `class "${name}"`);
    }
  }
  return resolved;
}

/** Warns when the class denies its workloads' DHCP renewals to the host (dhcp-to-host.ts). */
function checkDhcpToHost(
  cls: Pick<PolicyClass, 'origin' | 'ingress'>,
  resolved: readonly { index: number; rule: PolicyRule }[],
  where: { name: string; path: Path; collector: IssueCollector },
): void {
  const denial = findDhcpToHostDenial({ ...cls, rules: resolved.map((r) => r.rule) });
  if (denial === null) return;
  const index = resolved.find((r) => r.rule.id === denial.by)?.index ?? 0;
  where.collector.at(
    [...where.path, 'rules', index, 'id'],
    'dhcp-to-host-denied',
    `Class "${where.name}" denies its workloads DHCP to the host (rule "${denial.by}") on ${denial.interfaces.join(', ')}, where the host usually serves DHCP: lease renewals (unicast) and rebinds (broadcast from the leased address) are UDP port 67 to the host, so leases lapse as they expire; allow udp port 67 to self before it`,
  );
}

function checkShadowedRules(
  resolved: readonly { index: number; rule: PolicyRule }[],
  path: Path,
  collector: IssueCollector,
): void {
  // A rule with an error is not what its author meant: judging its reach would only add noise.
  const sound = resolved.filter(
    ({ index }) => !collector.hasErrorsUnder([...path, 'rules', index]),
  );
  for (const { index, by } of findShadowedRules(sound.map((r) => r.rule))) {
    const shadowed = sound[index];
    if (shadowed === undefined) continue;
    const earlier =
      by.length === 1
        ? `the earlier rule "${by[0] ?? ''}" matches`
        : `the earlier rules ${by.map((id) => `"${id}"`).join(', ')} together match`;
    collector.at(
      [...path, 'rules', shadowed.index, 'id'],
      'shadowed-rule',
      `Rule "${shadowed.rule.id}" never matches: ${earlier} all its packets (the first match wins); reorder or remove it`,
    );
  }
}

function resolveRule(rule: RulePart, path: Path, ctx: ClassContext): PolicyRule {
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
      if (spec === null) return; // failed the schema, reported there
      const range = parsePortRange(spec, [...path, 'ports', i], collector);
      if (range !== undefined) ports?.push(range);
    });
    if (protocols === null) {
      collector.at(
        [...path, 'ports'],
        'ports-without-protocol',
        `Rule "${rule.id}" lists ports but no protocol, and only tcp, udp and sctp have ports: add "proto: tcp", "proto: udp" or "proto: [tcp, udp]"`,
      );
    } else {
      const portless = protocols.filter((p) => !hasPorts(p));
      if (portless.length > 0) {
        collector.at(
          [...path, 'ports'],
          'ports-without-protocol',
          `Rule "${rule.id}" lists ports but protocol ${portless.map((p) => `"${String(p)}"`).join(', ')} has none (ports exist only for tcp, udp and sctp): move ${portless.length === 1 ? 'it' : 'them'} to a rule without ports`,
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
  const protocol = parseProtocol(spec);
  if (protocol === undefined && typeof spec === 'number') {
    collector.at(
      path,
      'invalid-protocol',
      `Protocol number ${spec} is out of range: use a number from 0 to 255 or a name (${Object.keys(PROTOCOL_NAMES).join(', ')})`,
    );
  }
  return protocol;
}

function parsePortRange(
  spec: number | string,
  path: Path,
  collector: IssueCollector,
): PortRange | undefined {
  const match = typeof spec === 'number' ? null : /^(\d+)(?:-(\d+))?$/.exec(spec);
  const from = typeof spec === 'number' ? spec : match ? Number(match[1]) : NaN;
  const to = typeof spec === 'number' ? spec : match ? Number(match[2] ?? match[1]) : NaN;
  const shown = typeof spec === 'number' ? String(spec) : `"${spec}"`;
  const spaceless = typeof spec === 'string' ? spec.replace(/\s+/g, '') : '';
  if (match === null && /^\d+(-\d+)?$/.test(spaceless)) {
    // Refused rather than read silently: a stray space is as often a typo as a style.
    collector.at(path, 'port-range', `Port ${shown} has spaces in it: write "${spaceless}"`);
    return undefined;
  }
  if (Number.isNaN(from) || Number.isNaN(to)) {
    collector.at(
      path,
      'port-range',
      `Cannot parse port ${shown}: write a port (443) or an inclusive range ("30000-32767")`,
    );
    return undefined;
  }
  if (from < 1 || to > 65535) {
    collector.at(path, 'port-range', `Port ${shown} is out of range: ports go from 1 to 65535`);
    return undefined;
  }
  if (from > to) {
    collector.at(
      path,
      'port-range',
      `Port range ${shown} runs backwards: write the low port first ("${to}-${from}")`,
    );
    return undefined;
  }
  return { from, to };
}

function checkFamilies(
  name: string,
  rules: readonly { index: number; rule: PolicyRule }[],
  ctx: {
    def: Omit<ClassDefinition, 'rules'>;
    sources: AddressSet;
    ipv6: 'block' | 'allow';
    path: Path;
    collector: IssueCollector;
  },
): void {
  // Empty sources are reported where they are written (an error, or an emptied network).
  if (ctx.sources.isEmpty()) return;
  const produces = {
    4: ctx.sources.has(4),
    // A forwarded class with no IPv6 prefix and "ipv6: allow" lets its IPv6 through unchecked.
    6: ctx.sources.has(6) || (ctx.def.origin === 'forwarded' && ctx.ipv6 === 'allow'),
  };
  for (const { index, rule } of rules) {
    if (rule.destination.kind !== 'addresses') continue;
    for (const family of [4, 6] as const) {
      if (!rule.destination.set.has(family) || produces[family]) continue;
      const whole = !rule.destination.set.has(family === 4 ? 6 : 4);
      const fix =
        family === 6 && ctx.def.origin === 'forwarded'
          ? 'add an IPv6 source prefix (or "ipv6: allow"), or remove them'
          : `add an IPv${family} source prefix, or remove them`;
      ctx.collector.at(
        [...ctx.path, 'rules', index, 'to'],
        'unreachable-family',
        `Rule "${rule.id}" names IPv${family} destinations (${rule.destination.set.only(family).describe(2)}), but class "${name}" has no IPv${family} source, so ${whole ? 'the rule' : 'that part'} never matches: ${fix}`,
      );
    }
  }
}

function checkSourceOverlaps(classes: readonly PolicyClass[], collector: IssueCollector): void {
  for (let i = 0; i < classes.length; i++) {
    for (let j = i + 1; j < classes.length; j++) {
      const a = classes[i];
      const b = classes[j];
      if (a === undefined || b === undefined || a.origin !== b.origin) continue;
      if (labelsDisjoint(a.labels, b.labels)) continue;
      const overlap = a.sources.intersect(b.sources);
      if (overlap.isEmpty()) continue;
      collector.at(
        ['classes', b.name, 'sources'],
        'source-overlap',
        `Sources of class "${b.name}" overlap those of class "${a.name}" in ${overlap.describe(3)}: a source belongs to one class only; split the prefixes`,
      );
    }
  }
}

/**
 * An interface belongs to one class: the firewall jumps to the chain of the first class whose ingress
 * matches, and that chain's anti-spoofing drops every other class's sources (explain, which picks
 * a class by ingress too, would then disagree with the kernel about the later class).
 */
function checkIngressOverlaps(classes: readonly PolicyClass[], collector: IssueCollector): void {
  const usable = (pattern: string): boolean =>
    findInterfaceNameProblem(pattern, { prefix: true }) === undefined;
  classes.forEach((b, j) => {
    if (b.origin !== 'forwarded') return;
    b.ingress.forEach((pattern, k) => {
      if (!usable(pattern)) return;
      for (const a of classes.slice(0, j)) {
        if (a.origin !== 'forwarded' || labelsDisjoint(a.labels, b.labels)) continue;
        const found = a.ingress
          .filter(usable)
          .map((earlier) => ({ earlier, overlap: findIngressOverlap(earlier, pattern) }))
          .find((o) => o.overlap !== undefined);
        if (found?.overlap === undefined) continue;
        const { relation, packets } = found.overlap;
        const fix =
          pattern.endsWith('*') || found.earlier.endsWith('*')
            ? 'narrow the prefix or rename the interfaces'
            : 'give it to one class';
        collector.at(
          ['classes', b.name, 'ingress', k],
          'ingress-overlap',
          `Ingress "${pattern}" of class "${b.name}" ${relation} of class "${a.name}": ${packets} go to class "${a.name}"'s chain first, whose anti-spoofing drops class "${b.name}"'s traffic; an interface belongs to one class only: ${fix}`,
        );
      }
    });
  });
}

/** Whether some interface name matches both ingress entries ("veth*" is a prefix), and how. */
function findIngressOverlap(
  earlier: string,
  later: string,
): { relation: string; packets: string } | undefined {
  const isPrefix = { earlier: earlier.endsWith('*'), later: later.endsWith('*') };
  const e = isPrefix.earlier ? earlier.slice(0, -1) : earlier;
  const l = isPrefix.later ? later.slice(0, -1) : later;
  if (!isPrefix.earlier && !isPrefix.later) {
    return e === l
      ? { relation: 'is also an ingress', packets: `packets arriving on "${e}"` }
      : undefined;
  }
  if (!isPrefix.earlier) {
    return e.startsWith(l)
      ? { relation: `covers ingress "${earlier}"`, packets: `packets arriving on "${e}"` }
      : undefined;
  }
  if (!isPrefix.later) {
    return l.startsWith(e)
      ? { relation: `is covered by ingress "${earlier}"`, packets: `packets arriving on "${l}"` }
      : undefined;
  }
  const longer = e.length >= l.length ? e : l;
  return longer.startsWith(e) && longer.startsWith(l)
    ? {
        relation: `overlaps ingress "${earlier}"`,
        packets: `interfaces named "${longer}…" match both, and their packets`,
      }
    : undefined;
}

/** Two classes that require different values of one label never meet on a host. */
function labelsDisjoint(
  a: Readonly<Record<string, string>>,
  b: Readonly<Record<string, string>>,
): boolean {
  return Object.entries(a).some(([k, v]) => k in b && b[k] !== v);
}

function resolveProbe(
  probe: ProbeDefinition & { readonly from: string },
  ctx: { path: Path; id: string; collector: IssueCollector },
): Probe {
  const families: Partial<Record<'from' | 'to', Family>> = {};
  for (const field of ['from', 'to', 'egress'] as const) {
    const value = probe[field];
    if (value === undefined) continue;
    const address = parseAddress(value);
    if (address === undefined) {
      ctx.collector.at(
        [...ctx.path, field],
        'malformed-address',
        `Cannot parse "${value}" as an address: write one address without a prefix length, like 192.0.2.10 or 2001:db8::10`,
      );
    } else if (field !== 'egress') {
      families[field] = address.family;
    }
  }
  if (families.from !== undefined && families.to !== undefined && families.from !== families.to) {
    ctx.collector.at(
      [...ctx.path, 'to'],
      'invalid-value',
      `Probe goes from IPv${families.from} "${probe.from}" to IPv${families.to} "${probe.to}": a packet has one address family; use addresses of one family`,
    );
  }
  for (const field of ['in', 'via'] as const) {
    const value = probe[field];
    const problem =
      value === undefined ? undefined : findInterfaceNameProblem(value, { prefix: false });
    if (problem !== undefined) {
      ctx.collector.at(
        [...ctx.path, field],
        'invalid-interface-name',
        `Probe field "${field}" holds "${value ?? ''}", which is not an interface name: ${problem}`,
      );
    }
  }
  const proto = toProtocol(probe.proto, [...ctx.path, 'proto'], ctx.collector) ?? 'tcp';
  if (probe.port !== undefined) {
    if (probe.port < 1 || probe.port > 65535) {
      ctx.collector.at(
        [...ctx.path, 'port'],
        'port-range',
        `Port ${probe.port} is out of range: ports go from 1 to 65535`,
      );
    } else if (!hasPorts(proto)) {
      ctx.collector.at(
        [...ctx.path, 'port'],
        'ports-without-protocol',
        `Probe has port ${probe.port} but protocol "${String(probe.proto)}" has no ports: remove "port", or use tcp, udp or sctp`,
      );
    }
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

/** Whether a set holds every address of a family. */
function coversFamily(set: AddressSet, family: Family): boolean {
  return !AddressSet.parse([family === 4 ? '0.0.0.0/0' : '::/0'])
    .subtract(set)
    .has(family);
}

// Kubernetes label syntax (k8s.io/apimachinery validation: IsQualifiedName, IsValidLabelValue,
// IsDNS1123Label): a name of at most 63 alphanumerics, "-", "_", "." inside; an optional DNS
// subdomain prefix and "/"; values likewise or empty; namespaces are DNS labels.
const LABEL_NAME = /^[A-Za-z0-9]([A-Za-z0-9_.-]{0,61}[A-Za-z0-9])?$/;
const DNS_SUBDOMAIN = /^[a-z0-9]([a-z0-9-]*[a-z0-9])?(\.[a-z0-9]([a-z0-9-]*[a-z0-9])?)*$/;
const DNS_LABEL = /^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$/;

function labelKeyProblem(key: string): string | undefined {
  const slash = key.lastIndexOf('/');
  const prefix = slash === -1 ? undefined : key.slice(0, slash);
  const name = slash === -1 ? key : key.slice(slash + 1);
  if (prefix !== undefined && (prefix.length > 253 || !DNS_SUBDOMAIN.test(prefix))) {
    return `its prefix "${prefix}" is not a DNS subdomain (lowercase letters, digits, "-" and ".")`;
  }
  if (!LABEL_NAME.test(name)) {
    return 'a label name is at most 63 letters, digits, "-", "_" and ".", starting and ending with a letter or digit';
  }
  return undefined;
}

/** A Kubernetes class: pods by namespace and labels, with the rules and exits of any class. */
function resolvePodClass(
  part: ClassPart,
  pods: PodSelectorDefinition,
  ctx: ClassContext,
): PodClass {
  const { collector } = ctx;
  const { name, definition: def } = part;
  const path: Path = ['classes', name];
  checkClassName(name, { collector, path });
  // Fields that select or treat packets on a host: the pod network selects pods by identity,
  // masquerades by itself, and no node firewall sees pod traffic (eBPF host routing).
  const hostFields: [string, boolean][] = [
    ['ingress', def.ingress !== undefined],
    ['sources', def.sources !== undefined],
    ['origin', def.origin === 'host'],
    ['ipv6', def.ipv6 !== undefined],
    ['hosts', def.hosts !== undefined],
    ['nat', def.nat === 'masquerade'],
    ['mssClamp', def.mssClamp !== undefined],
  ];
  for (const [field] of hostFields.filter(([, present]) => present)) {
    collector.atKey(
      [...path, field],
      'host-field-in-pod-class',
      `Class "${name}" selects Kubernetes pods, so "${field}" does not apply: the pod network selects pods by their labels and enforces their egress itself; remove "${field}", or make it a host class without "pods"`,
    );
  }
  const podsPath: Path = [...path, 'pods'];
  const labels = pods.labels;
  if (pods.namespace === undefined && Object.keys(labels).length === 0) {
    collector.atKey(
      podsPath,
      'empty-pod-selector',
      `Class "${name}" selects every pod of the cluster: give "pods" a namespace or labels (like "egress-class: vpn")`,
    );
  }
  if (pods.namespace !== undefined && !DNS_LABEL.test(pods.namespace)) {
    collector.at(
      [...podsPath, 'namespace'],
      'invalid-label',
      `Namespace "${pods.namespace}" is not a Kubernetes namespace name: use at most 63 lowercase letters, digits and "-", starting and ending with a letter or digit`,
    );
  }
  for (const [key, value] of Object.entries(labels)) {
    const keyProblem = labelKeyProblem(key);
    if (keyProblem !== undefined) {
      collector.atKey(
        [...podsPath, 'labels', key],
        'invalid-label',
        `Label key "${key}" of class "${name}" is not a Kubernetes label key: ${keyProblem}`,
      );
    } else if (value !== '' && !LABEL_NAME.test(value)) {
      collector.at(
        [...podsPath, 'labels', key],
        'invalid-label',
        `Label value "${value}" of "${key}" in class "${name}" is not a Kubernetes label value: use at most 63 letters, digits, "-", "_" and ".", starting and ending with a letter or digit`,
      );
    }
  }
  const { via, killSwitch } = resolveExit(name, def, { path, ctx, sources: null });
  const resolved = resolveClassRules(part, path, ctx);
  for (const { index, rule } of resolved) {
    if (rule.destination.kind !== 'self') continue;
    collector.at(
      [...path, 'rules', index, 'to'],
      'self-in-pod-class',
      `Rule "${rule.id}" of Kubernetes class "${name}" goes to "self", which names a host, not a pod: write the node's or the service's addresses as a network instead`,
    );
  }
  checkShadowedRules(resolved, path, collector);
  return {
    name,
    namespace: pods.namespace ?? null,
    labels: { ...labels },
    via,
    killSwitch,
    rules: resolved.map((r) => r.rule),
    defaultAction: def.default,
  };
}

/** Two pod classes whose selectors one pod can satisfy both: a pod belongs to one class. */
function checkPodSelectorOverlaps(classes: readonly PodClass[], collector: IssueCollector): void {
  classes.forEach((b, j) => {
    for (const a of classes.slice(0, j)) {
      const namespaces =
        a.namespace === null || b.namespace === null || a.namespace === b.namespace;
      if (!namespaces || labelsDisjoint(a.labels, b.labels)) continue;
      const where = b.namespace ?? a.namespace;
      collector.atKey(
        ['classes', b.name, 'pods'],
        'pod-selector-overlap',
        `Pods of class "${b.name}" can also be pods of class "${a.name}"${where === null ? '' : ` in namespace "${where}"`}: a pod carrying both label sets would get both classes' policies; give the classes one label key with different values (egress-class: vpn, egress-class: direct)`,
      );
    }
  });
}

/** A probe sent by a pod (`pod:`), or 'host' when it is a host probe (`from:`). */
function resolvePodProbe(
  probe: ProbeDefinition,
  ctx: {
    path: Path;
    index: number;
    id: string;
    collector: IssueCollector;
    podClasses: readonly string[];
  },
): PodProbe | 'host' | undefined {
  const { collector, path } = ctx;
  if (probe.pod === undefined) {
    if (probe.from !== undefined) return 'host';
    collector.atKey(
      path,
      'probe-source',
      'Probe has no source: give "from" (an address) for a host class, or "pod" (a Kubernetes class) for a pod',
    );
    return undefined;
  }
  const extra = (['from', 'in', 'egress'] as const).filter((f) => probe[f] !== undefined);
  for (const field of extra) {
    collector.atKey(
      [...path, field],
      'probe-source',
      `Probe is sent by a pod of class "${probe.pod}", so "${field}" does not apply: pods have no fixed address or ingress; remove "${field}"`,
    );
  }
  if (!ctx.podClasses.includes(probe.pod)) {
    collector.at(
      [...path, 'pod'],
      'unknown-pod-class',
      `Probe names pod class "${probe.pod}", which is not a Kubernetes class of this policy${didYouMean(probe.pod, ctx.podClasses)}: name a class with "pods"`,
    );
  }
  if (parseAddress(probe.to) === undefined) {
    collector.at(
      [...path, 'to'],
      'malformed-address',
      `Cannot parse "${probe.to}" as an address: write one address without a prefix length, like 192.0.2.10 or 2001:db8::10`,
    );
  }
  const proto = toProtocol(probe.proto, [...path, 'proto'], collector) ?? 'tcp';
  if (probe.port !== undefined && (probe.port < 1 || probe.port > 65535)) {
    collector.at(
      [...path, 'port'],
      'port-range',
      `Port ${probe.port} is out of range: ports go from 1 to 65535`,
    );
  }
  if (extra.length > 0 || collector.hasErrorsUnder(path)) return undefined;
  return {
    id: probe.id ?? ctx.id,
    index: ctx.index,
    pod: probe.pod,
    to: probe.to,
    proto,
    port: probe.port,
    tunnel: probe.tunnel,
    expect: probe.expect,
    via: probe.via,
  };
}
