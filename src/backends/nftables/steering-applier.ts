import { EgressguardError, type Family } from '../../core/index.js';
import type { Runner } from '../../runner/index.js';
import type { SteeringGroup, SteeringRoute, SteeringRule, SteeringSpec } from './steering.js';

/** The tables and priorities whose foreign occupants are collisions. */
type SteeringScope = Pick<SteeringGroup, 'table' | 'priority'>;

interface IpRule {
  priority: number;
  src?: string;
  srclen?: number;
  table?: string;
  protocol?: string;
}

interface IpRoute {
  type?: string;
  dst: string;
  dev?: string;
  metric?: number;
  protocol?: string;
  table?: string;
}

/** Live policy routing that concerns us: our rules and routes, and anything in our way. */
export interface LiveSteering {
  /** Rules tagged with our protocol, at any priority. */
  readonly ownedRules: readonly SteeringRule[];
  /** Routes tagged with our protocol, in any table (an earlier policy may have used more). */
  readonly ownedRoutes: readonly SteeringRoute[];
  /** Foreign rules at our priorities, foreign routes in our tables. */
  readonly collisions: readonly string[];
  /** `ip -j link show`, when asked for (`withLinks`). */
  readonly links?: readonly IpLink[];
}

/** A link as `ip -j link show` lists it. */
export interface IpLink {
  readonly ifname: string;
  readonly flags?: readonly string[];
  readonly operstate?: string;
}

export interface SteeringDiff {
  readonly addRules: readonly SteeringRule[];
  readonly deleteRules: readonly SteeringRule[];
  readonly addRoutes: readonly SteeringRoute[];
  readonly deleteRoutes: readonly SteeringRoute[];
}

const FAMILY_FLAG = { 4: '-4', 6: '-6' } as const;
const MAIN_TABLE = 254;
// rtnetlink route types (include/uapi/linux/rtnetlink.h RTN_*): `-N` prints them as numbers.
const ROUTE_TYPES: Readonly<Record<string, SteeringRoute['type']>> = {
  '1': 'unicast',
  unicast: 'unicast',
  '6': 'blackhole',
  blackhole: 'blackhole',
  '9': 'throw',
  throw: 'throw',
};

/**
 * Reads our rules and routes by their protocol tag, wherever they are: a policy that steered
 * more tunnels, or another first table id, left routes in tables the desired spec does not name,
 * and `remove` has no spec at all. The desired tables and priorities are listed besides, only to
 * find foreign state in our way.
 */
export async function readLiveSteering(
  runner: Runner,
  spec: { readonly protocol: number; readonly tunnels: readonly SteeringScope[] },
  options: { readonly withLinks?: boolean } = {},
): Promise<LiveSteering> {
  const ownedRules: SteeringRule[] = [];
  const ownedRoutes: SteeringRoute[] = [];
  const collisions: string[] = [];
  const proto = String(spec.protocol);
  const priorities = new Set(spec.tunnels.map((t) => t.priority));
  const tables = [...new Set(spec.tunnels.map((t) => t.table))];
  // One process per family, both at once. `-N` keeps protocols, tables and route types numeric:
  // an rt_protos name for our protocol would otherwise make our own rules look foreign (and
  // "main" is not a table id). The links, when asked for, ride in the IPv4 process: a read-back
  // needs them for the tunnels' state, and a process fewer is a tenth of a reapply's time.
  const families = [4, 6] as const;
  const links = options.withLinks === true ? [['link', 'show']] : [];
  const listings = await Promise.all(
    families.map((family) =>
      ipJsonBatch<IpRule & IpRoute & IpLink>(runner, family, [
        ['rule', 'show'],
        ['route', 'show', 'table', 'all', 'proto', proto],
        ...tables.map((table) => ['route', 'show', 'table', String(table)]),
        ...(family === 4 ? links : []),
      ]),
    ),
  );
  const rules = listings.map((l) => l[0] ?? []);
  const tagged = listings.map((l) => l[1] ?? []);
  const inOurTables = families.flatMap((family, i) =>
    tables.map((table, t) => ({ family, table, routes: listings[i]?.[2 + t] ?? [] })),
  );
  families.forEach((family, i) => {
    for (const rule of rules[i] ?? []) {
      if (rule.protocol === proto) {
        ownedRules.push({
          family,
          from: prefixOf(family, rule.src ?? 'all', rule.srclen),
          table: Number(rule.table),
          priority: rule.priority,
        });
      } else if (priorities.has(rule.priority)) {
        collisions.push(
          `IPv${family} rule at priority ${rule.priority} (from ${rule.src ?? 'all'} lookup ${rule.table ?? '?'}) is not ours: choose another priority (--rule-priority)`,
        );
      }
    }
    // A listing of every table names each route's table, except main's.
    for (const route of tagged[i] ?? []) {
      ownedRoutes.push(toSteeringRoute(family, Number(route.table ?? MAIN_TABLE), route));
    }
  });
  for (const { family, table, routes: listed } of inOurTables) {
    for (const route of listed) {
      if (route.protocol === proto) continue; // ours, read above
      collisions.push(
        `IPv${family} route ${ROUTE_TYPES[route.type ?? 'unicast'] ?? `of type ${route.type ?? '?'}`} ${route.dst} in table ${table} is not ours: choose another table id (--route-table)`,
      );
    }
  }
  return {
    ownedRules,
    ownedRoutes,
    collisions,
    ...(options.withLinks === true ? { links: listings[0]?.[2 + tables.length] ?? [] } : {}),
  };
}

/** What to add and delete so live equals desired; foreign state is never in it. */
export function diffSteering(desired: SteeringSpec, live: LiveSteering): SteeringDiff {
  const ruleKey = (r: SteeringRule): string => `${r.family} ${r.from} ${r.table} ${r.priority}`;
  const routeKey = (r: SteeringRoute): string =>
    `${r.family} ${r.table} ${r.type} ${r.destination} ${r.device ?? ''} ${r.metric}`;
  const liveRules = new Set(live.ownedRules.map(ruleKey));
  const wantRules = new Set(desired.rules.map(ruleKey));
  const liveRoutes = new Set(live.ownedRoutes.map(routeKey));
  const wantRoutes = new Set(desired.routes.map(routeKey));
  return {
    addRules: desired.rules.filter((r) => !liveRules.has(ruleKey(r))),
    deleteRules: live.ownedRules.filter((r) => !wantRules.has(ruleKey(r))),
    addRoutes: desired.routes.filter((r) => !liveRoutes.has(routeKey(r))),
    deleteRoutes: live.ownedRoutes.filter((r) => !wantRoutes.has(routeKey(r))),
  };
}

/** One line per change, for `plan`. */
export function describeDiff(diff: SteeringDiff): string[] {
  return [
    ...diff.deleteRules.map((r) => `- ${describeRule(r)}`),
    ...diff.addRules.map((r) => `+ ${describeRule(r)}`),
    ...diff.deleteRoutes.map((r) => `- ${describeRoute(r)}`),
    ...diff.addRoutes.map((r) => `+ ${describeRoute(r)}`),
  ];
}

export function describeRule(rule: SteeringRule): string {
  return `ip rule ${ruleArgs(rule).join(' ')}`;
}

export function describeRoute(route: SteeringRoute): string {
  return `ip route ${routeArgs(route).join(' ')}`;
}

export interface SteeringOutcome {
  /** Routes that could not be added because their device is absent (a tunnel that is down). */
  readonly deferred: readonly SteeringRoute[];
}

/** One change of a diff, as `ip` takes it without the family flag. */
interface SteeringChange {
  readonly family: Family;
  readonly kind: 'add route' | 'add rule' | 'delete rule' | 'delete route';
  readonly args: readonly string[];
  readonly route?: SteeringRoute;
}

/**
 * Applies a diff. Routes go first (a new rule must find its table filled), stale rules last.
 * A route via an absent tunnel is deferred, not an error: the blackhole holds until the watcher
 * adds it when the tunnel appears. Each family's changes go to one `ip -batch -` (the families at
 * once): a reapply that moves a class changes four rules, and a process each was a tenth of it.
 */
export async function applySteeringDiff(
  runner: Runner,
  diff: SteeringDiff,
  protocol: number,
): Promise<SteeringOutcome> {
  const proto = ['proto', String(protocol)];
  const changes: SteeringChange[] = [
    ...diff.addRoutes.map((route) => ({
      family: route.family,
      kind: 'add route' as const,
      args: ['route', 'replace', ...routeArgs(route), ...proto],
      route,
    })),
    ...diff.addRules.map((rule) => ({
      family: rule.family,
      kind: 'add rule' as const,
      args: ['rule', 'add', ...ruleArgs(rule), ...proto],
    })),
    ...diff.deleteRules.map((rule) => ({
      family: rule.family,
      kind: 'delete rule' as const,
      args: ['rule', 'del', ...ruleArgs(rule), ...proto],
    })),
    ...diff.deleteRoutes.map((route) => ({
      family: route.family,
      kind: 'delete route' as const,
      args: ['route', 'del', ...routeArgs(route), ...proto],
    })),
  ];
  const failed = (
    await Promise.all(
      ([4, 6] as const).map((family) =>
        runChanges(
          runner,
          family,
          changes.filter((c) => c.family === family),
        ),
      ),
    )
  ).flat();
  const deferred: SteeringRoute[] = [];
  const failures: string[] = [];
  for (const { change, stderr } of failed) {
    if (change.kind === 'delete rule' || change.kind === 'delete route') continue; // gone already
    if (change.kind === 'add rule') {
      throw new EgressguardError(
        'command-failed',
        `Cannot add "ip ${FAMILY_FLAG[change.family]} ${change.args.join(' ')}": ${stderr}`,
      );
    }
    if (
      change.route?.device !== undefined &&
      // IPv4 says "Device for nexthop is not up" for a route without a gateway (`default dev
      // tun0`), IPv6 "Nexthop device is not up" (fib_check_nh_nongw, ip6_validate_gw).
      /Cannot find device|Device for nexthop is not up|Nexthop device is not up|Network is down/.test(
        stderr,
      )
    ) {
      deferred.push(change.route);
      continue;
    }
    // The rest still goes in: a route one family cannot take must not leave the other family
    // without its rules (a class's IPv4 killed with its tunnel up for a refused IPv6 route).
    failures.push(
      `Cannot add route "${change.route === undefined ? change.args.join(' ') : routeArgs(change.route).join(' ')}": ${stderr}`,
    );
  }
  if (failures.length > 0) {
    throw new EgressguardError('command-failed', failures.join('; '), {
      hint: /IPv6 is disabled/.test(failures.join(' '))
        ? 'the facts say the tunnel carries IPv6, the kernel says not: apply with the live facts (without --facts)'
        : 'the rest of the routing is in place; fix the cause and apply again',
    });
  }
  return { deferred };
}

/**
 * Runs one family's changes in order through `ip -batch -`, which stops at the first command that
 * fails and names its line ("Command failed -:N"): that one is returned with ip's complaint, and
 * the batch goes on after it. Should ip not name the line, each change left runs on its own.
 */
async function runChanges(
  runner: Runner,
  family: Family,
  changes: readonly SteeringChange[],
): Promise<{ change: SteeringChange; stderr: string }[]> {
  const failed: { change: SteeringChange; stderr: string }[] = [];
  let rest = changes;
  while (rest.length > 0) {
    const result = await runner.run(['ip', FAMILY_FLAG[family], '-batch', '-'], {
      effect: 'change',
      input: `${rest.map((c) => c.args.join(' ')).join('\n')}\n`,
      allowFailure: true,
    });
    if (result.exitCode === 0) break;
    const line = Number(/Command failed -:(\d+)/.exec(result.stderr)?.[1] ?? NaN);
    const change = rest[line - 1];
    if (change === undefined) {
      for (const single of rest) {
        const one = await runner.run(['ip', FAMILY_FLAG[family], ...single.args], {
          effect: 'change',
          allowFailure: true,
        });
        if (one.exitCode !== 0) failed.push({ change: single, stderr: one.stderr.trim() });
      }
      break;
    }
    const stderr = result.stderr
      .split('\n')
      .filter((l) => l.trim() !== '' && !l.startsWith('Command failed'))
      .join('; ');
    failed.push({ change, stderr });
    rest = rest.slice(line);
  }
  return failed;
}

/** Removes every rule and route we own; foreign state stays. */
export async function removeSteering(
  runner: Runner,
  live: LiveSteering,
  protocol: number,
): Promise<void> {
  await applySteeringDiff(
    runner,
    { addRules: [], addRoutes: [], deleteRules: live.ownedRules, deleteRoutes: live.ownedRoutes },
    protocol,
  );
}

function ruleArgs(rule: SteeringRule): string[] {
  return ['from', rule.from, 'lookup', String(rule.table), 'priority', String(rule.priority)];
}

function routeArgs(route: SteeringRoute): string[] {
  const args = route.type === 'unicast' ? [route.destination] : [route.type, route.destination];
  if (route.device !== undefined) args.push('dev', route.device);
  args.push('table', String(route.table));
  args.push('metric', String(route.metric));
  return args;
}

/**
 * Listings of one family in one process (`ip -batch -`), one JSON array per line. Should the
 * batch not answer every command, each listing runs on its own instead.
 */
async function ipJsonBatch<T>(
  runner: Runner,
  family: Family,
  commands: readonly (readonly string[])[],
): Promise<T[][]> {
  const flags = ['-N', FAMILY_FLAG[family]];
  const result = await runner.run(['ip', '-j', ...flags, '-batch', '-'], {
    effect: 'read',
    input: `${commands.map((c) => c.join(' ')).join('\n')}\n`,
    allowFailure: true,
  });
  const lines = result.stdout.split('\n').filter((l) => l.trim() !== '');
  if (result.exitCode === 0 && lines.length === commands.length) {
    try {
      return lines.map((l) => JSON.parse(l) as T[]);
    } catch {
      // not one array per line after all: ask one at a time
    }
  }
  return Promise.all(commands.map((c) => ipJson<T>(runner, [...flags, ...c])));
}

async function ipJson<T>(runner: Runner, args: readonly string[]): Promise<T[]> {
  const result = await runner.run(['ip', '-j', ...args], { effect: 'read', allowFailure: true });
  // A routing table that was never filled "does not exist": it has no routes.
  if (result.exitCode !== 0 && /table does not exist/.test(result.stderr)) return [];
  if (result.exitCode !== 0) {
    throw new EgressguardError(
      'command-failed',
      `Cannot read "ip ${args.join(' ')}": ${result.stderr.trim()}`,
    );
  }
  const text = result.stdout.trim();
  return text === '' ? [] : (JSON.parse(text) as T[]);
}

function prefixOf(family: Family, address: string, length: number | undefined): string {
  if (address === 'all' || address === 'default') return family === 4 ? '0.0.0.0/0' : '::/0';
  return `${address}/${length ?? (family === 4 ? 32 : 128)}`;
}

/**
 * Our route types by name; any other type counts as unicast, which `ip route del` (no type
 * given) deletes whatever its type.
 */
function routeType(route: IpRoute): SteeringRoute['type'] {
  return ROUTE_TYPES[route.type ?? 'unicast'] ?? 'unicast';
}

function toSteeringRoute(family: Family, table: number, route: IpRoute): SteeringRoute {
  const type = routeType(route);
  const destination = route.dst.includes('/') ? route.dst : prefixOf(family, route.dst, undefined);
  return {
    family,
    table,
    type,
    destination,
    // The kernel reports IPv6 blackhole and throw routes on "lo"; only unicast has a device.
    ...(route.dev === undefined || type !== 'unicast' ? {} : { device: route.dev }),
    metric: route.metric ?? 0,
  };
}
