import type { FirewallDiff, SetElementsDiff } from '../backend.js';
import { definitionBlocks, STAMP_SET, type Block } from './nft-sets.js';

const SAMPLE = 3;

/**
 * How the table of one compiled ruleset becomes that of another, by policy id: rules added,
 * removed and changed (every rule line carries its id as a comment, or the id in its log prefix),
 * and the elements each address set gains and loses. Sets are matched by what they are for (their
 * comment and family), not by name: a set's name ends in the hash of its content, so a changed
 * address renames it. A rule whose only change is such a set's content is unchanged: the set's
 * line says it. `before` undefined: no table (everything is added).
 */
export function diffRulesets(
  before: string | undefined,
  after: string,
  table: string,
): FirewallDiff {
  const old = readTable(before, table);
  const now = readTable(after, table);
  const added: string[] = [];
  const removed: string[] = [];
  const changed: string[] = [];
  for (const [id, rule] of now.rules) {
    const was = old.rules.get(id);
    if (was === undefined) added.push(id);
    else if (was.lines.join('\n') !== rule.lines.join('\n')) changed.push(id);
  }
  for (const id of old.rules.keys()) if (!now.rules.has(id)) removed.push(id);
  // First match wins: a rule that moved ahead of or behind another changes what both decide.
  for (const id of movedRules(old.rules, now.rules)) if (!changed.includes(id)) changed.push(id);

  const sets: SetElementsDiff[] = [];
  for (const [key, set] of now.sets) {
    const was = old.sets.get(key);
    // Named by content: the same names, the same elements.
    if (was !== undefined && was.names.join() === set.names.join()) continue;
    const had = new Set(was?.elements ?? []);
    const has = new Set(set.elements);
    const gained = set.elements.filter((e) => !had.has(e));
    const lost = (was?.elements ?? []).filter((e) => !has.has(e));
    if (gained.length > 0 || lost.length > 0) sets.push(setDiff(set, gained, lost));
  }
  for (const [key, set] of old.sets) {
    if (!now.sets.has(key) && set.elements.length > 0) sets.push(setDiff(set, [], set.elements));
  }
  return { rules: { added, removed, changed }, sets };
}

interface Rule {
  /** Its lines, chain by chain, with set names replaced by what the sets are for. */
  readonly lines: string[];
  /** Its place: the chains it is in, and its rank among the rules of each. */
  readonly ranks: Map<string, number>;
}

/** What one label's sets hold in one family: a large list is split over several sets. */
interface AddressSet {
  readonly names: string[];
  readonly label: string;
  readonly family: 'ipv4' | 'ipv6';
  readonly elements: string[];
}

function readTable(
  ruleset: string | undefined,
  table: string,
): { rules: Map<string, Rule>; sets: Map<string, AddressSet> } {
  const blocks = ruleset === undefined ? [] : definitionBlocks(ruleset, table);
  const sets = new Map<string, AddressSet>();
  const setKeyByName = new Map<string, string>();
  for (const block of blocks) {
    if (block.kind !== 'set' || block.name === STAMP_SET) continue;
    const { label, family, elements } = readSet(block);
    const key = `${label} ${family}`;
    const set = sets.get(key) ?? { names: [], label, family, elements: [] };
    set.names.push(block.name);
    set.elements.push(...elements);
    sets.set(key, set);
    setKeyByName.set(block.name, key);
  }
  const rules = new Map<string, Rule>();
  for (const block of blocks) {
    if (block.kind !== 'chain') continue;
    let rank = 0;
    for (const raw of block.text.split('\n').slice(1, -1)) {
      const line = raw.trim();
      // The base chain's declaration (hook, priority) is a rule of the chain itself.
      const id = line.startsWith('type ') ? `chain ${block.name}` : ruleId(line, block.name);
      const text = `${block.name}: ${line.replace(/@(\S+)/g, (_, name: string) => `@{${setKeyByName.get(name) ?? name}}`)}`;
      const rule = rules.get(id) ?? { lines: [], ranks: new Map<string, number>() };
      rule.lines.push(text);
      if (!rule.ranks.has(block.name)) rule.ranks.set(block.name, rank++);
      rules.set(id, rule);
    }
  }
  return { rules, sets };
}

/**
 * A rule line's id: its comment (the policy id every compiled rule carries), the id in its log
 * prefix (`eg drop vpn/kill-switch `: the log line ahead of the rule it logs for), or, for the
 * few lines with neither (the MSS clamp), the line itself in its chain.
 */
function ruleId(line: string, chain: string): string {
  const comment = /comment "([^"]*)"$/.exec(line)?.[1];
  if (comment !== undefined) return comment;
  const logged = /log prefix "eg \S+ (\S+) "/.exec(line)?.[1];
  if (logged !== undefined) return logged;
  return `${chain}: ${line}`;
}

function readSet(block: Block): Omit<AddressSet, 'names'> {
  const label = /\n\t\tcomment "([^"]*)"/.exec(block.text)?.[1] ?? block.name;
  const family = /\n\t\ttype ipv6_addr/.test(block.text) ? 'ipv6' : 'ipv4';
  const start = block.text.indexOf('elements = {');
  const elements =
    start === -1
      ? []
      : block.text
          .slice(start + 'elements = {'.length, block.text.indexOf('}', start))
          .split(',')
          .map((e) => e.trim())
          .filter((e) => e !== '');
  return { label, family, elements };
}

function setDiff(
  set: AddressSet,
  gained: readonly string[],
  lost: readonly string[],
): SetElementsDiff {
  return {
    set: set.label,
    family: set.family,
    added: gained.length,
    removed: lost.length,
    sampleAdded: gained.slice(0, SAMPLE),
    sampleRemoved: lost.slice(0, SAMPLE),
  };
}

/**
 * Rules kept in some chain whose order among the kept rules changed: those outside a longest
 * common subsequence of the old and new order (a rule moved from first to last is the one that
 * moved, not the two it passed).
 */
function movedRules(old: Map<string, Rule>, now: Map<string, Rule>): string[] {
  const chains = new Set([...now.values()].flatMap((r) => [...r.ranks.keys()]));
  const moved = new Set<string>();
  for (const chain of chains) {
    const order = (rules: Map<string, Rule>): string[] =>
      [...rules]
        .filter(([id, r]) => r.ranks.has(chain) && old.get(id)?.ranks.has(chain) === true)
        .filter(([id]) => now.get(id)?.ranks.has(chain) === true)
        .sort(([, a], [, b]) => (a.ranks.get(chain) ?? 0) - (b.ranks.get(chain) ?? 0))
        .map(([id]) => id);
    const kept = new Set(longestCommonSubsequence(order(old), order(now)));
    for (const id of order(now)) if (!kept.has(id)) moved.add(id);
  }
  return [...moved];
}

function longestCommonSubsequence(a: readonly string[], b: readonly string[]): string[] {
  // lengths[i][j]: the LCS length of a[i..] and b[j..]; chains hold tens of rules.
  const lengths = Array.from({ length: a.length + 1 }, () =>
    new Array<number>(b.length + 1).fill(0),
  );
  for (let i = a.length - 1; i >= 0; i--) {
    for (let j = b.length - 1; j >= 0; j--) {
      const row = lengths[i] ?? [];
      row[j] =
        a[i] === b[j]
          ? (lengths[i + 1]?.[j + 1] ?? 0) + 1
          : Math.max(lengths[i + 1]?.[j] ?? 0, row[j + 1] ?? 0);
    }
  }
  const out: string[] = [];
  for (let i = 0, j = 0; i < a.length && j < b.length;) {
    if (a[i] === b[j]) {
      out.push(a[i] ?? '');
      i++;
      j++;
    } else if ((lengths[i + 1]?.[j] ?? 0) >= (lengths[i]?.[j + 1] ?? 0)) i++;
    else j++;
  }
  return out;
}
