import type { Scenario, ScenarioContext } from '../scenario.js';
import { noTunnel, registerResidentRestore, steeringOf } from './tunnel-helpers.js';

/**
 * The nftables layer alone: our routing rules and routes removed (the resident stopped, or it
 * would put them back), the tunnel up. Routing now sends every class packet by the main table,
 * out the uplink; only the kill switch stands between the class and the internet. With the
 * blackhole present, a dead tunnel's packets never reach the firewall, so this is the only way
 * to see that the kill switch works (DESIGN.md §4).
 */
export const layerNftablesAlone: Scenario = {
  id: 'layer-nftables',
  title: 'nftables alone: our routing rules and routes removed, the kill switch must hold',
  fault: true,
  layer: 'nftables',
  skip: noTunnel,
  async run(ctx) {
    registerResidentRestore(ctx);
    await ctx.host.stopResident();
    await removeSteering(ctx);
    await ctx.measure({
      name: 'steering removed',
      state: 'down',
      expectLayer: 'nftables',
      select: (p) =>
        p.expect.verdict === 'deny' ||
        !ctx.plan.tunnels.some((t) => t.iface === p.expect.via) ||
        'leaves by the tunnel, which the removed steering would route it into',
    });
  },
};

/** Deletes our routing rules and flushes our routing tables, both families. */
export async function removeSteering(ctx: ScenarioContext): Promise<void> {
  const spec = steeringOf(ctx);
  const runner = ctx.host.runner;
  for (const tunnel of spec.tunnels) {
    for (const family of ['-4', '-6']) {
      for (let i = 0; i < 64; i++) {
        const result = await runner.run(
          ['ip', family, 'rule', 'del', 'priority', String(tunnel.priority)],
          { effect: 'change', allowFailure: true },
        );
        if (result.exitCode !== 0) break;
      }
      await runner.run(['ip', family, 'route', 'flush', 'table', String(tunnel.table)], {
        effect: 'change',
        allowFailure: true,
      });
    }
  }
}
