import type { Scenario } from '../scenario.js';
import { noTunnel, registerTunnelRestore, runTunnelFault, tunnelRef } from './tunnel-helpers.js';

/**
 * The tunnel loses its carrier: it stays up, its routes stay (flagged linkdown), so neither
 * routing nor the kill switch drops; packets die in the device. Measured, and named as such.
 */
export const carrierLost: Scenario = {
  id: 'carrier-lost',
  title: 'carrier lost on the tunnel, then back',
  fault: true,
  skip: noTunnel,
  async run(ctx) {
    await runTunnelFault(ctx, {
      name: 'no carrier',
      inflict: async () => {
        registerTunnelRestore(ctx);
        for (const tunnel of ctx.plan.tunnels) {
          await ctx.lab.setCarrierOff(tunnelRef(ctx, tunnel));
        }
      },
    });
  },
};
