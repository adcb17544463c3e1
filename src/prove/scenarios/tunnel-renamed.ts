import type { Scenario } from '../scenario.js';
import {
  killSwitchFlows,
  noTunnel,
  recordRecovery,
  registerTunnelRestore,
  tunnelRef,
} from './tunnel-helpers.js';

/**
 * The tunnel is renamed: its routes follow the device (they are bound to the ifindex), so
 * routing alone would still send class traffic into it; the kill switch matches by name.
 */
export const tunnelRenamed: Scenario = {
  id: 'tunnel-renamed',
  title: 'tunnel renamed, then named back',
  fault: true,
  skip: noTunnel,
  async run(ctx) {
    for (const [node, flows] of killSwitchFlows(ctx, { expect: 'confined' })) {
      ctx.stream(node, flows, 50);
    }
    registerTunnelRestore(ctx);
    const renamed = ctx.plan.tunnels.map((tunnel) => ({
      tunnel,
      name: `${tunnel.iface.slice(0, 11)}-old`,
    }));
    ctx.restores.push({
      what: 'tunnels named back',
      undo: async () => {
        for (const { tunnel, name } of renamed) {
          const state = await ctx.lab
            .linkState({ node: ctx.plan.host, iface: name })
            .catch(() => undefined);
          if (state !== undefined) {
            await ctx.lab.renameLink({ node: ctx.plan.host, iface: name }, tunnel.iface);
          }
        }
      },
    });
    for (const { tunnel, name } of renamed) {
      await ctx.lab.renameLink(tunnelRef(ctx, tunnel), name);
    }
    await ctx.measure({ name: 'tunnel renamed', state: 'down' });
    await ctx.restores.unwind();
    await recordRecovery(ctx, 'recoveryMs');
    await ctx.measure({
      name: 'recovered',
      state: 'up',
      select: (p) => p.viaTunnel || 'only tunnel classes are measured again after recovery',
    });
  },
};
