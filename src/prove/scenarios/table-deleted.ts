import type { Scenario } from '../scenario.js';
import { recordRecovery, streamConfinedTraffic } from './tunnel-helpers.js';

/**
 * Our firewall state deleted under the resident mode, the tunnel up: `run` repairs it from the
 * applied generation (DESIGN.md §4, a watcher repairs a deleted table in seconds) while class
 * traffic stays in the tunnel (policy routing still steers it) and nothing leaves by the uplink.
 */
export const tableDeleted: Scenario = {
  id: 'table-deleted',
  title: 'our firewall state deleted under the resident mode, which repairs it',
  fault: true,
  async run(ctx) {
    const prove = ctx.host.backend.prove;
    if (prove === undefined) return;
    await streamConfinedTraffic(ctx);
    await prove.removeLayer(
      { runner: ctx.host.runner, options: ctx.host.options },
      ctx.host.backend.layer,
      ctx.policyA.artifacts,
    );
    await recordRecovery(ctx, 'recoveryMs');
    await ctx.measure({ name: 'repaired', state: 'up' });
  },
};
