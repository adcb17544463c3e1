import { formatAddress, parsePrefix, type Family, type Prefix } from '../../core/index.js';
import { loadTimeAddresses, maskPrefix, type PfInterfaces } from './interface-addresses.js';
import { parsePfConf } from './parse-pf-conf.js';
import {
  formatProtocol,
  type PfAddress,
  type PfConf,
  type PfConfProblem,
  type PfHost,
  type PfIcmpType,
  type PfInterfaceSpec,
  type PfKernelAnchorRule,
  type PfKernelEndpoint,
  type PfKernelFilterRule,
  type PfKernelRulesets,
  type PfKernelScrubRule,
  type PfKernelTranslationRule,
  type PfPort,
  type PfRule,
  type PfTableEntry,
} from './pf-rules.js';

export type { PfInterfaceAddress, PfInterfaces } from './interface-addresses.js';

/** A table as the kernel holds it: entries (some negated) and its flags. */
export interface PfTable {
  readonly entries: readonly PfTableEntry[];
  readonly persist: boolean;
  readonly constant: boolean;
}

/** What one load of a file puts into one anchor: its rulesets and the tables it defines. */
export interface PfAnchorLoad {
  readonly rulesets: PfKernelRulesets;
  readonly tables: ReadonlyMap<string, PfTable>;
}

type KernelRule =
  PfKernelFilterRule | PfKernelTranslationRule | PfKernelAnchorRule | PfKernelScrubRule;

/**
 * Expands a parsed file into kernel rules for the anchor at `anchorPath` ('' for the main
 * ruleset), as a MODEL of pfctl before it loads them (F93 parse.y expand_rule): one kernel rule
 * per combination of interface × protocol × ICMP type × source host × source port × destination
 * host × destination port, combinations of mixed families dropped, `$nr`, `$if`, `$srcaddr` …
 * expanded in labels and tags (expand_label), each checked as rule_consistent checks it. `self`
 * and interface names written without parentheses become the addresses the interfaces have now
 * (interface-addresses.ts); `(if)` stays dynamic, for the kernel to follow. Relative anchor
 * names are resolved against the anchor holding the rule (XNU pf_ruleset.c pf_anchor_setup).
 */
export function expandPfConf(
  conf: PfConf,
  options: {
    file: string;
    anchorPath: string;
    interfaces: PfInterfaces;
    readFile?: (path: string) => string | undefined;
  },
): { load: PfAnchorLoad; problems: PfConfProblem[] } {
  const problems: PfConfProblem[] = [];
  const rulesets = {
    scrub: [] as (PfKernelScrubRule | PfKernelAnchorRule)[],
    filter: [] as (PfKernelFilterRule | PfKernelAnchorRule)[],
    nat: [] as (PfKernelTranslationRule | PfKernelAnchorRule)[],
    rdr: [] as (PfKernelTranslationRule | PfKernelAnchorRule)[],
    binat: [] as (PfKernelTranslationRule | PfKernelAnchorRule)[],
    dummynet: [] as PfKernelAnchorRule[],
  };
  const problem = (line: number, message: string): void => {
    problems.push({ file: options.file, line, message });
  };
  // `$nr` is the rule's number in its ruleset's anchor, counted as rules are expanded (F93
  // expand_label_nr: pf->anchor->match).
  let number = 0;
  for (const rule of conf.rules) {
    for (const kernelRule of expandRule(rule, { ...options, number: () => number++ }, problem)) {
      switch (kernelRule.kind) {
        case 'filter':
          rulesets.filter.push(kernelRule);
          break;
        case 'scrub':
          rulesets.scrub.push(kernelRule);
          break;
        case 'nat':
        case 'rdr':
        case 'binat':
          rulesets[kernelRule.kind].push(kernelRule);
          break;
        case 'anchor':
          rulesets[kernelRule.ruleset].push(kernelRule);
          break;
      }
    }
  }

  const tables = new Map<string, PfTable>();
  for (const table of conf.tables) {
    const entries: PfTableEntry[] = [];
    for (const item of table.entries) {
      const resolved = resolveHosts(
        [{ negated: item.negated, address: item.address }],
        options.interfaces,
        table.line,
        problem,
      );
      for (const r of resolved ?? []) {
        if (r.host.address.kind === 'prefix') {
          entries.push({ negated: r.host.negated, prefix: r.host.address.prefix });
        }
      }
    }
    for (const file of table.files) {
      const text = file === '/dev/null' ? '' : options.readFile?.(file);
      if (text === undefined) {
        problem(table.line, `cannot load "${file}": No such file or directory`);
        continue;
      }
      // pf.conf(5) TABLES: a file of addresses, separated by blanks or newlines, `#` comments.
      const words = text.replace(/#[^\n]*/g, '').split(/[\s,]+/);
      for (const clean of words) {
        if (clean === '') continue;
        const negated = clean.startsWith('!');
        const prefix = parsePrefix(negated ? clean.slice(1) : clean);
        if (prefix === undefined) problem(table.line, `file "${file}" contains bad data`);
        else entries.push({ negated, prefix });
      }
    }
    tables.set(table.name, { entries, persist: table.persist, constant: table.constant });
  }
  return { load: { rulesets, tables }, problems };
}

/** Parses and expands in one step; problems from both, in file order. */
export function loadPfConfText(
  text: string,
  options: {
    file: string;
    anchorPath: string;
    interfaces: PfInterfaces;
    /**
     * `interfaces` is every interface the host has (the model's host), so the checks parse.y
     * makes while it parses apply (a route-to interface must exist); absent: they are not made.
     */
    interfacesComplete?: boolean;
    readFile?: (path: string) => string | undefined;
  },
): { load: PfAnchorLoad | null; conf: PfConf; problems: PfConfProblem[] } {
  const parsed = parsePfConf(text, {
    file: options.file,
    ...(options.interfacesComplete === true
      ? { interfaces: new Set(options.interfaces.keys()) }
      : {}),
    ...(options.readFile === undefined ? {} : { readFile: options.readFile }),
  });
  if (parsed.problems.length > 0) {
    return { load: null, conf: parsed.conf, problems: parsed.problems };
  }
  const expanded = expandPfConf(parsed.conf, options);
  return {
    load: expanded.problems.length > 0 ? null : expanded.load,
    conf: parsed.conf,
    problems: expanded.problems,
  };
}

/** The rulesets of several loads, one after the other. */
export function concatRulesets(loads: readonly PfKernelRulesets[]): PfKernelRulesets {
  return {
    scrub: loads.flatMap((l) => l.scrub),
    filter: loads.flatMap((l) => l.filter),
    nat: loads.flatMap((l) => l.nat),
    rdr: loads.flatMap((l) => l.rdr),
    binat: loads.flatMap((l) => l.binat),
    dummynet: loads.flatMap((l) => l.dummynet),
  };
}

/** Resolves an anchor name written in the anchor at `base`. */
export function resolveAnchorPath(base: string, name: string): string {
  if (name.startsWith('/')) return name.replace(/^\/+/, '');
  const parts = base === '' ? [] : base.split('/');
  for (const part of name.split('/')) {
    if (part === '..') parts.pop();
    else if (part !== '' && part !== '.') parts.push(part);
  }
  return parts.join('/');
}

interface Resolved {
  readonly host: PfHost;
  readonly family: Family | null;
}

function expandRule(
  rule: PfRule,
  options: { anchorPath: string; interfaces: PfInterfaces; number: () => number },
  problem: (line: number, message: string) => void,
): KernelRule[] {
  const sources = resolveHosts(rule.from.hosts, options.interfaces, rule.line, problem);
  const destinations = resolveHosts(rule.to.hosts, options.interfaces, rule.line, problem);
  if (sources === null || destinations === null) return [];
  // F93 parse.y decide_address_family: a rule without one takes its hosts' when they all agree.
  let family = rule.family ?? decideFamily(sources) ?? decideFamily(destinations);

  // The route or redirection pool: its hosts resolved, those of another family dropped
  // (remove_invalid_hosts), its family the rule's when the rule has none.
  const route = rule.kind === 'filter' ? rule.route : null;
  const redirect =
    rule.kind === 'nat' || rule.kind === 'rdr' || rule.kind === 'binat' ? rule.redirect : null;
  let pool: PfAddress[] | null = null;
  if (redirect !== null) {
    const resolved = resolveHosts(
      redirect.hosts.map((address) => ({ negated: false, address })),
      options.interfaces,
      rule.line,
      problem,
    );
    if (resolved === null) return [];
    if (family === null && rule.kind !== 'binat') {
      family = resolved.find((r) => r.family !== null)?.family ?? null;
    }
    const kept = resolved.filter(
      (r) => family === null || r.family === null || r.family === family,
    );
    if (kept.length === 0) {
      problem(rule.line, 'no translation address with matching address family found.');
      return [];
    }
    if (family === null && kept.some((r) => r.family !== null)) {
      problem(
        rule.line,
        'address family not given and translation address expands to multiple address families',
      );
      return [];
    }
    if (kept.length > 1 && redirect.pool.type !== null && redirect.pool.type !== 'round-robin') {
      problem(rule.line, 'only round-robin valid for multiple redirection addresses');
      return [];
    }
    pool = kept.map((r) => r.host.address);
  }
  let routeTargets = route?.targets ?? [];
  if (route !== null && route.kind !== 'fastroute') {
    if (family === null) {
      family = routeTargets.find((t) => t.address !== null)?.address?.family ?? null;
    }
    routeTargets = routeTargets.filter(
      (t) => t.address === null || family === null || t.address.family === family,
    );
    if (routeTargets.length === 0) {
      problem(rule.line, 'no routing address with matching address family found.');
      return [];
    }
  }

  const interfaces: readonly (PfInterfaceSpec | null)[] = rule.interfaces ?? [null];
  const protocols: readonly (number | null)[] = rule.protocols ?? [null];
  const sourcePorts: readonly (PfPort | null)[] = rule.from.ports ?? [null];
  const destinationPorts: readonly (PfPort | null)[] = rule.to.ports ?? [null];
  const icmpTypes: readonly (PfIcmpType | null)[] =
    rule.kind === 'filter' && rule.icmpTypes !== null ? rule.icmpTypes : [null];

  const out: KernelRule[] = [];
  let errors = 0;
  for (const iface of interfaces) {
    for (const protocol of protocols) {
      for (const icmpType of icmpTypes) {
        for (const source of sources) {
          for (const sourcePort of sourcePorts) {
            for (const destination of destinations) {
              for (const destinationPort of destinationPorts) {
                const af = combineFamily(family, source.family, destination.family);
                if (af === false) continue;
                const from: PfKernelEndpoint = { ...source.host, port: sourcePort };
                const to: PfKernelEndpoint = { ...destination.host, port: destinationPort };
                const base = { interface: iface, family: af, protocol, from, to, line: rule.line };
                const expanded = kernelRule(rule, base, {
                  icmpType,
                  pool,
                  routeTargets,
                  anchorPath: options.anchorPath,
                  number: options.number,
                });
                const complaints = consistencyProblems(expanded, icmpType);
                if (complaints.length > 0) {
                  for (const c of complaints) problem(rule.line, c);
                  problem(rule.line, 'skipping rule due to errors');
                  errors++;
                  continue;
                }
                out.push(expanded);
              }
            }
          }
        }
      }
    }
  }
  if (out.length === 0 && errors === 0) problem(rule.line, 'rule expands to no valid combination');
  return errors > 0 ? [] : out;
}

function decideFamily(hosts: readonly Resolved[]): Family | null {
  const families = new Set(hosts.map((h) => h.family));
  if (families.size !== 1) return null;
  return [...families][0] ?? null;
}

/** F93 parse.y rule_consistent (filter_consistent, rdr_consistent) and expand_rule's own. */
function consistencyProblems(rule: KernelRule, icmpType: PfIcmpType | null): string[] {
  const out: string[] = [];
  const tcpOrUdp = rule.protocol === 6 || rule.protocol === 17;
  if (rule.kind === 'filter' || rule.kind === 'scrub') {
    if (!tcpOrUdp && (rule.from.port !== null || rule.to.port !== null)) {
      out.push('port only applies to tcp/udp');
    }
  }
  if (rule.kind === 'filter') {
    if (icmpType !== null && rule.protocol !== (icmpType.family === 6 ? 58 : 1)) {
      out.push('icmp-type mismatch');
    }
    if (rule.protocol !== 1 && rule.protocol !== 58 && rule.icmpType !== null) {
      out.push('icmp-type/code only applies to icmp');
    }
    if (rule.family === null && rule.icmpType !== null) {
      out.push('must indicate address family with icmp-type/code');
    }
    if ((rule.protocol === 1 && rule.family === 6) || (rule.protocol === 58 && rule.family === 4)) {
      out.push(
        `proto ${rule.protocol === 1 ? 'icmp' : 'icmp6'} doesn't match address family ${rule.family === 4 ? 'inet' : 'inet6'}`,
      );
    }
    if (rule.allowOpts && rule.action !== 'pass') {
      out.push('allow-opts can only be specified for pass rules');
    }
    if (
      rule.fragment &&
      (rule.from.port !== null ||
        rule.to.port !== null ||
        rule.flags !== null ||
        rule.icmpType !== null)
    ) {
      out.push('fragments can be filtered only on IP header fields');
    }
    if (rule.blockPolicy?.kind === 'return-rst' && rule.protocol !== 6) {
      out.push('return-rst can only be applied to TCP rules');
    }
  }
  if (rule.kind === 'rdr') {
    if (!tcpOrUdp) {
      if (rule.from.port !== null) out.push('src port only applies to tcp/udp');
      if (rule.to.port !== null) out.push('dst port only applies to tcp/udp');
      if (rule.redirect?.port !== null && rule.redirect !== null) {
        out.push('rpool port only applies to tcp/udp');
      }
    }
    if (rule.to.port !== null && rule.to.port.op !== '=' && rule.to.port.op !== ':') {
      out.push('invalid port operator for rdr destination port');
    }
  }
  return out;
}

function kernelRule(
  rule: PfRule,
  base: {
    interface: PfInterfaceSpec | null;
    family: Family | null;
    protocol: number | null;
    from: PfKernelEndpoint;
    to: PfKernelEndpoint;
    line: number;
  },
  context: {
    icmpType: PfIcmpType | null;
    pool: PfAddress[] | null;
    routeTargets: readonly { interface: string; address: Prefix | null }[];
    anchorPath: string;
    number: () => number;
  },
): KernelRule {
  const nr = context.number();
  const expand = (text: string): string => expandLabel(text, base, nr);
  switch (rule.kind) {
    case 'filter': {
      // pf.conf(5) STATEFUL FILTERING (OpenBSD 4.1+, macOS): pass rules keep state by default,
      // with `flags S/SA` for TCP, unless `no state`, `flags` or `fragment` is written (F93
      // parse.y pfrule); expand_rule clears the flags of a rule on another protocol.
      const state = rule.state ?? (rule.action === 'pass' ? 'keep' : 'no');
      const defaultFlags =
        rule.action === 'pass' && state !== 'no' && rule.flags === null && !rule.fragment;
      const tcp = base.protocol === null || base.protocol === 6;
      const flags =
        !tcp || rule.flags === 'any'
          ? null
          : (rule.flags ?? (defaultFlags ? { set: 'S', mask: 'SA' } : null));
      // modulate and synproxy state make sense for TCP only (expand_rule).
      const kept =
        (state === 'modulate' || state === 'synproxy') &&
        base.protocol !== null &&
        base.protocol !== 6
          ? 'keep'
          : state;
      return {
        kind: 'filter',
        ...base,
        action: rule.action,
        blockPolicy: rule.blockPolicy,
        direction: rule.direction,
        log: rule.log,
        quick: rule.quick,
        route: rule.route === null ? null : { ...rule.route, targets: [...context.routeTargets] },
        flags,
        icmpType: context.icmpType,
        state: kept,
        stateBinding: kept === 'no' ? null : rule.stateBinding,
        stateOptions: kept === 'no' ? [] : rule.stateOptions,
        tag: rule.tag === null ? null : expand(rule.tag),
        tagged: rule.tagged === null ? null : { ...rule.tagged, name: expand(rule.tagged.name) },
        label: rule.label === null ? null : expand(rule.label),
        probability: rule.probability,
        tos: rule.tos,
        rtable: rule.rtable,
        allowOpts: rule.allowOpts,
        fragment: rule.fragment,
      };
    }
    case 'nat':
    case 'rdr':
    case 'binat':
      return {
        kind: rule.kind,
        ...base,
        no: rule.no,
        pass: rule.pass,
        log: rule.log,
        tag: rule.tag,
        tagged: rule.tagged,
        redirect:
          rule.redirect === null
            ? null
            : {
                ...rule.redirect,
                hosts: context.pool ?? rule.redirect.hosts,
                pool: {
                  ...rule.redirect.pool,
                  // A pool of several addresses is round-robin (F93 parse.y natrule).
                  type:
                    rule.redirect.pool.type ??
                    ((context.pool?.length ?? 0) > 1 ? 'round-robin' : null),
                },
              },
      };
    case 'anchor':
      return {
        kind: 'anchor',
        ...base,
        ruleset: rule.ruleset,
        path: resolveAnchorPath(context.anchorPath, rule.name),
        name: rule.name,
        wildcard: rule.wildcard,
        direction: rule.direction,
        quick: rule.quick,
        tagged: rule.tagged,
        label: rule.label === null ? null : expand(rule.label),
      };
    case 'scrub':
      return {
        kind: 'scrub',
        ...base,
        no: rule.no,
        direction: rule.direction,
        log: rule.log,
        fragments: rule.fragments,
        options: rule.options,
      };
  }
}

/**
 * F93 parse.y expand_label: `$if`, `$srcaddr`, `$dstaddr`, `$srcport`, `$dstport`, `$proto`,
 * `$nr` in a label or tag, replaced with what this expanded rule has.
 */
function expandLabel(
  text: string,
  rule: {
    interface: PfInterfaceSpec | null;
    family: Family | null;
    protocol: number | null;
    from: PfKernelEndpoint;
    to: PfKernelEndpoint;
  },
  number: number,
): string {
  if (!text.includes('$')) return text;
  const address = (e: PfKernelEndpoint): string => {
    const a = e.address;
    let shown: string;
    switch (a.kind) {
      case 'interface':
        shown = a.dynamic ? `(${a.name})` : a.name;
        break;
      case 'table':
        shown = `<${a.name}>`;
        break;
      case 'prefix': {
        const width = a.prefix.family === 4 ? 32 : 128;
        const zero = a.prefix.length === 0 && (a.prefix.start === 0 || a.prefix.start === 0n);
        shown =
          rule.family === null || zero
            ? 'any'
            : a.prefix.length < width
              ? `${formatAddress(a.prefix.family, a.prefix.start)}/${a.prefix.length}`
              : formatAddress(a.prefix.family, a.prefix.start);
        break;
      }
      case 'any':
        shown = 'any';
        break;
      default:
        shown = a.kind;
    }
    return e.negated ? `! ${shown}` : shown;
  };
  const port = (p: PfPort | null): string => {
    if (p === null) return '';
    switch (p.op) {
      case '=':
        return String(p.low);
      case '!=':
        return `!=${p.low}`;
      case '<':
      case '<=':
      case '>':
      case '>=':
        return `${p.op}${p.low}`;
      case '><':
      case '<>':
        return `${p.low}${p.op}${p.high}`;
      case ':':
        return '';
    }
  };
  const replacements: [string, () => string][] = [
    ['$if', () => rule.interface?.name ?? 'any'],
    ['$srcaddr', () => address(rule.from)],
    ['$dstaddr', () => address(rule.to)],
    ['$srcport', () => port(rule.from.port)],
    ['$dstport', () => port(rule.to.port)],
    ['$proto', () => formatProtocol(rule.protocol ?? 0)],
    ['$nr', () => String(number)],
  ];
  let out = text;
  for (const [name, value] of replacements) {
    if (out.includes(name)) out = out.split(name).join(value());
  }
  return out;
}

function combineFamily(
  rule: Family | null,
  source: Family | null,
  destination: Family | null,
): Family | null | false {
  let family = rule;
  for (const f of [source, destination]) {
    if (f === null) continue;
    if (family !== null && family !== f) return false;
    family = f;
  }
  return family;
}

/**
 * Hosts after load-time resolution, each with the family it forces (if any): `self` and interface
 * names written without parentheses become the addresses the interfaces have now (F93
 * pfctl_parser.c host → host_if → ifa_lookup, interface-addresses.ts); one with none is "no IP
 * address found" (F93 host()).
 */
function resolveHosts(
  hosts: readonly PfHost[],
  interfaces: PfInterfaces,
  line: number,
  problem: (line: number, message: string) => void,
): Resolved[] | null {
  const out: Resolved[] = [];
  for (const host of hosts) {
    const address = host.address;
    if (address.kind === 'prefix') {
      out.push({ host, family: address.prefix.family });
    } else if (address.kind === 'range') {
      out.push({ host, family: address.from.family });
    } else if (address.kind === 'self' || (address.kind === 'interface' && !address.dynamic)) {
      const name = address.kind === 'self' ? 'self' : address.name;
      const modifier = address.kind === 'self' ? null : address.modifier;
      const resolved = loadTimeAddresses(interfaces, name, modifier);
      if (resolved.length === 0) {
        problem(line, `no IP address found for ${name}`);
        problem(line, 'could not parse host specification');
        return null;
      }
      for (const prefix of resolved) {
        const masked = address.mask !== null ? maskPrefix(prefix, address.mask) : prefix;
        out.push({
          host: { negated: host.negated, address: { kind: 'prefix', prefix: masked } },
          family: prefix.family,
        });
      }
    } else if (address.kind === 'interface' && address.mask !== null) {
      // `(if)/24`: a dynamic address cut to a prefix length; an IPv4 rule takes /24 of 32.
      out.push({ host, family: null });
    } else {
      out.push({ host, family: null });
    }
  }
  return out;
}

/**
 * The direct children of an anchor, sorted as pf's RB tree of anchor names sorts them (strcmp:
 * byte order), so `200.AirDrop` comes before `250.egressguard` (pf.conf.5:2562-2565).
 */
export function listChildAnchors(paths: Iterable<string>, parent: string): string[] {
  const children = new Set<string>();
  const prefix = parent === '' ? '' : `${parent}/`;
  for (const path of paths) {
    if (path === '' || !path.startsWith(prefix) || path === parent) continue;
    const rest = path.slice(prefix.length);
    const first = rest.split('/')[0] ?? '';
    if (first !== '') children.add(prefix + first);
  }
  return [...children].sort((a, b) => (a < b ? -1 : a > b ? 1 : 0));
}
