import { EgressguardError, type Family } from '../../core/index.js';
import type { HostIR } from '../../ir/index.js';

export const STEERING_ARTIFACT = 'steering.json';

/** Defaults chosen away from wg-quick (table 51820) and Tailscale (table 52, 5210–5270). */
export const STEERING_DEFAULTS = {
  /** First owned routing table; one per steering group (tunnel, with or without kill switch). */
  table: 7350,
  /** First `ip rule` priority; one per steering group, before main (32766). */
  priority: 7350,
  /** rt_protos value that tags every rule and route we own. */
  protocol: 104,
  // Explicit metrics everywhere: IPv6 gives a route without one metric 1024, and read-back must
  // compare like with like.
  throwMetric: 50,
  tunnelMetric: 100,
  /** Worse than the tunnel default: only it remains when the tunnel's routes vanish. */
  blackholeMetric: 4_000_000_000,
} as const;

export interface SteeringRule {
  readonly family: Family;
  readonly from: string;
  readonly table: number;
  readonly priority: number;
}

export interface SteeringRoute {
  readonly family: Family;
  readonly table: number;
  readonly type: 'unicast' | 'throw' | 'blackhole';
  readonly destination: string;
  readonly device?: string;
  readonly metric: number;
}

/**
 * One owned routing table and rule priority: the classes of one tunnel that share whether they
 * have a kill switch.
 */
export interface SteeringGroup {
  readonly name: string;
  /**
   * Whether the table holds a blackhole behind the tunnel default. Absent in artifacts compiled
   * before classes without a kill switch had tables of their own (all were blackholed then).
   */
  readonly killSwitch?: boolean;
  readonly table: number;
  readonly priority: number;
}

/** Policy routing for tunnel classes, as data the applier diffs against live state. */
export interface SteeringSpec {
  readonly protocol: number;
  /** The steering groups, tunnel by tunnel (a tunnel's name appears once per group). */
  readonly tunnels: readonly SteeringGroup[];
  readonly rules: readonly SteeringRule[];
  readonly routes: readonly SteeringRoute[];
}

/**
 * Each tunnel class gets an `ip rule` from its sources to an owned table whose default goes via
 * the tunnel, with `throw` routes for excepted and local prefixes. Never `suppress_prefixlength
 * 0`: DHCP-pushed specific routes (option 121, "TunnelVision") would then pull class traffic out
 * of the tunnel. Classes with a kill switch share a table with a blackhole default at a worse
 * metric; classes without one get a table of their own and no blackhole, so that when the
 * tunnel's routes vanish with its link the lookup falls through to the main table (what explain
 * and the `tunnel-without-kill-switch` warning promise).
 */
export function buildSteering(
  ir: HostIR,
  options: { readonly table?: number; readonly priority?: number } = {},
): SteeringSpec {
  const d = STEERING_DEFAULTS;
  const tunnelClasses = ir.classes.filter((c) => c.via.kind === 'tunnel');
  const groups = [...new Set(tunnelClasses.map((c) => c.via.interface))]
    .sort()
    .flatMap((name) =>
      [true, false]
        .filter((killSwitch) =>
          tunnelClasses.some(
            (c) => c.via.interface === name && (c.killSwitch !== null) === killSwitch,
          ),
        )
        .map((killSwitch) => ({ name, killSwitch })),
    );
  const firstTable = options.table ?? d.table;
  const firstPriority = options.priority ?? d.priority;
  // Checked even when nothing is steered: a bad value fails on every host, not on the first
  // one that has a tunnel class.
  const count = Math.max(groups.length, 1);
  checkTables(firstTable, count);
  checkPriorities(firstPriority, count);
  const tunnels = groups.map((group, i): SteeringGroup => ({
    ...group,
    table: firstTable + i,
    priority: firstPriority + i,
  }));
  const rules: SteeringRule[] = [];
  const routes: SteeringRoute[] = [];
  for (const group of tunnels) {
    const classes = tunnelClasses.filter(
      (c) => c.via.interface === group.name && (c.killSwitch !== null) === group.killSwitch,
    );
    const { table, priority } = group;
    for (const f of [4, 6] as const) {
      const sources = classes.flatMap((c) => c.selector.sources.toCidrs(f));
      if (sources.length === 0) continue;
      for (const from of sources) rules.push({ family: f, from, table, priority });
      const any = f === 4 ? '0.0.0.0/0' : '::/0';
      // A family the tunnel cannot carry (IPv6 disabled on it) gets no tunnel default: the kernel
      // refuses it ("IPv6 is disabled on nexthop device"), and the blackhole (kill switch) or the
      // main table (no kill switch) takes that family, as explain says; the other family works.
      if (ir.tunnels.find((t) => t.name === group.name)?.families.includes(f) ?? true) {
        routes.push({
          family: f,
          table,
          type: 'unicast',
          destination: any,
          device: group.name,
          metric: d.tunnelMetric,
        });
      }
      if (group.killSwitch) {
        routes.push({
          family: f,
          table,
          type: 'blackhole',
          destination: any,
          metric: d.blackholeMetric,
        });
      }
      const bypass = classes.reduce(
        (set, c) => (c.killSwitch === null ? set : set.union(c.killSwitch.except)),
        ir.localPrefixes,
      );
      for (const destination of bypass.toCidrs(f)) {
        routes.push({ family: f, table, type: 'throw', destination, metric: d.throwMetric });
      }
    }
  }
  return { protocol: d.protocol, tunnels, rules, routes };
}

export function compileSteering(
  ir: HostIR,
  options: { readonly table: number; readonly priority: number },
): string {
  return `${JSON.stringify(buildSteering(ir, options), null, 2)}\n`;
}

// rtnetlink reserves these ids (include/uapi/linux/rtnetlink.h, RT_TABLE_*); 0 is "unspec".
const RESERVED_TABLES: Readonly<Record<number, string>> = {
  253: 'the default table',
  254: 'the main table',
  255: 'the local table',
};
const MAX_TABLE = 2 ** 31 - 1;
// Priority 0 is the local table's rule, 32766 main's and 32767 default's (fib_rules defaults).
const MAX_PRIORITY = 32765;

function checkTables(first: number, count: number): void {
  for (let i = 0; i < count; i++) {
    const table = first + i;
    const reserved = RESERVED_TABLES[table];
    const problem = !Number.isInteger(first)
      ? 'it is not a whole number'
      : table < 1 || table > MAX_TABLE
        ? 'it is out of range'
        : reserved === undefined
          ? undefined
          : `it is ${reserved}`;
    if (problem === undefined) continue;
    throw new EgressguardError(
      'usage',
      `Cannot use routing table "${table}" for steering${spanNote(first, count, i)}: ${problem}; choose a table id from 1 to ${MAX_TABLE} other than 253, 254 and 255 (default, main, local)`,
    );
  }
}

function checkPriorities(first: number, count: number): void {
  for (let i = 0; i < count; i++) {
    const priority = first + i;
    if (Number.isInteger(first) && priority >= 1 && priority <= MAX_PRIORITY) continue;
    throw new EgressguardError(
      'usage',
      `Cannot use rule priority "${priority}" for steering${spanNote(first, count, i)}: choose a priority from 1 to ${MAX_PRIORITY} (0 is the local table's rule, 32766 and 32767 are main and default)`,
    );
  }
}

/** Where a value past the first came from: ids count up, one per steering group. */
function spanNote(first: number, count: number, index: number): string {
  return index === 0 ? '' : ` (${count} are needed, counting up from ${first})`;
}
