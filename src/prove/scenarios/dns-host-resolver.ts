import { startService } from '../lab-services.js';
import type { LabProbe } from '../lab-probes.js';
import type { ProofEnvironment, Scenario } from '../scenario.js';
import { noTunnel, takeTunnelsDown } from './tunnel-helpers.js';

/**
 * DNS through a resolver on the host itself, with the tunnel down. A tunnel class asks the
 * host (allowed: the host is `self`); the resolver forwards upstream like any resolver does:
 * from the tunnel's address, by the host's own routing. With the tunnel down its route to the
 * VPN's DNS server is gone and the query leaves by the uplink: host-originated traffic that no
 * class selects, so neither the kill switch nor steering can see it (DESIGN.md §4). Measured and
 * reported as a finding, with what would close it.
 */
export const dnsHostResolver: Scenario = {
  id: 'dns-host-resolver',
  title: 'DNS through a resolver on the host, the tunnel down',
  fault: true,
  skip: (env) =>
    noTunnel(env) ??
    (queriesOf(env).length === 0
      ? 'no tunnel class arrives on an interface with a host IPv4 address'
      : undefined),
  async run(ctx) {
    const queries = queriesOf(ctx);
    const listen = [...new Set(queries.map((q) => q.to))];
    const source = tunnelAddress(ctx);
    const stop = await startService(ctx.lab, ctx.plan.host, [
      'resolve',
      '--listen',
      listen.join(','),
      '--upstream',
      ctx.plan.resolver,
      ...(source === undefined ? [] : ['--source', source]),
    ]);
    ctx.restores.push({ what: 'host resolver stopped', undo: stop });
    await takeTunnelsDown(ctx);
    const phase = await ctx.measure({ name: 'tunnel down', state: 'down' }, queries);
    ctx.metric('queries', phase.runs.length);
    ctx.metric('upstream', `${ctx.plan.resolver}${source === undefined ? '' : ` from ${source}`}`);
    ctx.note(
      'The host resolver forwards by the host’s routing, from the tunnel address, to the lab VPN DNS server (routed through the tunnel while it is up)',
    );
  },
};

/** One DNS query per tunnel-class workload to the host's address on its interface. */
function queriesOf(env: ProofEnvironment): LabProbe[] {
  const queries: LabProbe[] = [];
  const seen = new Set<string>();
  for (const probe of env.probes) {
    if (!probe.viaTunnel || probe.family !== 4 || probe.ingress === undefined) continue;
    const gateway = env.plan.facts.topology.links
      .find((l) => l.a.node === env.plan.host && l.a.iface === probe.ingress)
      ?.a.addresses?.find((a) => !a.includes(':'))
      ?.split('/')[0];
    if (gateway === undefined || seen.has(`${probe.from} ${gateway}`)) continue;
    seen.add(`${probe.from} ${gateway}`);
    const query = env.deriveProbe({
      from: probe.from,
      to: gateway,
      protocol: 'udp',
      port: 53,
      ingress: probe.ingress,
      state: 'down',
    });
    if (query !== undefined) queries.push(query);
  }
  return queries;
}

function tunnelAddress(env: ProofEnvironment): string | undefined {
  const tunnel = env.plan.tunnels[0];
  if (tunnel === undefined) return undefined;
  return env.plan.facts.topology.links
    .find((l) => l.a.node === env.plan.host && l.a.iface === tunnel.iface)
    ?.a.addresses?.find((a) => !a.includes(':'))
    ?.split('/')[0];
}
