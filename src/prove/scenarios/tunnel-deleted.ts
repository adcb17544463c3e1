import type { Scenario } from '../scenario.js';
import { noTunnel, registerTunnelRestore, runTunnelFault, tunnelRef } from './tunnel-helpers.js';

/** The tunnel is deleted: its routes die with it; it returns as a new device. */
export const tunnelDeleted: Scenario = {
  id: 'tunnel-deleted',
  title: 'tunnel deleted, then created again (a new ifindex)',
  fault: true,
  skip: noTunnel,
  async run(ctx) {
    await runTunnelFault(ctx, {
      name: 'tunnel deleted',
      inflict: async () => {
        registerTunnelRestore(ctx, 'tunnels created again, up, with the lab VPN routes');
        for (const tunnel of ctx.plan.tunnels) await ctx.lab.deleteLink(tunnelRef(ctx, tunnel));
      },
    });
  },
};
