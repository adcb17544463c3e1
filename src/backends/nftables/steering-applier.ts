import { EgressguardError, type Family } from '../../core/index.js';
import type { Runner } from '../../runner/index.js';
import type { SteeringRoute, SteeringRule, SteeringSpec } from './steering.js';

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
  /** Rules tagged with our protocol. */
  readonly ownedRules: readonly SteeringRule[];
  /** Routes tagged with our protocol in our tables. */
  readonly ownedRoutes: readonly SteeringRoute[];
  /** Foreign rules at our priorities, foreign routes in our tables. */
  readonly collisions: readonly string[];
}

export interface SteeringDiff {
  readonly addRules: readonly SteeringRule[];
  readonly deleteRules: readonly SteeringRule[];
  readonly addRoutes: readonly SteeringRoute[];
  readonly deleteRoutes: readonly SteeringRoute[];
}

const FAMILY_FLAG = { 4: '-4', 6: '-6' } as const;

export async function readLiveSteering(
  runner: Runner,
  spec: Pick<SteeringSpec, 'protocol' | 'tunnels'>,
): Promise<LiveSteering> {
  const ownedRules: SteeringRule[] = [];
  const ownedRoutes: SteeringRoute[] = [];
  const collisions: string[] = [];
  const proto = String(spec.protocol);
  const priorities = new Set(spec.tunnels.map((t) => t.priority));
  const tables = new Set(spec.tunnels.map((t) => t.table));
  // Every listing at once: each is a process, and they are independent.
  const families = [4, 6] as const;
  const [rules, routes] = await Promise.all([
    Promise.all(families.map((f) => ipJson<IpRule>(runner, [FAMILY_FLAG[f], 'rule', 'show']))),
    Promise.all(
      families.flatMap((f) =>
        [...tables].map(async (table) => ({
          family: f,
          table,
          routes: await ipJson<IpRoute>(runner, [
            FAMILY_FLAG[f],
            'route',
            'show',
            'table',
            String(table),
          ]),
        })),
      ),
    ),
  ]);
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
          `IPv${family} rule at priority ${rule.priority} (from ${rule.src ?? 'all'} lookup ${rule.table ?? '?'}) is not ours: choose another priority`,
        );
      }
    }
  });
  for (const { family, table, routes: listed } of routes) {
    for (const route of listed) {
      if (route.protocol === proto) {
        ownedRoutes.push(toSteeringRoute(family, table, route));
      } else {
        collisions.push(
          `IPv${family} route ${route.type ?? 'unicast'} ${route.dst} in table ${table} is not ours: choose another table id`,
        );
      }
    }
  }
  return { ownedRules, ownedRoutes, collisions };
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
    ...diff.deleteRules.map((r) => `- ip rule ${ruleArgs(r).join(' ')}`),
    ...diff.addRules.map((r) => `+ ip rule ${ruleArgs(r).join(' ')}`),
    ...diff.deleteRoutes.map((r) => `- ip route ${routeArgs(r).join(' ')}`),
    ...diff.addRoutes.map((r) => `+ ip route ${routeArgs(r).join(' ')}`),
  ];
}

export interface SteeringOutcome {
  /** Routes that could not be added because their device is absent (a tunnel that is down). */
  readonly deferred: readonly SteeringRoute[];
}

/**
 * Applies a diff. Routes go first (a new rule must find its table filled), stale rules last.
 * A route via an absent tunnel is deferred, not an error: the blackhole holds until the watcher
 * adds it when the tunnel appears.
 */
export async function applySteeringDiff(
  runner: Runner,
  diff: SteeringDiff,
  protocol: number,
): Promise<SteeringOutcome> {
  const deferred: SteeringRoute[] = [];
  const proto = ['proto', String(protocol)];
  for (const route of diff.addRoutes) {
    const result = await runner.run(
      ['ip', FAMILY_FLAG[route.family], 'route', 'replace', ...routeArgs(route), ...proto],
      { effect: 'change', allowFailure: true },
    );
    if (result.exitCode === 0) continue;
    if (
      route.device !== undefined &&
      // IPv4 says "Device for nexthop is not up" for a route without a gateway (`default dev
      // tun0`), IPv6 "Nexthop device is not up" (fib_check_nh_nongw, ip6_validate_gw).
      /Cannot find device|Device for nexthop is not up|Nexthop device is not up|Network is down/.test(
        result.stderr,
      )
    ) {
      deferred.push(route);
      continue;
    }
    throw new EgressguardError(
      'command-failed',
      `Cannot add route "${routeArgs(route).join(' ')}": ${result.stderr.trim()}`,
    );
  }
  for (const rule of diff.addRules) {
    await runner.run(['ip', FAMILY_FLAG[rule.family], 'rule', 'add', ...ruleArgs(rule), ...proto], {
      effect: 'change',
    });
  }
  for (const rule of diff.deleteRules) {
    await runner.run(['ip', FAMILY_FLAG[rule.family], 'rule', 'del', ...ruleArgs(rule), ...proto], {
      effect: 'change',
      allowFailure: true,
    });
  }
  for (const route of diff.deleteRoutes) {
    await runner.run(
      ['ip', FAMILY_FLAG[route.family], 'route', 'del', ...routeArgs(route), ...proto],
      {
        effect: 'change',
        allowFailure: true,
      },
    );
  }
  return { deferred };
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

function toSteeringRoute(family: Family, table: number, route: IpRoute): SteeringRoute {
  const type = route.type === 'blackhole' || route.type === 'throw' ? route.type : 'unicast';
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
