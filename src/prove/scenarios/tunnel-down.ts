import type { Scenario } from '../scenario.js';
import { noTunnel, runTunnelFault, takeTunnelsDown } from './tunnel-helpers.js';

/** The tunnel goes down: its routes vanish, the blackhole (and the kill switch) hold. */
export const tunnelDown: Scenario = {
  id: 'tunnel-down',
  title: 'tunnel down, then up again (the resident re-adds the routes)',
  fault: true,
  skip: noTunnel,
  async run(ctx) {
    await runTunnelFault(ctx, { name: 'tunnel down', inflict: () => takeTunnelsDown(ctx) });
  },
};
