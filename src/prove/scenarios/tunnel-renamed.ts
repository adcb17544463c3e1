import type { Scenario } from '../scenario.js';
import { noTunnel, registerTunnelRestore, runTunnelFault, tunnelRef } from './tunnel-helpers.js';

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
    await runTunnelFault(ctx, {
      name: 'tunnel renamed',
      inflict: async () => {
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
      },
    });
  },
};
