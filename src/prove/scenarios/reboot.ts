import { addTunnelRoutes } from '../lab-services.js';
import type { Scenario } from '../scenario.js';
import {
  noTunnel,
  recordRecovery,
  registerResidentRestore,
  registerTunnelRestore,
  tunnelRef,
} from './tunnel-helpers.js';

/**
 * A reboot: every process gone, our table, rules and routes flushed, the tunnel absent; the boot
 * unit's `egressguard restore` (the real CLI) loads the last generation without the tunnel; then
 * the tunnel returns and the resident (the service starting) re-adds its routes.
 */
export const reboot: Scenario = {
  id: 'reboot',
  title: 'reboot: state flushed, `restore` with the tunnel absent, then the tunnel returns',
  fault: true,
  skip: noTunnel,
  async run(ctx) {
    registerResidentRestore(ctx);
    registerTunnelRestore(ctx);
    await ctx.host.stopResident();
    await ctx.host.backend
      .createApplier({ runner: ctx.host.runner, options: ctx.host.options })
      .remove();
    for (const tunnel of ctx.plan.tunnels) await ctx.lab.deleteLink(tunnelRef(ctx, tunnel));
    const restore = await ctx.host.cli(['restore', '--json']);
    ctx.metric('restoreExit', restore.exitCode ?? -1);
    ctx.metric('restoreMs', restore.durationMs);
    if (restore.exitCode !== 0) {
      ctx.finding(
        'failure',
        `\`egressguard restore\` failed: ${restore.stderr.trim().slice(0, 300)}`,
      );
    } else {
      const outcome = JSON.parse(restore.stdout) as { kind: string; deferred?: string[] };
      ctx.metric('restoreOutcome', outcome.kind);
      ctx.note(
        `restore: ${outcome.kind}; waiting: ${(outcome.deferred ?? []).join('; ') || 'nothing'}`,
      );
      if (outcome.kind !== 'restored') {
        ctx.finding('failure', `\`egressguard restore\` did "${outcome.kind}", not "restored"`);
      }
    }
    await ctx.measure({ name: 'booted, tunnel absent', state: 'down' });
    for (const tunnel of ctx.plan.tunnels) {
      await ctx.lab.recreateLink(tunnelRef(ctx, tunnel));
      await addTunnelRoutes(ctx.lab, ctx.plan, tunnel.iface);
    }
    await ctx.host.startResident();
    await recordRecovery(ctx, 'recoveryMs');
    await ctx.measure({
      name: 'tunnel back',
      state: 'up',
      select: (p) =>
        p.viaTunnel || 'only tunnel classes are measured again after the tunnel returns',
    });
  },
};
