import type { Scenario } from '../scenario.js';
import { awaitConverged, killSwitchFlows, noTunnel, takeTunnelsDown } from './tunnel-helpers.js';

/** The apply layer's own kill point, after the backend's: before the generation is recorded. */
const STATE_WRITE = 'before-state-write';

/**
 * `egressguard apply` (the real CLI, a separate process) killed with SIGKILL at each named step
 * of an apply, with the tunnel down and class traffic flowing: the class must never leave by the
 * uplink, the table must never be missing, and the host must converge again afterwards.
 */
export const killPoints: Scenario = {
  id: 'kill-points',
  title: 'egressguard killed at each step of an apply, the tunnel down',
  fault: true,
  skip: noTunnel,
  async run(ctx) {
    // The tunnel goes down before the streams start: they expect every packet dropped, and a
    // packet sent while the tunnel was still up would rightly leave through it.
    await takeTunnelsDown(ctx);
    const streams = [...killSwitchFlows(ctx, { expect: 'deny' })].map(([node, flows]) =>
      ctx.stream(node, flows, 50),
    );
    await Promise.all(streams.map((s) => s.sending()));
    for (const step of [...(ctx.host.backend.prove?.killPoints ?? []), STATE_WRITE]) {
      ctx.checkAborted();
      const run = await ctx.host.cli(
        ['apply', ctx.policyB.file, '--facts', ctx.factsFile, '--json'],
        { faults: `${step}=kill` },
      );
      const live = await ctx.host.readLive();
      const which =
        live.hash === ctx.policyA.hash ? 'A' : live.hash === ctx.policyB.hash ? 'B' : 'other';
      ctx.metric(`${step}.killed`, run.signal === 'SIGKILL');
      ctx.metric(`${step}.liveTable`, live.present ? which : 'absent');
      if (run.signal !== 'SIGKILL') {
        ctx.finding(
          'failure',
          `The apply was not killed at "${step}" (exit ${run.exitCode ?? '?'}, signal ${run.signal ?? 'none'}): ${(run.stderr.trim() || run.stdout.trim()).slice(0, 300)}`,
        );
      }
      if (!live.present) {
        ctx.finding('failure', `Our table was missing after egressguard was killed at "${step}"`);
      }
      // The resident repairs to the recorded generation; the next kill waits until it has.
      const ms = await awaitConverged(ctx, { settledOnly: true });
      if (ms === undefined) {
        ctx.finding('failure', `The host did not settle after egressguard was killed at "${step}"`);
      } else {
        ctx.metric(`${step}.settledMs`, ms);
      }
    }
    await ctx.host.apply(ctx.policyA);
    const status = await ctx.host.status();
    ctx.metric('statusAfterKills', status.condition);
    if (status.condition !== 'InSync') {
      ctx.finding(
        'failure',
        `After the kills and an apply, status is ${status.condition}: ${status.reasons.join('; ')}`,
      );
    }
    await ctx.measure({ name: 'after the kills', state: 'down' });
  },
};
