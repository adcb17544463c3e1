import { EgressguardError, type Family } from '../../core/index.js';
import type { PolicyIR } from '../../ir/index.js';
import type { CompileOptions } from '../backend.js';

export const STEERING_ARTIFACT = 'steering.json';

/** Defaults chosen away from wg-quick (table 51820) and Tailscale (table 52, 5210–5270). */
export const STEERING_DEFAULTS = {
  /** First owned routing table; one per tunnel. */
  table: 7350,
  /** First `ip rule` priority; one per tunnel, before main (32766). */
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

/** Policy routing for tunnel classes, as data the applier diffs against live state. */
export interface SteeringSpec {
  readonly protocol: number;
  readonly tunnels: readonly {
    readonly name: string;
    readonly table: number;
    readonly priority: number;
  }[];
  readonly rules: readonly SteeringRule[];
  readonly routes: readonly SteeringRoute[];
}

/**
 * Each tunnel class gets an `ip rule` from its sources to an owned table whose default goes via
 * the tunnel, with `throw` routes for excepted and local prefixes and a blackhole default at a
 * worse metric. Never `suppress_prefixlength 0`: DHCP-pushed specific routes (option 121,
 * "TunnelVision") would then pull class traffic out of the tunnel.
 */
export function buildSteering(
  ir: PolicyIR,
  options: CompileOptions['steering'] = {},
): SteeringSpec {
  const d = STEERING_DEFAULTS;
  const tunnelClasses = ir.classes.filter((c) => c.via.kind === 'tunnel');
  const tunnelNames = [...new Set(tunnelClasses.map((c) => c.via.interface))].sort();
  const firstTable = options.table ?? d.table;
  const firstPriority = options.priority ?? d.priority;
  // Checked even when nothing is steered: a bad value fails on every host, not on the first
  // one that has a tunnel class.
  const count = Math.max(tunnelNames.length, 1);
  checkTables(firstTable, count);
  checkPriorities(firstPriority, count);
  const tunnels = tunnelNames.map((name, i) => ({
    name,
    table: firstTable + i,
    priority: firstPriority + i,
  }));
  const rules: SteeringRule[] = [];
  const routes: SteeringRoute[] = [];
  for (const tunnel of tunnels) {
    const classes = tunnelClasses.filter((c) => c.via.interface === tunnel.name);
    for (const f of [4, 6] as const) {
      const sources = classes.flatMap((c) => c.selector.sources.toCidrs(f));
      if (sources.length === 0) continue;
      for (const from of sources)
        rules.push({ family: f, from, table: tunnel.table, priority: tunnel.priority });
      const any = f === 4 ? '0.0.0.0/0' : '::/0';
      routes.push({
        family: f,
        table: tunnel.table,
        type: 'unicast',
        destination: any,
        device: tunnel.name,
        metric: d.tunnelMetric,
      });
      routes.push({
        family: f,
        table: tunnel.table,
        type: 'blackhole',
        destination: any,
        metric: d.blackholeMetric,
      });
      const bypass = classes.reduce(
        (set, c) => (c.killSwitch === null ? set : set.union(c.killSwitch.except)),
        ir.localPrefixes,
      );
      for (const destination of bypass.toCidrs(f)) {
        routes.push({
          family: f,
          table: tunnel.table,
          type: 'throw',
          destination,
          metric: d.throwMetric,
        });
      }
    }
  }
  return { protocol: d.protocol, tunnels, rules, routes };
}

export function compileSteering(ir: PolicyIR, options: CompileOptions['steering']): string {
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

/** Where a value past the first came from: ids count up, one per steered tunnel. */
function spanNote(first: number, count: number, index: number): string {
  return index === 0 ? '' : ` (${count} are needed, counting up from ${first})`;
}
