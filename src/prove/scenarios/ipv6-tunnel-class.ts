import type { LabProbe } from '../lab-probes.js';
import type { Scenario } from '../scenario.js';
import { noTunnel, recordRecovery, takeTunnelsDown } from './tunnel-helpers.js';

const isV6TunnelProbe = (p: LabProbe): true | string =>
  (p.family === 6 && p.viaTunnel) || 'only IPv6 of tunnel classes';

/** IPv6 of a tunnel class: through the tunnel while it is up, nowhere while it is down. */
export const ipv6TunnelClass: Scenario = {
  id: 'ipv6-tunnel-class',
  title: 'IPv6 from a tunnel class, tunnel up then down',
  fault: true,
  skip: (env) =>
    noTunnel(env) ??
    (env.probes.some((p) => p.family === 6 && p.viaTunnel)
      ? undefined
      : 'no probe of the policy sends IPv6 from a tunnel class'),
  async run(ctx) {
    await ctx.measure({ name: 'IPv6, tunnel up', state: 'up', select: isV6TunnelProbe });
    await takeTunnelsDown(ctx);
    await ctx.measure({ name: 'IPv6, tunnel down', state: 'down', select: isV6TunnelProbe });
    await ctx.restores.unwind();
    await recordRecovery(ctx, 'recoveryMs');
  },
};
