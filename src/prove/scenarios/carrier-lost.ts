import type { Scenario } from '../scenario.js';
import {
  killSwitchFlows,
  noTunnel,
  recordRecovery,
  registerTunnelRestore,
  tunnelRef,
} from './tunnel-helpers.js';

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
    for (const [node, flows] of killSwitchFlows(ctx, { expect: 'confined' })) {
      ctx.stream(node, flows, 50);
    }
    registerTunnelRestore(ctx);
    for (const tunnel of ctx.plan.tunnels) await ctx.lab.setCarrierOff(tunnelRef(ctx, tunnel));
    await ctx.measure({ name: 'no carrier', state: 'down' });
    await ctx.restores.unwind();
    await recordRecovery(ctx, 'recoveryMs');
    await ctx.measure({
      name: 'recovered',
      state: 'up',
      select: (p) => p.viaTunnel || 'only tunnel classes are measured again after recovery',
    });
  },
};
