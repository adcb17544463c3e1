import { readFileSync } from 'node:fs';
import { dirname, resolve } from 'node:path';
import { AddressSet, parsePrefix, type Prefix } from '../core/index.js';
import { didYouMean } from './did-you-mean.js';
import type { IssueCollector, Path } from './locator.js';
import type { NetworkDefinition } from './schema.js';

const MAX_LINE_ISSUES_PER_FILE = 20;

/** Whether an entry is written like an address (so a typo is a malformed CIDR, not a name). */
function looksLikeAddress(entry: string): boolean {
  return /^[0-9a-fA-F:.]*[.:/][0-9a-fA-F:./]*$/.test(entry) || /^\d+$/.test(entry);
}

/**
 * Resolves named networks to address sets: references, files, exclusions as set arithmetic. Each
 * problem is reported once, at the place it is written.
 */
export class NetworkResolver {
  private readonly resolved = new Map<string, AddressSet>();
  private readonly stack: string[] = [];
  private readonly reportedCycles = new Set<string>();

  constructor(
    private readonly definitions: Readonly<Record<string, NetworkDefinition>>,
    private readonly collector: IssueCollector,
    private readonly policyFile: string,
  ) {}

  get names(): string[] {
    return Object.keys(this.definitions);
  }

  /** Resolves every defined network, so unused ones are validated too. */
  resolveAll(): void {
    for (const name of this.names) this.resolveNetwork(name, ['networks', name]);
  }

  /** Resolves a list of CIDRs and network names written at `path`. */
  resolveEntries(entries: readonly string[], path: Path): AddressSet {
    const prefixes: Prefix[] = [];
    let set = AddressSet.EMPTY;
    entries.forEach((entry, i) => {
      const at = [...path, i];
      if (entry === 'self' || entry === 'any') {
        this.collector.at(
          at,
          'misplaced-keyword',
          `"${entry}" cannot stand in a list of networks: use it alone, as "to: ${entry}", in a rule of its own`,
        );
      } else if (looksLikeAddress(entry)) {
        const prefix = this.parseCidr(entry, at);
        if (prefix !== undefined) prefixes.push(prefix);
      } else {
        const named = this.resolveReference(entry, at);
        if (named !== undefined) set = set.union(named);
      }
    });
    return set.union(AddressSet.fromPrefixes(prefixes));
  }

  private parseCidr(entry: string, at: Path): Prefix | undefined {
    const prefix = parsePrefix(entry);
    if (prefix === undefined) {
      this.collector.at(
        at,
        'malformed-cidr',
        `Cannot parse "${entry}" as an address or prefix: write it like 192.0.2.0/24 or 2001:db8::/32`,
      );
      return undefined;
    }
    if (prefix.hadHostBits) {
      const clean = AddressSet.fromPrefixes([prefix]).describe();
      this.collector.at(
        at,
        'host-bits',
        `"${entry}" has host bits set and means ${clean}: write that, or the address alone for one host`,
      );
    }
    return prefix;
  }

  private resolveReference(name: string, at: Path): AddressSet | undefined {
    if (!(name in this.definitions)) {
      this.collector.at(
        at,
        'unknown-network',
        `Unknown network "${name}"${didYouMean(name, this.names)}: define it under "networks"`,
      );
      return undefined;
    }
    return this.resolveNetwork(name, at);
  }

  private resolveNetwork(name: string, at: Path): AddressSet | undefined {
    const cached = this.resolved.get(name);
    if (cached !== undefined) return cached;
    const cycleStart = this.stack.indexOf(name);
    if (cycleStart !== -1) {
      const cycle = [...this.stack.slice(cycleStart), name];
      const key = [...cycle].sort().join(',');
      if (!this.reportedCycles.has(key)) {
        this.reportedCycles.add(key);
        this.collector.at(
          at,
          'network-cycle',
          `Network "${name}" refers to itself through ${cycle.map((n) => `"${n}"`).join(' → ')}: remove one of these references`,
        );
      }
      return undefined;
    }
    const definition = this.definitions[name];
    if (definition === undefined) return undefined;
    this.stack.push(name);
    const path: Path = ['networks', name];
    let set: AddressSet;
    if (Array.isArray(definition)) {
      set = this.resolveEntries(definition, path);
    } else {
      set = this.resolveEntries(definition.cidrs ?? [], [...path, 'cidrs']);
      for (const [i, ref] of (definition.include ?? []).entries()) {
        const named = this.resolveReference(ref, [...path, 'include', i]);
        if (named !== undefined) set = set.union(named);
      }
      for (const [i, file] of (definition.files ?? []).entries()) {
        set = set.union(this.readListFile(file, [...path, 'files', i]));
      }
      if (definition.exclude !== undefined && definition.exclude.length > 0) {
        const excluded = this.resolveEntries(definition.exclude, [...path, 'exclude']);
        const before = set;
        set = set.subtract(excluded);
        if (!before.isEmpty() && set.isEmpty()) {
          this.collector.at(
            [...path, 'exclude'],
            'empty-network',
            `Network "${name}" is empty after its exclusions: rules that use it match nothing`,
          );
        }
      }
    }
    this.stack.pop();
    this.resolved.set(name, set);
    return set;
  }

  private readListFile(file: string, at: Path): AddressSet {
    const path = resolve(dirname(this.policyFile), file);
    let text: string;
    try {
      text = readFileSync(path, 'utf8');
    } catch (error) {
      const reason = (error as NodeJS.ErrnoException).code ?? String(error);
      this.collector.at(
        at,
        'unreadable-file',
        `Cannot read network list "${path}": ${reason}: check the path (relative to the policy file) and its permissions`,
      );
      return AddressSet.EMPTY;
    }
    const prefixes: Prefix[] = [];
    let bad = 0;
    let lineNo = 0;
    let start = 0;
    while (start <= text.length) {
      let end = text.indexOf('\n', start);
      if (end === -1) end = text.length;
      lineNo++;
      let line = text.slice(start, end);
      start = end + 1;
      const hash = line.indexOf('#');
      if (hash !== -1) line = line.slice(0, hash);
      const entry = line.trim();
      if (entry === '') continue;
      const prefix = parsePrefix(entry);
      if (prefix !== undefined) {
        prefixes.push(prefix);
        continue;
      }
      bad++;
      if (bad <= MAX_LINE_ISSUES_PER_FILE) {
        this.collector.inFile(
          path,
          { line: lineNo, column: line.indexOf(entry) + 1 },
          at,
          'malformed-cidr',
          `Cannot parse "${entry}" as a prefix: write one prefix a line, like 192.0.2.0/24`,
        );
      }
    }
    if (bad > MAX_LINE_ISSUES_PER_FILE) {
      this.collector.at(
        at,
        'malformed-cidr',
        `Network list "${path}" has ${bad} malformed lines; the first ${MAX_LINE_ISSUES_PER_FILE} are listed`,
      );
    }
    return AddressSet.fromPrefixes(prefixes);
  }
}
