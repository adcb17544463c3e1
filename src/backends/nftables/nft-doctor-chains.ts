import type { DoctorFinding } from './nft-doctor-snapshot.js';

/** A base chain of another table on a hook our table uses (or that drops before routing). */
export interface ForeignChain {
  readonly family: string;
  readonly table: string;
  readonly chain: string;
  readonly hook: string;
  /** filter, nat or route. */
  readonly type: string;
  readonly priority: number;
  readonly policy: 'accept' | 'drop';
  /** Relative to our chain on the same hook: lower priorities run first. */
  readonly order: 'before' | 'after' | 'same-priority';
  readonly canDrop: boolean;
  /** Why it can drop: its policy, or drop/reject verdicts in it or in chains it jumps to. */
  readonly dropReasons: readonly string[];
}

/** The hooks our table uses; a foreign drop on any of them is final for what we accept. */
const OUR_HOOKS = ['forward', 'input', 'output', 'postrouting'] as const;
/** Hooks before routing: a drop there also ends what we would allow, so list those that drop. */
const EARLY_HOOKS = ['prerouting', 'ingress'];
/** Families whose chains see routed IP packets (bridge and arp see frames). */
const IP_FAMILIES = new Set(['ip', 'ip6', 'inet', 'netdev']);
/** Our chains' priorities when our table is not loaded (the compiler's). */
const OUR_DEFAULT_PRIORITY: Record<string, number> = {
  forward: 0,
  input: 0,
  output: 0,
  postrouting: 100,
};

interface NftChainJson {
  family?: string;
  table?: string;
  name?: string;
  hook?: string;
  type?: string;
  prio?: number;
  policy?: string;
}
interface NftRuleJson {
  family?: string;
  table?: string;
  chain?: string;
  handle?: number;
  expr?: unknown[];
}
interface NftSetJson {
  family?: string;
  table?: string;
  name?: string;
  map?: string;
}

/**
 * Lists foreign base chains and says which can drop. A drop in any base chain is final and an
 * accept ends only its own chain, so another table's drops (Docker's FORWARD policy drop,
 * firewalld's final reject) still drop what our table accepts.
 */
export function classifyChains(
  ruleset: unknown,
  options: {
    readonly table: string;
    readonly legacyIptables?: { readonly 4: readonly string[]; readonly 6: readonly string[] };
  },
): { foreignChains: ForeignChain[]; findings: DoctorFinding[] } {
  const objects = listObjects(ruleset);
  const chains = objects.flatMap((o) => (o.kind === 'chain' ? [o.body as NftChainJson] : []));
  const rules = objects.flatMap((o) => (o.kind === 'rule' ? [o.body as NftRuleJson] : []));
  const maps = objects.flatMap((o) => (o.kind === 'map' ? [o.body as NftSetJson] : []));
  const isOurs = (c: { family?: string; table?: string }): boolean =>
    c.family === 'inet' && c.table === options.table;

  const rulesByChain = new Map<string, NftRuleJson[]>();
  for (const rule of rules) {
    const key = chainKey(rule.family, rule.table, rule.chain);
    rulesByChain.set(key, [...(rulesByChain.get(key) ?? []), rule]);
  }
  const verdictMaps = new Set(
    maps.filter((m) => m.map === 'verdict').map((m) => chainKey(m.family, m.table, m.name)),
  );
  const ourPriority = new Map<string, number>();
  for (const c of chains) {
    if (isOurs(c) && c.hook !== undefined && c.prio !== undefined) ourPriority.set(c.hook, c.prio);
  }

  const foreignChains: ForeignChain[] = [];
  for (const c of chains) {
    if (c.hook === undefined || isOurs(c) || !IP_FAMILIES.has(c.family ?? '')) continue;
    const onOurHook = (OUR_HOOKS as readonly string[]).includes(c.hook) && c.family !== 'netdev';
    if (!onOurHook && !EARLY_HOOKS.includes(c.hook)) continue;
    const policy = c.policy === 'drop' ? 'drop' : 'accept';
    const reasons = [
      ...(policy === 'drop' ? ['policy drop'] : []),
      ...findDrops(c, { rulesByChain, verdictMaps }),
    ];
    if (!onOurHook && reasons.length === 0) continue;
    const priority = c.prio ?? 0;
    const ours = ourPriority.get(c.hook) ?? OUR_DEFAULT_PRIORITY[c.hook];
    foreignChains.push({
      family: c.family ?? '',
      table: c.table ?? '',
      chain: c.name ?? '',
      hook: c.hook,
      type: c.type ?? 'filter',
      priority,
      policy,
      order: !onOurHook
        ? 'before' // prerouting and ingress come before routing, so before any of ours
        : ours === undefined || priority === ours
          ? 'same-priority'
          : priority < ours
            ? 'before'
            : 'after',
      canDrop: reasons.length > 0,
      dropReasons: reasons,
    });
  }
  foreignChains.sort(
    (a, b) =>
      hookRank(a.hook) - hookRank(b.hook) ||
      a.priority - b.priority ||
      `${a.family} ${a.table} ${a.chain}`.localeCompare(`${b.family} ${b.table} ${b.chain}`),
  );

  const findings: DoctorFinding[] = foreignChains.map((c) => chainFinding(c, chains));
  if (!objects.some((o) => o.kind === 'table' && isOurs(tableOf(o)))) {
    findings.push({
      severity: 'info',
      area: 'nftables',
      code: 'table-absent',
      message: `Table inet ${options.table} is not loaded: egressguard enforces nothing here yet`,
      hint: 'apply a policy with `egressguard apply POLICY`',
    });
  }
  const legacy = options.legacyIptables;
  if (legacy !== undefined && legacy[4].length + legacy[6].length > 0) {
    const names = [
      ...(legacy[4].length > 0 ? [`iptables: ${legacy[4].join(', ')}`] : []),
      ...(legacy[6].length > 0 ? [`ip6tables: ${legacy[6].join(', ')}`] : []),
    ];
    findings.push({
      severity: 'warning',
      area: 'nftables',
      code: 'iptables-legacy',
      message: `Legacy iptables tables are loaded (${names.join('; ')}): they run on the same hooks but nft does not list them, so doctor cannot say whether they drop`,
      hint: 'read them with `iptables-legacy-save` and `ip6tables-legacy-save`: a DROP policy or rule there drops what egressguard allows',
    });
  }
  return { foreignChains, findings };
}

function chainFinding(c: ForeignChain, chains: readonly NftChainJson[]): DoctorFinding {
  const family = c.family === 'ip' ? ' (IPv4 only)' : c.family === 'ip6' ? ' (IPv6 only)' : '';
  const where = `"${c.chain}" of table ${c.family} ${c.table}${family}: ${c.type} hook ${c.hook}, priority ${c.priority}, policy ${c.policy}`;
  const position =
    c.hook === 'prerouting' || c.hook === 'ingress'
      ? 'runs before routing, so before any of our chains'
      : c.order === 'same-priority'
        ? 'runs at the same priority as ours'
        : `runs ${c.order} ours`;
  if (!c.canDrop) {
    return {
      severity: 'info',
      area: 'nftables',
      code: 'foreign-base-chain',
      message: `Base chain ${where}; it ${position} and only accepts`,
      hint: 'nothing to do: an accept there ends only that chain, so our drops still hold',
    };
  }
  return {
    severity: c.hook === 'prerouting' || c.hook === 'ingress' ? 'info' : 'warning',
    area: 'nftables',
    code: 'foreign-base-chain',
    message: `Base chain ${where}; it ${position} and can drop (${c.dropReasons.join('; ')})`,
    hint: `a drop in any base chain is final, so packets egressguard allows can still be dropped here. ${ownerAdvice(c, chains)}`,
  };
}

/** What to do about it, for the owners we recognise by their chain names. */
function ownerAdvice(c: ForeignChain, chains: readonly NftChainJson[]): string {
  const sameTable = chains.filter((x) => x.family === c.family && x.table === c.table);
  if (sameTable.some((x) => x.name === 'DOCKER-USER')) {
    return "Docker: accept the classes' traffic in DOCKER-USER (FORWARD jumps there first), e.g. `iptables -I DOCKER-USER -i <class interface> -j ACCEPT`";
  }
  if (c.table === 'firewalld') {
    return 'firewalld: put the class interfaces in a zone or policy that accepts and forwards them (e.g. `firewall-cmd --permanent --zone=trusted --add-interface=<class interface>`)';
  }
  return `make table ${c.family} ${c.table} accept the classes' traffic as well, or remove the chain`;
}

interface Lookup {
  readonly rulesByChain: ReadonlyMap<string, readonly NftRuleJson[]>;
  readonly verdictMaps: ReadonlySet<string>;
}

/** Drop and reject verdicts reachable from a base chain through jumps, gotos and verdict maps. */
function findDrops(base: NftChainJson, lookup: Lookup): string[] {
  const reasons: string[] = [];
  const seen = new Set<string>();
  const visit = (name: string): void => {
    const key = chainKey(base.family, base.table, name);
    if (seen.has(key)) return;
    seen.add(key);
    const where = name === base.name ? '' : ` in chain "${name}"`;
    for (const rule of lookup.rulesByChain.get(key) ?? []) {
      const found = scanVerdicts(rule.expr ?? []);
      const at = `${where}${where === '' ? ' in' : ','} rule handle ${rule.handle ?? '?'}`;
      for (const verdict of found.verdicts) reasons.push(`${verdict}${at}`);
      for (const map of found.namedMaps) {
        if (lookup.verdictMaps.has(chainKey(base.family, base.table, map.slice(1)))) {
          reasons.push(`verdict map ${map}${at}, whose elements are not listed`);
        }
      }
      for (const target of found.targets) visit(target);
    }
  };
  if (base.name !== undefined) visit(base.name);
  return reasons;
}

/** Verdicts anywhere in a rule's expressions, inline verdict maps included. */
function scanVerdicts(expr: unknown): {
  verdicts: string[];
  targets: string[];
  namedMaps: string[];
} {
  const out = { verdicts: [] as string[], targets: [] as string[], namedMaps: [] as string[] };
  const walk = (node: unknown): void => {
    if (Array.isArray(node)) {
      for (const item of node) walk(item);
      return;
    }
    if (node === null || typeof node !== 'object') return;
    for (const [key, value] of Object.entries(node)) {
      if (key === 'drop' || key === 'reject') {
        if (!out.verdicts.includes(key)) out.verdicts.push(key);
      } else if ((key === 'jump' || key === 'goto') && isTarget(value)) {
        out.targets.push(value.target);
      } else if (key === 'vmap' && isVmap(value) && typeof value.data === 'string') {
        out.namedMaps.push(value.data);
      } else {
        walk(value);
      }
    }
  };
  walk(expr);
  return out;
}

function isTarget(value: unknown): value is { target: string } {
  return (
    typeof value === 'object' &&
    value !== null &&
    typeof (value as { target?: unknown }).target === 'string'
  );
}

function isVmap(value: unknown): value is { data: unknown } {
  return typeof value === 'object' && value !== null && 'data' in value;
}

function chainKey(family?: string, table?: string, name?: string): string {
  return `${family ?? ''}\u0000${table ?? ''}\u0000${name ?? ''}`;
}

function hookRank(hook: string): number {
  const order = ['ingress', 'prerouting', 'input', 'forward', 'output', 'postrouting'];
  return order.indexOf(hook);
}

function tableOf(o: { body: Record<string, unknown> }): { family?: string; table?: string } {
  const family = o.body['family'];
  const name = o.body['name'];
  return {
    ...(typeof family === 'string' ? { family } : {}),
    ...(typeof name === 'string' ? { table: name } : {}),
  };
}

/** The objects of an `nft -j` listing as (kind, body) pairs; metainfo skipped. */
function listObjects(ruleset: unknown): { kind: string; body: Record<string, unknown> }[] {
  const items = (ruleset as { nftables?: unknown } | null)?.nftables;
  if (!Array.isArray(items)) return [];
  return items.flatMap((item: unknown) => {
    if (item === null || typeof item !== 'object') return [];
    const [kind, body] = Object.entries(item)[0] ?? [];
    if (kind === undefined || kind === 'metainfo' || body === null || typeof body !== 'object')
      return [];
    return [{ kind, body: body as Record<string, unknown> }];
  });
}
