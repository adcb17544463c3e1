import type { DoctorFinding, DoctorSeverity, SteeringRange } from './nft-doctor-snapshot.js';

/** One entry of `ip -N -j rule show`. */
interface IpRuleJson {
  priority?: number;
  src?: string;
  srclen?: number;
  dst?: string;
  dstlen?: number;
  table?: string;
  protocol?: string;
  not?: null;
  fwmark?: string;
  fwmask?: string;
  iif?: string;
  oif?: string;
  uidrange?: string;
  ipproto?: string;
  sport?: unknown;
  dport?: unknown;
  l3mdev?: unknown;
  tos?: string;
  dsfield?: string;
  suppress_prefixlen?: number;
  action?: string;
}

/** One entry of `ip -N -j route show table all`: the main table has no "table" key. */
interface IpRouteJson {
  type?: string;
  dst?: string;
  dev?: string;
  gateway?: string;
  table?: string;
  protocol?: string;
}

type Family = 4 | 6;

// Well-known neighbours (DESIGN.md §4): wg-quick uses table 51820 and fwmark 51820 (0xca6c) at
// priorities 32764–32765; Tailscale uses table 52 and priorities 5210–5270.
const WG_QUICK_TABLE = 51820;
const TAILSCALE_TABLE = 52;
const TAILSCALE_PRIORITIES = { from: 5210, to: 5270 } as const;
const SYSTEM_TABLES = new Set(['253', '254', '255']); // default, main, local
const RTN_NAMES: Record<string, string> = {
  '1': 'unicast',
  '2': 'local',
  '3': 'broadcast',
  '4': 'anycast',
  '5': 'multicast',
  '6': 'blackhole',
  '7': 'unreachable',
  '8': 'prohibit',
  '9': 'throw',
  '10': 'nat',
};
const RTPROT_NAMES: Record<string, string> = {
  '0': 'unspec',
  '2': 'kernel',
  '3': 'boot',
  '4': 'static',
  '16': 'dhcp',
  '9': 'ra',
};

/**
 * Collisions with the routing tables and rule priorities egressguard steers with: a foreign rule
 * at our priority or looking up our table, a foreign route in our table, our ids on wg-quick's or
 * Tailscale's, and foreign rules that take class traffic before our steering sees it.
 */
export function classifyRouting(
  input: {
    readonly rules: { readonly 4: unknown; readonly 6: unknown };
    readonly routes: { readonly 4: unknown; readonly 6: unknown };
  },
  steering: SteeringRange,
): DoctorFinding[] {
  const rules = ([4, 6] as const).flatMap((f) =>
    asArray<IpRuleJson>(input.rules[f]).map((rule) => ({ family: f, rule })),
  );
  const routes = ([4, 6] as const).flatMap((f) =>
    asArray<IpRouteJson>(input.routes[f]).map((route) => ({ family: f, route })),
  );
  const protocol = String(steering.protocol);
  const ourTables = new Set(steering.tables.map(String));
  const ourPriorities = new Set(steering.priorities);
  const firstPriority = Math.min(...steering.priorities);
  const isOurs = (x: { protocol?: string }): boolean => x.protocol === protocol;
  // Errors matter once steering is in use; before that they are worth knowing, no more.
  const severe = (s: DoctorSeverity): DoctorSeverity =>
    steering.inUse === false && s !== 'info' ? 'info' : s;
  const whenUnused =
    steering.inUse === false
      ? ' (the policy has no tunnel class, so egressguard adds no routing rules yet)'
      : '';
  const findings: DoctorFinding[] = [];

  for (const { family, rule } of rules) {
    if (isOurs(rule) || rule.priority === undefined) continue;
    if (ourPriorities.has(rule.priority)) {
      findings.push({
        severity: severe('error'),
        area: 'routing',
        code: 'rule-priority-collision',
        message: `Routing rule ${describeRule(family, rule)} is not ours and sits at priority ${rule.priority}, which egressguard uses for steering${whenUnused}`,
        hint: 'rules of one priority are consulted in the order they were added, so steering would depend on who came first: move that rule to another priority',
      });
    }
    if (rule.table !== undefined && ourTables.has(rule.table)) {
      findings.push({
        severity: severe('error'),
        area: 'routing',
        code: 'rule-table-collision',
        message: `Routing rule ${describeRule(family, rule)} is not ours and looks up table ${rule.table}, which egressguard owns${whenUnused}`,
        hint: 'its traffic would follow our tunnel routes and blackhole: point that rule at another table',
      });
    }
  }

  const foreignRoutes = new Map<string, string[]>();
  for (const { family, route } of routes) {
    const table = route.table ?? '254';
    if (!ourTables.has(table) || isOurs(route)) continue;
    foreignRoutes.set(table, [...(foreignRoutes.get(table) ?? []), describeRoute(family, route)]);
  }
  for (const [table, described] of foreignRoutes) {
    findings.push({
      severity: severe('error'),
      area: 'routing',
      code: 'route-table-collision',
      message: `Routing table ${table}, which egressguard owns, holds ${described.length === 1 ? 'a route' : `${described.length} routes`} that ${described.length === 1 ? 'is' : 'are'} not ours: ${described.join('; ')}${whenUnused}`,
      hint: 'another program uses this table id: move its routes to another table, or egressguard would steer class traffic along them',
    });
  }

  for (const table of steering.tables) {
    const owner =
      table === WG_QUICK_TABLE ? 'wg-quick' : table === TAILSCALE_TABLE ? 'Tailscale' : undefined;
    if (owner === undefined) continue;
    findings.push({
      severity: severe('error'),
      area: 'routing',
      code: 'reserved-id-collision',
      message: `egressguard's routing table ${table} is the one ${owner} uses`,
      hint: 'choose another steering table (--route-table)',
    });
  }
  for (const priority of steering.priorities) {
    if (priority < TAILSCALE_PRIORITIES.from || priority > TAILSCALE_PRIORITIES.to) continue;
    findings.push({
      severity: severe('error'),
      area: 'routing',
      code: 'reserved-id-collision',
      message: `egressguard's rule priority ${priority} is within Tailscale's range ${TAILSCALE_PRIORITIES.from}–${TAILSCALE_PRIORITIES.to}`,
      hint: 'choose another steering priority (--rule-priority)',
    });
  }

  const defaultTables = new Set(
    routes
      .filter(({ route }) => route.dst === 'default' && isForwardingType(route.type))
      .map(({ route }) => route.table ?? '254'),
  );
  const tailscale = rules.filter(
    ({ rule }) =>
      rule.table === String(TAILSCALE_TABLE) ||
      (rule.priority !== undefined &&
        rule.priority >= TAILSCALE_PRIORITIES.from &&
        rule.priority <= TAILSCALE_PRIORITIES.to),
  );
  for (const { family, rule } of rules) {
    if (isOurs(rule) || rule.priority === undefined || rule.priority === 0) continue;
    if (rule.priority >= firstPriority || tailscale.some((t) => t.rule === rule)) continue;
    if (!matchesEverything(rule) || rule.table === undefined || SYSTEM_TABLES.has(rule.table))
      continue;
    if (!defaultTables.has(rule.table)) continue;
    findings.push({
      severity: severe('warning'),
      area: 'routing',
      code: 'rule-preempts-steering',
      message: `Routing rule ${describeRule(family, rule)} comes before egressguard's steering (priority ${firstPriority}) and its table ${rule.table} has a default route: class traffic follows it and never reaches our steering`,
      hint: "the nft kill switch still drops tunnel classes that leave another way; if this rule is meant for the host's own traffic, narrow it (from, fwmark, uidrange) or give it a priority after ours",
    });
  }

  if (tailscale.length > 0) {
    const exitNode = defaultTables.has(String(TAILSCALE_TABLE));
    findings.push({
      severity: severe(exitNode ? 'warning' : 'info'),
      area: 'routing',
      code: 'tailscale-routing',
      message: `Tailscale's routing rules (${priorities(tailscale)}, table ${TAILSCALE_TABLE}) come before egressguard's at ${firstPriority}: traffic to the tailnet${exitNode ? ', and with the exit node in table 52 all traffic,' : ''} leaves by Tailscale before our steering applies`,
      hint: exitNode
        ? "tunnel classes' traffic goes to the exit node and is dropped by the kill switch unless it leaves by the class's tunnel: disable the exit node or exclude the classes' sources from it"
        : "class traffic to tailnet addresses is Tailscale's to route; a tunnel class's kill switch drops it unless the tailnet is among its exceptions",
    });
  }
  const wgQuickMark = rules.filter(
    ({ rule }) =>
      rule.table === String(WG_QUICK_TABLE) || rule.fwmark === `0x${WG_QUICK_TABLE.toString(16)}`,
  );
  // wg-quick pairs its fwmark rule with `lookup main suppress_prefixlength 0` one priority earlier.
  const wgQuick = [
    ...rules.filter(
      ({ rule }) =>
        wgQuickMark.length > 0 &&
        rule.suppress_prefixlen === 0 &&
        wgQuickMark.some((w) => w.rule.priority === (rule.priority ?? 0) + 1),
    ),
    ...wgQuickMark,
  ];
  if (wgQuick.length > 0) {
    findings.push({
      severity: 'info',
      area: 'routing',
      code: 'wg-quick-routing',
      message: `wg-quick's routing rules (${priorities(wgQuick)}, table ${WG_QUICK_TABLE}) come after egressguard's at ${firstPriority}: class traffic is steered before them, everything else follows wg-quick`,
      hint: 'nothing to do: the tables and priorities do not collide',
    });
  }
  return findings;
}

function priorities(rules: readonly { rule: IpRuleJson }[]): string {
  const list = [...new Set(rules.map((r) => r.rule.priority ?? 0))].sort((a, b) => a - b);
  return `${list.length === 1 ? 'priority' : 'priorities'} ${list.join(', ')}`;
}

/** A rule with no selector but its source "all": it takes every packet that reaches it. */
function matchesEverything(rule: IpRuleJson): boolean {
  const selectors: (keyof IpRuleJson)[] = [
    'dst',
    'fwmark',
    'iif',
    'oif',
    'uidrange',
    'ipproto',
    'sport',
    'dport',
    'l3mdev',
    'tos',
    'dsfield',
    'not',
    'suppress_prefixlen',
    'action',
  ];
  return (rule.src === undefined || rule.src === 'all') && selectors.every((k) => !(k in rule));
}

function isForwardingType(type: string | undefined): boolean {
  return type === undefined || type === '1';
}

function describeRule(family: Family, rule: IpRuleJson): string {
  const parts = [`${rule.priority ?? '?'}:`];
  if (rule.not !== undefined) parts.push('not');
  parts.push(`from ${rule.src ?? 'all'}${rule.srclen === undefined ? '' : `/${rule.srclen}`}`);
  if (rule.dst !== undefined)
    parts.push(`to ${rule.dst}${rule.dstlen === undefined ? '' : `/${rule.dstlen}`}`);
  if (rule.fwmark !== undefined)
    parts.push(`fwmark ${rule.fwmark}${rule.fwmask === undefined ? '' : `/${rule.fwmask}`}`);
  if (rule.iif !== undefined) parts.push(`iif ${rule.iif}`);
  if (rule.oif !== undefined) parts.push(`oif ${rule.oif}`);
  if (rule.table !== undefined) parts.push(`lookup ${rule.table}`);
  if (rule.action !== undefined) parts.push(rule.action);
  if (rule.protocol !== undefined)
    parts.push(`proto ${RTPROT_NAMES[rule.protocol] ?? rule.protocol}`);
  return `"${parts.join(' ')}" (IPv${family})`;
}

function describeRoute(family: Family, route: IpRouteJson): string {
  const type = route.type === undefined ? '' : `${RTN_NAMES[route.type] ?? route.type} `;
  const via = route.gateway === undefined ? '' : ` via ${route.gateway}`;
  const dev = route.dev === undefined ? '' : ` dev ${route.dev}`;
  const proto = `proto ${RTPROT_NAMES[route.protocol ?? '3'] ?? route.protocol ?? 'boot'}`;
  return `"${type}${route.dst ?? '?'}${via}${dev} ${proto}" (IPv${family})`;
}

function asArray<T>(value: unknown): T[] {
  return Array.isArray(value) ? (value as T[]) : [];
}
