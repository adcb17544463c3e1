import type { Scenario } from '../scenario.js';
import {
  killSwitchFlows,
  noTunnel,
  recordRecovery,
  registerTunnelRestore,
  tunnelRef,
} from './tunnel-helpers.js';

/** The tunnel is deleted: its routes die with it; it returns as a new device. */
export const tunnelDeleted: Scenario = {
  id: 'tunnel-deleted',
  title: 'tunnel deleted, then created again (a new ifindex)',
  fault: true,
  skip: noTunnel,
  async run(ctx) {
    for (const [node, flows] of killSwitchFlows(ctx, { expect: 'confined' })) {
      ctx.stream(node, flows, 50);
    }
    registerTunnelRestore(ctx, 'tunnels created again, up, with the lab VPN routes');
    for (const tunnel of ctx.plan.tunnels) await ctx.lab.deleteLink(tunnelRef(ctx, tunnel));
    await ctx.measure({ name: 'tunnel deleted', state: 'down' });
    await ctx.restores.unwind();
    await recordRecovery(ctx, 'recoveryMs');
    await ctx.measure({
      name: 'recovered',
      state: 'up',
      select: (p) => p.viaTunnel || 'only tunnel classes are measured again after recovery',
    });
  },
};
