import { addTunnelRoutes } from '../lab-services.js';
import type { Scenario } from '../scenario.js';
import {
  measureRecovery,
  noTunnel,
  registerTunnelRestore,
  streamConfinedTraffic,
  tunnelRef,
} from './tunnel-helpers.js';

/**
 * The tunnel is recreated while traffic flows (deleted and created again at once, as a VPN client
 * reconnecting does): a new ifindex, no routes through it until the resident re-adds them.
 */
export const tunnelRecreated: Scenario = {
  id: 'tunnel-recreated',
  title: 'tunnel recreated under traffic (new ifindex), routes re-added by the resident',
  fault: true,
  skip: noTunnel,
  async run(ctx) {
    await streamConfinedTraffic(ctx);
    registerTunnelRestore(ctx);
    for (const tunnel of ctx.plan.tunnels) {
      const ref = tunnelRef(ctx, tunnel);
      const before = (await ctx.lab.linkState(ref)).ifindex;
      await ctx.lab.recreateLink(ref);
      await addTunnelRoutes(ctx.lab, ctx.plan, tunnel.iface);
      const after = (await ctx.lab.linkState(ref)).ifindex;
      ctx.metric(`${tunnel.iface}.ifindex`, `${before} → ${after}`);
      if (before === after) ctx.finding('failure', `"${tunnel.iface}" kept its ifindex ${after}`);
    }
    await measureRecovery(ctx);
  },
};
