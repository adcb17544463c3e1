import type { Family } from '../../core/index.js';
import type { PolicyIR } from '../../ir/index.js';

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
export function buildSteering(ir: PolicyIR): SteeringSpec {
  const d = STEERING_DEFAULTS;
  const tunnelClasses = ir.classes.filter((c) => c.via.kind === 'tunnel');
  const tunnelNames = [...new Set(tunnelClasses.map((c) => c.via.interface))].sort();
  const tunnels = tunnelNames.map((name, i) => ({
    name,
    table: d.table + i,
    priority: d.priority + i,
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

export function compileSteering(ir: PolicyIR): string {
  return `${JSON.stringify(buildSteering(ir), null, 2)}\n`;
}
