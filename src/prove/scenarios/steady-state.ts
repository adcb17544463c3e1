import type { Scenario } from '../scenario.js';

/** Every probe with the tunnel up, nothing broken: the L2 measurements. */
export const steadyState: Scenario = {
  id: 'steady-state',
  title: 'steady state: every probe with the tunnels up',
  fault: false,
  async run(ctx) {
    await ctx.measure({ name: 'steady', state: 'up' });
  },
};
