import type { Backend } from '../../backends/index.js';
import type { Scenario, ScenarioContext } from '../scenario.js';
import { noTunnel, registerResidentRestore, takeTunnelsDown } from './tunnel-helpers.js';

/**
 * The backend's filter layer alone: every other layer (policy routing) taken out (the resident
 * stopped, or it would put it back), the tunnel link up. Routing now sends every class packet by
 * the main table, out of the uplink; only the kill switch stands between the class and the
 * internet. With the blackhole present a dead tunnel's packets never reach the firewall, so this
 * is the only way to see that the kill switch works (DESIGN.md §4).
 */
export function filterAlone(backend: Backend): Scenario {
  const filter = backend.layer;
  const others = (backend.prove?.layers ?? []).filter((l) => l !== filter);
  return {
    id: `layer-${filter}`,
    title: `${filter} alone: ${others.length === 0 ? 'no other layer' : others.join(', ')} removed, the kill switch must hold`,
    fault: true,
    layer: filter,
    skip: (env) => noTunnel(env) ?? (others.length === 0 ? 'the backend has one layer' : undefined),
    async run(ctx) {
      registerResidentRestore(ctx);
      await ctx.host.stopResident();
      for (const layer of others) await removeLayer(ctx, layer);
      await ctx.measure({
        name: `${others.join(', ')} removed`,
        state: 'down',
        expectLayer: filter,
        select: (p) =>
          p.expect.verdict === 'deny' ||
          !ctx.plan.tunnels.some((t) => t.iface === p.expect.via) ||
          'leaves by the tunnel, which the removed routing would steer it into',
      });
    },
  };
}

/**
 * Policy routing alone: the backend's filter taken out (the resident stopped, or it would repair
 * it), the tunnel down. Only the owned routing table's blackhole stands between the class and the
 * uplink. NAT goes with the filter, so egress addresses are not judged here.
 */
export function routingAlone(backend: Backend): Scenario {
  const filter = backend.layer;
  return {
    id: 'layer-routing',
    title: `routing alone: our ${filter} state removed, the tunnel down, the blackhole must hold`,
    fault: true,
    layer: 'routing',
    skip: (env) =>
      noTunnel(env) ??
      (backend.prove?.layers.includes('routing') === true
        ? undefined
        : 'the backend does not steer with policy routing'),
    async run(ctx) {
      registerResidentRestore(ctx);
      await ctx.host.stopResident();
      await removeLayer(ctx, filter);
      await takeTunnelsDown(ctx);
      await ctx.measure({
        name: `${filter} removed, tunnel down`,
        state: 'down',
        expectLayer: 'routing',
        checkEgress: false,
        select: (p) =>
          p.expect.verdict === 'allow' ||
          p.expect.layers.includes('routing') ||
          `enforced by ${filter} alone, which is removed here`,
      });
    },
  };
}

async function removeLayer(ctx: ScenarioContext, layer: string): Promise<void> {
  const prove = ctx.host.backend.prove;
  if (prove === undefined) return;
  await prove.removeLayer(
    { runner: ctx.host.runner, options: ctx.host.options },
    layer,
    ctx.policyA.artifacts,
  );
}
