import { parsePrefix, type Family, type Prefix } from '../../core/index.js';
import { parsePfConf } from './parse-pf-conf.js';
import type {
  PfAddress,
  PfConf,
  PfConfProblem,
  PfHost,
  PfIcmpType,
  PfInterfaceSpec,
  PfKernelAnchorRule,
  PfKernelEndpoint,
  PfKernelFilterRule,
  PfKernelRulesets,
  PfKernelScrubRule,
  PfKernelTranslationRule,
  PfPort,
  PfRule,
  PfTableEntry,
} from './pf-rules.js';

/** One address of a host interface, host bits kept (`192.168.64.1/22`). */
export interface PfInterfaceAddress {
  readonly family: Family;
  readonly value: number | bigint;
  readonly length: number;
}

export type PfInterfaces = ReadonlyMap<string, readonly PfInterfaceAddress[]>;

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

/**
 * Expands a parsed file into kernel rules for the anchor at `anchorPath` ('' for the main
 * ruleset), as pfctl does before loading (F93 pfctl_parser.c expand_rule): one kernel rule per
 * combination of interface × protocol × source host × source port × destination host ×
 * destination port × ICMP type, combinations of mixed families dropped. Interface names written
 * without parentheses are replaced by the interface's addresses now, at load time (pf.conf(5)
 * PARAMETERS: "interface to address translation are done at ruleset load-time"); `(if)` stays
 * dynamic, `self` is resolved by the evaluator. Relative anchor names are resolved against the
 * anchor holding the rule (xnu pf_ruleset.c pf_anchor_setup).
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

  for (const rule of conf.rules) {
    const expanded = expandRule(rule, options, problem);
    for (const kernelRule of expanded) {
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
    const entries = [...table.entries];
    for (const file of table.files) {
      const text = options.readFile?.(file);
      if (text === undefined) {
        problem(table.line, `cannot load "${file}": No such file or directory`);
        continue;
      }
      // pf.conf(5) TABLES: a file of addresses, separated by blanks or newlines, `#` comments.
      const words = text.replace(/#[^\n]*/g, '').split(/[\s,]+/);
      for (const clean of words) {
        if (clean === '') continue;
        const negated = clean.startsWith('!');
        const body = negated ? clean.slice(1) : clean;
        const prefix = parsePrefix(body);
        if (prefix === undefined) problem(table.line, `cannot load "${file}": Invalid argument`);
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

function expandRule(
  rule: PfRule,
  options: { anchorPath: string; interfaces: PfInterfaces },
  problem: (line: number, message: string) => void,
): (PfKernelFilterRule | PfKernelTranslationRule | PfKernelAnchorRule | PfKernelScrubRule)[] {
  const hasPorts = rule.from.ports !== null || rule.to.ports !== null;
  if (hasPorts && (rule.protocols === null || rule.protocols.some((p) => p !== 6 && p !== 17))) {
    // F93 parse.y filter_consistent / nat_consistent.
    problem(rule.line, 'port only applies to tcp/udp');
    return [];
  }
  if (rule.kind === 'filter' && rule.flags !== null && rule.flags !== 'any') {
    if (rule.protocols !== null && rule.protocols.some((p) => p !== 6)) {
      problem(rule.line, 'flags only apply to tcp');
      return [];
    }
  }

  const interfaces: readonly (PfInterfaceSpec | null)[] = rule.interfaces ?? [null];
  const protocols: readonly (number | null)[] = rule.protocols ?? [null];
  const sources = resolveHosts(rule.from.hosts, options.interfaces, rule.line, problem);
  const destinations = resolveHosts(rule.to.hosts, options.interfaces, rule.line, problem);
  if (sources === null || destinations === null) return [];
  const sourcePorts: readonly (PfPort | null)[] = rule.from.ports ?? [null];
  const destinationPorts: readonly (PfPort | null)[] = rule.to.ports ?? [null];
  const icmpTypes: readonly (PfIcmpType | null)[] =
    rule.kind === 'filter' && rule.icmpTypes !== null ? rule.icmpTypes : [null];

  const out: (
    PfKernelFilterRule | PfKernelTranslationRule | PfKernelAnchorRule | PfKernelScrubRule
  )[] = [];
  for (const iface of interfaces) {
    for (const protocol of protocols) {
      for (const source of sources) {
        for (const sourcePort of sourcePorts) {
          for (const destination of destinations) {
            for (const destinationPort of destinationPorts) {
              for (const icmpType of icmpTypes) {
                const family = combineFamily(rule.family, source.family, destination.family);
                if (family === false) continue;
                const from: PfKernelEndpoint = { ...source.host, port: sourcePort };
                const to: PfKernelEndpoint = { ...destination.host, port: destinationPort };
                const base = { interface: iface, family, protocol, from, to, line: rule.line };
                out.push(kernelRule(rule, base, icmpType, options.anchorPath));
              }
            }
          }
        }
      }
    }
  }
  if (out.length === 0) problem(rule.line, 'rule expands to no valid combination');
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
  icmpType: PfIcmpType | null,
  anchorPath: string,
): PfKernelFilterRule | PfKernelTranslationRule | PfKernelAnchorRule | PfKernelScrubRule {
  switch (rule.kind) {
    case 'filter': {
      // pf.conf(5) STATEFUL FILTERING (OpenBSD 4.1+, macOS): pass rules keep state by default,
      // with `flags S/SA` for TCP, unless `no state` or `flags any` is written.
      const state = rule.state ?? (rule.action === 'pass' ? 'keep' : 'no');
      const defaultFlags =
        rule.action === 'pass' &&
        state !== 'no' &&
        rule.flags === null &&
        (base.protocol === null || base.protocol === 6);
      const flags =
        rule.flags === 'any'
          ? null
          : (rule.flags ?? (defaultFlags ? { set: 'S', mask: 'SA' } : null));
      return {
        kind: 'filter',
        ...base,
        action: rule.action,
        blockPolicy: rule.blockPolicy,
        direction: rule.direction,
        log: rule.log,
        quick: rule.quick,
        route: rule.route,
        flags,
        icmpType,
        state,
        stateBinding: rule.stateBinding,
        tag: rule.tag,
        tagged: rule.tagged,
        label: rule.label,
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
        redirect: rule.redirect,
      };
    case 'anchor':
      return {
        kind: 'anchor',
        ...base,
        ruleset: rule.ruleset,
        path: resolveAnchorPath(anchorPath, rule.name),
        name: rule.name,
        wildcard: rule.wildcard,
        direction: rule.direction,
        tagged: rule.tagged,
        label: rule.label,
      };
    case 'scrub':
      return { kind: 'scrub', ...base, direction: rule.direction, options: rule.options };
  }
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

/** Hosts after load-time interface resolution, each with the family it forces (if any). */
function resolveHosts(
  hosts: readonly PfHost[],
  interfaces: PfInterfaces,
  line: number,
  problem: (line: number, message: string) => void,
): { host: { negated: boolean; address: PfAddress }; family: Family | null }[] | null {
  const out: { host: { negated: boolean; address: PfAddress }; family: Family | null }[] = [];
  for (const host of hosts) {
    const address = host.address;
    if (address.kind === 'prefix') {
      out.push({ host, family: address.prefix.family });
    } else if (address.kind === 'interface' && !address.dynamic) {
      const own = interfaces.get(address.name);
      if (own === undefined || own.length === 0) {
        // F93 pfctl_parser.c host(): neither an address, an interface nor a resolvable name.
        problem(line, `no IP address found for ${address.name}`);
        problem(line, 'could not parse host specification');
        return null;
      }
      for (const prefix of interfacePrefixes(own, address.modifier)) {
        out.push({
          host: { negated: host.negated, address: { kind: 'prefix', prefix } },
          family: prefix.family,
        });
      }
    } else {
      out.push({ host, family: null });
    }
  }
  return out;
}

/** The prefixes an interface name stands for: its addresses, or with `:network` its networks. */
export function interfacePrefixes(
  addresses: readonly PfInterfaceAddress[],
  modifier: 'network' | 'broadcast' | 'peer' | '0' | null,
): Prefix[] {
  const out: Prefix[] = [];
  const seen = new Set<Family>();
  for (const a of addresses) {
    // `:0`: the interface's first address of each family, no aliases (pf.conf(5) PARAMETERS).
    if (modifier === '0' && seen.has(a.family)) continue;
    seen.add(a.family);
    if (modifier === 'network') {
      out.push(networkPrefix(a));
    } else if (modifier === 'broadcast') {
      // pf.conf(5) PARAMETERS: `:broadcast` "translates to the interface's broadcast
      // address(es)": IPv4 only, and only where the prefix has one (shorter than /31).
      if (a.family === 4 && a.length < 31) {
        const network = networkPrefix(a);
        out.push({
          family: 4,
          start: (network.start as number) + 2 ** (32 - a.length) - 1,
          length: 32,
          hadHostBits: false,
        });
      }
    } else if (modifier === 'peer') {
      // Not modelled: egressguard never writes it; it stands for no address here.
      continue;
    } else {
      out.push({
        family: a.family,
        start: a.value,
        length: a.family === 4 ? 32 : 128,
        hadHostBits: false,
      });
    }
  }
  return out;
}

function networkPrefix(a: PfInterfaceAddress): Prefix {
  if (a.family === 4) {
    const size = 2 ** (32 - a.length);
    const start = Math.floor((a.value as number) / size) * size;
    return { family: 4, start, length: a.length, hadHostBits: false };
  }
  const bits = BigInt(128 - a.length);
  return {
    family: 6,
    start: ((a.value as bigint) >> bits) << bits,
    length: a.length,
    hadHostBits: false,
  };
}
