import type { Scenario } from '../scenario.js';
import { killSwitchFlows, noTunnel, recordRecovery, takeTunnelsDown } from './tunnel-helpers.js';

/** The tunnel goes down: its routes vanish, the blackhole (and the kill switch) hold. */
export const tunnelDown: Scenario = {
  id: 'tunnel-down',
  title: 'tunnel down, then up again (the resident re-adds the routes)',
  fault: true,
  skip: noTunnel,
  async run(ctx) {
    for (const [node, flows] of killSwitchFlows(ctx, { expect: 'confined' })) {
      ctx.stream(node, flows, 50);
    }
    await takeTunnelsDown(ctx);
    await ctx.measure({ name: 'tunnel down', state: 'down' });
    await ctx.restores.unwind();
    await recordRecovery(ctx, 'recoveryMs');
    await ctx.measure({
      name: 'recovered',
      state: 'up',
      select: (p) => p.viaTunnel || 'only tunnel classes are measured again after recovery',
    });
  },
};
