import { readFileSync, statSync } from 'node:fs';
import { dirname, isAbsolute, join } from 'node:path';
import {
  AddressSet,
  parseAddress,
  parsePrefix,
  parsePrefixList,
  unmapIpv4,
  type Prefix,
} from '../core/index.js';
import { didYouMean } from './did-you-mean.js';
import type { IssueCollector, Path } from './locator.js';
import { NAME_PATTERN, type NetworkDefinition } from './schema.js';

const MAX_LINE_ISSUES_PER_FILE = 20;
const KEYWORDS = new Set(['any', 'self']);

/**
 * Whether an entry is meant as an address rather than a network name: names start with a letter
 * and hold no ":" or "/", so "10.0.0.300", "10.0.0.0/33" and "fe80::1%eth0" are malformed
 * addresses, not unknown networks.
 */
function looksLikeAddress(entry: string): boolean {
  return /^[0-9]/.test(entry) || entry.includes(':') || entry.includes('/');
}

/** What is wrong with an entry that does not parse as a prefix, and what to write instead. */
function explainMalformed(entry: string): string {
  const slash = entry.indexOf('/');
  const address = parseAddress(slash === -1 ? entry : entry.slice(0, slash));
  if (address !== undefined && slash !== -1) {
    const max = address.family === 4 ? 32 : 128;
    return `an IPv${address.family} prefix length is a number from 0 to ${max}`;
  }
  if (entry.includes('-')) return 'a range is not a prefix; write the prefixes that cover it';
  if (entry.includes('%')) return 'a zone (%eth0) has no place in a prefix: remove it';
  if (/^[\d.]+(\/.*)?$/.test(entry)) {
    return 'an IPv4 address is four numbers from 0 to 255, without leading zeros';
  }
  return 'write an address or a prefix, like 192.0.2.0/24 or 2001:db8::/32';
}

function describeMapped(entry: string, prefix: Prefix): string {
  const v4 = AddressSet.fromPrefixes([prefix]).describe();
  return `"${entry}" is an IPv4-mapped IPv6 address, which never appears in an IPv6 packet on the wire (RFC 4291 §2.5.5.2): it is taken as the IPv4 "${v4}"; write "${v4}"`;
}

/**
 * A DNS name (deb.debian.org, *.example.com): dot-separated labels of letters, digits and "-",
 * ending in a letter label. Network names have no dots, and addresses are caught before.
 */
function isDomainName(name: string): boolean {
  const labels = name.replace(/^\*\./, '').replace(/\.$/, '').split('.');
  return (
    labels.length >= 2 &&
    name.length <= 253 &&
    labels.every((l) => /^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$/i.test(l)) &&
    /^[a-z]{2,63}$/i.test(labels.at(-1) ?? '')
  );
}

function describeHostBits(entry: string, prefix: Prefix): string {
  const clean = AddressSet.fromPrefixes([prefix]).describe();
  return `"${entry}" has host bits set, so it matches all of "${clean}", not just the address written: write the address alone for one host, or "${clean}" if the whole range is meant`;
}

/** A list file's text; only a regular file (a FIFO or a device would block, or never end). */
export function readListText(path: string): string {
  const stats = statSync(path);
  if (stats.isDirectory()) throw Object.assign(new Error(path), { code: 'EISDIR' });
  if (!stats.isFile()) throw Object.assign(new Error(path), { code: 'ENOTREG' });
  return readFileSync(path, 'utf8');
}

/** The reason for a failed read: its errno code, and what it means for the common ones. */
export function describeReadError(error: unknown): string {
  const code = (error as NodeJS.ErrnoException).code;
  const meaning: Record<string, string> = {
    ENOENT: 'no such file',
    EACCES: 'permission denied',
    EPERM: 'permission denied',
    EISDIR: 'it is a directory',
    ENOTREG: 'not a regular file: a FIFO, a socket or a device',
  };
  if (code === undefined) return String(error);
  const text = meaning[code];
  return text === undefined ? code : `${code} (${text})`;
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
    private readonly options: {
      readonly policyFile: string;
      /** False: a `files:` entry is an error, and nothing is opened. */
      readonly readListFiles: boolean;
      /** Networks that failed the schema: references to them resolve to nothing, silently. */
      readonly broken?: ReadonlySet<string>;
    },
  ) {}

  get names(): string[] {
    return Object.keys(this.definitions);
  }

  /** Resolves every defined network, so unused ones are validated too. */
  resolveAll(): void {
    for (const name of [...this.names, ...(this.options.broken ?? [])]) {
      if (KEYWORDS.has(name)) {
        this.collector.atKey(
          ['networks', name],
          'invalid-value',
          `Network name "${name}" is a keyword: "to: ${name}" can never refer to it; rename the network`,
        );
      } else if (!NAME_PATTERN.test(name)) {
        this.collector.atKey(
          ['networks', name],
          'invalid-value',
          `Network name "${name}" is not valid: use lowercase letters, digits and "-", starting with a letter, at most 31 characters`,
        );
      }
    }
    for (const name of this.names) this.resolveNetwork(name, ['networks', name]);
  }

  /** Resolves a list of CIDRs and network names written at `path`. */
  resolveEntries(entries: readonly string[], path: Path): AddressSet {
    const prefixes: Prefix[] = [];
    let set = AddressSet.EMPTY;
    entries.forEach((entry, i) => {
      const at = [...path, i];
      if (KEYWORDS.has(entry)) {
        this.collector.at(
          at,
          'misplaced-keyword',
          `"${entry}" is a keyword, not a network: it can only stand alone as a rule's destination ("to: ${entry}"); move it to a rule of its own`,
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
        `Cannot parse "${entry}" as an address or prefix: ${explainMalformed(entry)}`,
      );
      return undefined;
    }
    const v4 = unmapIpv4(prefix);
    if (v4 !== undefined) this.collector.at(at, 'ipv4-mapped-address', describeMapped(entry, v4));
    if (prefix.hadHostBits) {
      this.collector.at(at, 'host-bits', describeHostBits(entry, v4 ?? prefix));
    }
    return v4 ?? prefix;
  }

  private resolveReference(name: string, at: Path): AddressSet | undefined {
    if (this.options.broken?.has(name) === true) return undefined;
    if (!Object.hasOwn(this.definitions, name) && isDomainName(name)) {
      this.collector.at(
        at,
        'domain-name',
        `"${name}" is a domain name: egressguard cannot match destinations by name yet (a later version adds "domains:" for that); list its addresses or prefixes under "networks" and use that network's name`,
      );
      return undefined;
    }
    if (!Object.hasOwn(this.definitions, name)) {
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
      // One report per cycle, however many of its members are resolved from outside it.
      const key = [...new Set(cycle)].sort().join(',');
      if (!this.reportedCycles.has(key)) {
        this.reportedCycles.add(key);
        this.collector.at(
          at,
          'network-cycle',
          cycle.length === 2
            ? `Network "${name}" refers to itself: remove the reference`
            : `Network "${this.stack.at(-1) ?? name}" refers back to "${name}", a cycle: ${cycle.map((n) => `"${n}"`).join(' → ')}; remove one of these references`,
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
            `Network "${name}" is empty: its exclusions remove all of ${before.describe(3)}, so whatever uses it matches nothing; narrow the exclusions or remove the network`,
          );
        }
      }
    }
    this.stack.pop();
    this.resolved.set(name, set);
    return set;
  }

  private readListFile(file: string, at: Path): AddressSet {
    if (!this.options.readListFiles) {
      this.collector.at(
        at,
        'invalid-value',
        `Network list file "${file}" is not read here: a controller never opens a path a policy names; push with \`egressguard fleet push\`, which puts the lists' prefixes into the policy, or write them under "cidrs"`,
      );
      return AddressSet.EMPTY;
    }
    // Shown as the policy's path names it, so messages and golden files do not depend on the
    // working directory.
    const shown = isAbsolute(file) ? file : join(dirname(this.options.policyFile), file);
    let text: string;
    try {
      text = readListText(shown);
    } catch (error) {
      this.collector.at(
        at,
        'unreadable-file',
        `Cannot read network list "${shown}": ${describeReadError(error)}: check the path (relative to the policy file) and its permissions`,
      );
      return AddressSet.EMPTY;
    }
    if (text.startsWith('\uFEFF')) text = text.slice(1);
    const counts = { 'malformed-cidr': 0, 'host-bits-in-list': 0, 'ipv4-mapped-address': 0 };
    const set = parsePrefixList(text, (issue) => {
      const code =
        issue.kind === 'malformed'
          ? 'malformed-cidr'
          : issue.kind === 'ipv4-mapped'
            ? 'ipv4-mapped-address'
            : 'host-bits-in-list';
      counts[code]++;
      if (counts[code] > MAX_LINE_ISSUES_PER_FILE) return;
      this.collector.inFile(
        shown,
        { line: issue.line, column: issue.column },
        at,
        code,
        issue.kind === 'malformed'
          ? `Cannot parse "${issue.entry}" as a prefix: ${explainMalformed(issue.entry)}`
          : issue.kind === 'ipv4-mapped'
            ? describeMapped(issue.entry, issue.prefix)
            : describeHostBits(issue.entry, issue.prefix),
      );
    });
    for (const code of ['malformed-cidr', 'host-bits-in-list', 'ipv4-mapped-address'] as const) {
      if (counts[code] <= MAX_LINE_ISSUES_PER_FILE) continue;
      this.collector.at(
        at,
        code,
        `Network list "${shown}" has ${counts[code]} lines with this problem; only the first ${MAX_LINE_ISSUES_PER_FILE} are listed: fix the file or regenerate it`,
      );
    }
    return set;
  }
}
