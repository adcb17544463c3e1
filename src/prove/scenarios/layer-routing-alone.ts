import type { Scenario } from '../scenario.js';
import { noTunnel, registerResidentRestore, takeTunnelsDown } from './tunnel-helpers.js';

/**
 * The routing layer alone: our nft table deleted (the resident stopped, or it would repair it),
 * the tunnel down. Only the owned routing table's blackhole stands between the class and the
 * uplink. NAT goes with the table, so egress addresses are not judged here.
 */
export const layerRoutingAlone: Scenario = {
  id: 'layer-routing',
  title: 'routing alone: our nft table deleted, the tunnel down, the blackhole must hold',
  fault: true,
  layer: 'routing',
  skip: noTunnel,
  async run(ctx) {
    registerResidentRestore(ctx);
    await ctx.host.stopResident();
    await ctx.host.runner.run(['nft', 'delete', 'table', 'inet', ctx.host.table], {
      effect: 'change',
    });
    await takeTunnelsDown(ctx);
    await ctx.measure({
      name: 'table deleted, tunnel down',
      state: 'down',
      expectLayer: 'routing',
      checkEgress: false,
      select: (p) =>
        p.expect.verdict === 'allow' ||
        p.expect.layers.includes('routing') ||
        'enforced by nftables alone, whose table is deleted here',
    });
  },
};
