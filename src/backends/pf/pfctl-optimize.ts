import type { Prefix } from '../../core/index.js';
import type { PfTable } from './expand-pf-rules.js';
import type {
  PfKernelAnchorRule,
  PfKernelEndpoint,
  PfKernelFilterRule,
  PfKernelRulesets,
} from './pf-rules.js';

/**
 * pfctl's ruleset optimizer, level `basic` (MODEL of F93 contrib/pf/pfctl/pfctl_optimize.c
 * pfctl_optimize_ruleset, which pfctl runs on every filter ruleset it loads unless `-o none` or
 * `set ruleset-optimization none`):
 *
 * 1. construct_superblocks: consecutive rules that may be reordered among themselves. A rule with
 *    a BARRIER field (`label`, `probability`, `max`/`max-src-*` state limits, an anchor call) is a
 *    superblock of its own; a rule joins the current superblock only when every field but the
 *    NOMERGE, COMBINED and DC ones equals the first rule's (superblock_inclusive, comparable_rule);
 *    an interface name that does not end in a digit is a group and breaks unless equal.
 * 2. remove_identical_rules: of two rules in a superblock, one that is identical to, or a subset
 *    of, the other (exclude_supersets: no interface, no direction, no protocol, no port, `any` or
 *    a shorter prefix on the other) is dropped.
 * 3. combine_rules: rules identical but for one address (src or dst, plain addresses, same
 *    negation and ports) are merged into one rule on a constant table once there are
 *    TABLE_THRESHOLD (6) of them; fewer stay as they are.
 *
 * Not modelled: reorder_rules (pass 3, skip-step ordering) keeps the written order here, and the
 * profile level. The table names are pfctl's temporary `__automatic_N` under `-n`; a real load
 * renames them `__automatic_<random hex>_N` (pf_opt_create_table), which the model writes with a
 * fixed hex of 0 so its output is stable.
 */
export function optimizeFilterRuleset(
  rulesets: PfKernelRulesets,
  options: { readonly noAction: boolean; readonly counter: { next: number } },
): { rulesets: PfKernelRulesets; tables: Map<string, PfTable> } {
  const tables = new Map<string, PfTable>();
  const blocks = superblocks(rulesets.filter);
  const out: (PfKernelFilterRule | PfKernelAnchorRule)[] = [];
  for (const block of blocks) {
    if (block.length === 1 || block[0]?.kind !== 'filter') {
      out.push(...block);
      continue;
    }
    const rules = removeIdentical(block as PfKernelFilterRule[]);
    out.push(...combine(rules, tables, options));
  }
  return { rulesets: { ...rulesets, filter: out }, tables };
}

type Rule = PfKernelFilterRule | PfKernelAnchorRule;

function isBarrier(rule: Rule): boolean {
  if (rule.kind === 'anchor') return true;
  return (
    rule.label !== null ||
    rule.probability !== null ||
    rule.stateOptions.some((o) => /^(max|max-src-)/.test(o)) ||
    rule.stateOptions.some((o) => o.startsWith('source-track rule'))
  );
}

/** The BREAK fields (and every field the table does not list), as one comparable key. */
function breakKey(rule: PfKernelFilterRule): string {
  return JSON.stringify([
    rule.action,
    rule.quick,
    rule.log,
    rule.tag,
    rule.state,
    rule.stateBinding,
    rule.stateOptions,
    rule.route,
    rule.allowOpts,
    rule.fragment,
    rule.blockPolicy?.kind ?? null,
    rule.blockPolicy?.kind === 'return-rst' ? rule.blockPolicy.ttl : null,
    rule.rtable,
  ]);
}

function isGroup(name: string | undefined): boolean {
  return name !== undefined && name !== '' && !/\d$/.test(name);
}

function superblocks(rules: readonly Rule[]): Rule[][] {
  const blocks: Rule[][] = [];
  let block: Rule[] | null = null;
  for (const rule of rules) {
    const first = block?.[0];
    const joins =
      block !== null &&
      first !== undefined &&
      !isBarrier(rule) &&
      !isBarrier(first) &&
      rule.kind === 'filter' &&
      first.kind === 'filter' &&
      !(
        (isGroup(rule.interface?.name) || isGroup(first.interface?.name)) &&
        rule.interface?.name.toLowerCase() !== first.interface?.name.toLowerCase()
      ) &&
      breakKey(rule) === breakKey(first);
    if (joins && block !== null) {
      block.push(rule);
    } else {
      block = [rule];
      blocks.push(block);
    }
  }
  return blocks;
}

/** The fields compared when DC fields are zeroed (everything pfctl does not set in the kernel). */
interface Comparable {
  interface: string;
  negatedInterface: boolean;
  direction: string | null;
  family: number | null;
  protocol: number | null;
  flags: string | null;
  from: ComparableEnd;
  to: ComparableEnd;
  rest: string;
}

interface ComparableEnd {
  negated: boolean;
  address: string;
  /** For a plain address: its prefix, to test containment. */
  prefix: Prefix | null;
  port: string | null;
}

function comparable(rule: PfKernelFilterRule): Comparable {
  const end = (e: PfKernelEndpoint): ComparableEnd => ({
    negated: e.negated,
    address: JSON.stringify(e.address, (_k, v: unknown) =>
      typeof v === 'bigint' ? v.toString() : v,
    ),
    prefix:
      e.address.kind === 'prefix'
        ? e.address.prefix
        : e.address.kind === 'any'
          ? { family: 4, start: 0, length: 0, hadHostBits: false }
          : null,
    port: e.port === null ? null : JSON.stringify(e.port),
  });
  return {
    interface: rule.interface?.name ?? '',
    negatedInterface: rule.interface?.negated ?? false,
    direction: rule.direction,
    family: rule.family,
    protocol: rule.protocol,
    flags: rule.flags === null ? null : `${rule.flags.set}/${rule.flags.mask}`,
    from: end(rule.from),
    to: end(rule.to),
    rest: JSON.stringify([breakKey(rule), rule.tagged, rule.icmpType, rule.tos, rule.blockPolicy]),
  };
}

/** F93 exclude_supersets: what of `sub` the superset `sup` covers is made equal to it. */
function excludeSupersets(sup: Comparable, sub: Comparable): void {
  if (sup.interface === '') {
    sub.interface = '';
    sub.negatedInterface = false;
  }
  if (sup.direction === null) sub.direction = null;
  if ((sup.protocol === null || sup.protocol === sub.protocol) && sup.flags === null) {
    sub.flags = null;
  }
  if (sup.protocol === null) sub.protocol = null;
  if (sup.from.port === null) sub.from.port = null;
  if (sup.to.port === null) sub.to.port = null;
  for (const side of ['from', 'to'] as const) {
    const a = sup[side];
    const b = sub[side];
    const anyAddress = a.prefix !== null && a.prefix.length === 0;
    if (anyAddress && !a.negated && !b.negated) {
      b.address = a.address;
      b.prefix = a.prefix;
    } else if (
      a.prefix !== null &&
      b.prefix !== null &&
      a.negated === b.negated &&
      sup.family === sub.family &&
      a.prefix.family === b.prefix.family &&
      a.prefix.length < b.prefix.length &&
      contains(a.prefix, b.prefix)
    ) {
      b.address = a.address;
      b.prefix = a.prefix;
    }
  }
  if (sup.family === null) sub.family = null;
}

function contains(outer: Prefix, inner: Prefix): boolean {
  if (outer.length === 0) return true;
  if (outer.family === 4) {
    const size = 2 ** (32 - outer.length);
    return (
      Math.floor((inner.start as number) / size) === Math.floor((outer.start as number) / size)
    );
  }
  const shift = BigInt(128 - outer.length);
  return (inner.start as bigint) >> shift === (outer.start as bigint) >> shift;
}

function same(a: Comparable, b: Comparable): boolean {
  const strip = (c: Comparable) => ({
    ...c,
    from: { ...c.from, prefix: null },
    to: { ...c.to, prefix: null },
  });
  return JSON.stringify(strip(a)) === JSON.stringify(strip(b));
}

/** F93 remove_identical_rules. */
function removeIdentical(block: readonly PfKernelFilterRule[]): PfKernelFilterRule[] {
  const rules = [...block];
  for (let i = 0; i < rules.length; i++) {
    for (let j = i + 1; j < rules.length; j++) {
      const first = rules[i] as PfKernelFilterRule;
      const second = rules[j] as PfKernelFilterRule;
      const a = comparable(first);
      const b = comparable(second);
      const a2 = comparable(first);
      const b2 = comparable(second);
      excludeSupersets(a, b);
      excludeSupersets(b2, a2);
      if (same(a, b)) {
        rules.splice(j, 1);
        j--;
      } else if (same(a2, b2)) {
        rules.splice(i, 1);
        i--;
        break;
      }
    }
  }
  return rules;
}

const TABLE_THRESHOLD = 6;

/** F93 combine_rules: ≥ 6 rules that differ in one plain address become one rule on a table. */
function combine(
  block: readonly PfKernelFilterRule[],
  tables: Map<string, PfTable>,
  options: { readonly noAction: boolean; readonly counter: { next: number } },
): PfKernelFilterRule[] {
  interface Entry {
    rule: PfKernelFilterRule;
    side: 'from' | 'to' | null;
    group: { members: PfKernelFilterRule[]; generated: boolean } | null;
    removed: boolean;
  }
  const entries: Entry[] = block.map((rule) => ({ rule, side: null, group: null, removed: false }));
  const plain = (e: PfKernelEndpoint): boolean =>
    e.address.kind === 'prefix' || e.address.kind === 'any';
  const combinable = (a: PfKernelEndpoint, b: PfKernelEndpoint): boolean =>
    plain(a) &&
    plain(b) &&
    a.negated === b.negated &&
    JSON.stringify(a.port) === JSON.stringify(b.port);
  const key = (rule: PfKernelFilterRule, side: 'from' | 'to'): string => {
    const c = comparable(rule);
    c[side] = { negated: false, address: '', prefix: null, port: c[side].port };
    return JSON.stringify({
      ...c,
      from: { ...c.from, prefix: null },
      to: { ...c.to, prefix: null },
    });
  };
  const endpointText = (e: PfKernelEndpoint): string =>
    JSON.stringify(e.address, (_k, v: unknown) => (typeof v === 'bigint' ? v.toString() : v));
  for (let i = 0; i < entries.length; i++) {
    const p1 = entries[i] as Entry;
    if (p1.removed) continue;
    for (let j = i + 1; j < entries.length; j++) {
      const p2 = entries[j] as Entry;
      if (p2.removed) continue;
      const srcEq =
        p1.rule.from.negated === p2.rule.from.negated &&
        endpointText(p1.rule.from) === endpointText(p2.rule.from);
      const dstEq =
        p1.rule.to.negated === p2.rule.to.negated &&
        endpointText(p1.rule.to) === endpointText(p2.rule.to);
      for (const [side, equal] of [
        ['to', srcEq && !dstEq],
        ['from', !srcEq && dstEq],
      ] as const) {
        if (!equal || p2.group !== null) continue;
        if (p1.group !== null && p1.side !== side) continue;
        if (key(p1.rule, side) !== key(p2.rule, side)) continue;
        if (!combinable(p1.rule[side], p2.rule[side])) continue;
        p1.side = side;
        p1.group ??= { members: [p1.rule], generated: false };
        p1.group.members.push(p2.rule);
        p2.group = p1.group;
        p2.side = side;
        if (p1.group.members.length >= TABLE_THRESHOLD) p2.removed = true;
      }
    }
  }
  const out: PfKernelFilterRule[] = [];
  for (const entry of entries) {
    if (entry.removed) continue;
    const group = entry.group;
    if (group === null || entry.side === null || group.members.length < TABLE_THRESHOLD) {
      out.push(entry.rule);
      continue;
    }
    if (group.generated) continue;
    group.generated = true;
    const n = options.counter.next++;
    const name = options.noAction ? `__automatic_${n}` : `__automatic_0_${n}`;
    const side = entry.side;
    tables.set(name, {
      entries: group.members.map((r) => {
        const address = r[side].address;
        return {
          negated: false,
          prefix:
            address.kind === 'prefix'
              ? address.prefix
              : {
                  family: r.family ?? 4,
                  start: r.family === 6 ? 0n : 0,
                  length: 0,
                  hadHostBits: false,
                },
        };
      }),
      persist: false,
      constant: true,
    });
    out.push({
      ...entry.rule,
      // The address becomes the table; negation and port stay (addrs_combineable required them equal).
      [side]: { ...entry.rule[side], address: { kind: 'table', name } },
    });
  }
  return out;
}
