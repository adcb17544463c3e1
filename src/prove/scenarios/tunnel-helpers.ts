import type { LinkRef } from '../lab/topology.js';
import type { LabProbe } from '../lab-probes.js';
import {
  addTunnelRoutes,
  hasTunnelRoutes,
  missingLinkAddresses,
  missingNodeRoutes,
  restoreLinkAddresses,
  restoreNodeRoutes,
} from '../lab-services.js';
import type { FarSide } from '../plan-proof-lab.js';
import type { Flow, ProofEnvironment, ScenarioContext } from '../scenario.js';

// A bound on a hang: the recovery time itself is measured (recoveryMs) and judged by the benchmark.
const CONVERGE_TIMEOUT_MS = 60_000;
const POLL_MS = 50;

/** The host's end of a tunnel. */
export function tunnelRef(env: ProofEnvironment, tunnel: FarSide): LinkRef {
  return { node: env.plan.host, iface: tunnel.iface };
}

export function noTunnel(env: ProofEnvironment): string | undefined {
  return env.plan.tunnels.length === 0 ? 'the policy declares no tunnel' : undefined;
}

/**
 * Registers the restore every tunnel fault needs, before the fault: each tunnel exists under its
 * own name, both ends up (carrier), with the lab VPN client's routes; verified by reading the
 * links and routes back.
 */
export function registerTunnelRestore(ctx: ScenarioContext, what = 'tunnels back up'): void {
  ctx.restores.push({
    what,
    undo: async () => {
      for (const tunnel of ctx.plan.tunnels) {
        const ref = tunnelRef(ctx, tunnel);
        const state = await ctx.lab.linkState(ref).catch(() => undefined);
        if (state === undefined) {
          await ctx.lab.recreateLink(ref);
        } else {
          await ctx.lab.setLinkUp(ctx.lab.peerOf(ref));
          await ctx.lab.setLinkUp(ref);
        }
        await restoreLinkAddresses(ctx.lab, ref);
        await restoreNodeRoutes(ctx.lab, tunnel.node);
        await addTunnelRoutes(ctx.lab, ctx.plan, tunnel.iface);
      }
    },
    verify: async () => {
      const problems: string[] = [];
      for (const tunnel of ctx.plan.tunnels) {
        const ref = tunnelRef(ctx, tunnel);
        const state = await ctx.lab.linkState(ref).catch(() => undefined);
        const unaddressed = state === undefined ? [] : await missingLinkAddresses(ctx.lab, ref);
        if (state === undefined) problems.push(`"${tunnel.iface}" is absent`);
        else if (!state.isUp || !state.hasCarrier) problems.push(`"${tunnel.iface}" is not up`);
        else if (unaddressed.length > 0) {
          problems.push(`"${tunnel.iface}" lacks its address ${unaddressed.join(', ')}`);
        } else if (!(await hasTunnelRoutes(ctx.lab, ctx.plan, tunnel.iface))) {
          problems.push(`the lab routes through "${tunnel.iface}" are missing`);
        } else {
          const missing = await missingNodeRoutes(ctx.lab, tunnel.node);
          if (missing.length > 0) problems.push(`"${tunnel.node}" lacks ${missing.join(', ')}`);
        }
      }
      return problems.length === 0 ? undefined : problems.join('; ');
    },
  });
}

/** Registers a restore that starts the resident mode again if it is stopped (and verifies). */
export function registerResidentRestore(ctx: ScenarioContext): void {
  ctx.restores.push({
    what: 'resident mode running and converged',
    undo: async () => {
      if (!ctx.host.isResidentRunning) await ctx.host.startResident();
    },
    verify: async () => {
      if (!ctx.host.isResidentRunning) return '`egressguard run` is not running';
      const ms = await awaitConverged(ctx);
      return ms === undefined ? 'the host did not converge (status is not InSync)' : undefined;
    },
  });
}

/**
 * Waits until `status` says InSync (table, routes and rules as applied, every tunnel route in);
 * with `settledOnly`, until live state matches the applied generation whatever the tunnel does
 * and an interrupted apply is fine (nothing left for the resident to repair). Returns how long
 * that took, or undefined after the timeout.
 */
export async function awaitConverged(
  env: ProofEnvironment,
  options: { readonly timeoutMs?: number; readonly settledOnly?: boolean } = {},
): Promise<number | undefined> {
  const started = performance.now();
  const timeoutMs = options.timeoutMs ?? CONVERGE_TIMEOUT_MS;
  for (;;) {
    const status = await env.host.status();
    const settled = options.settledOnly === true;
    const done = settled
      ? status.live.present &&
        status.liveHash === status.appliedHash &&
        status.live.missing.every((m) => m.waitingFor !== null) &&
        status.live.unexpected.length === 0
      : status.condition === 'InSync' && status.live.missing.length === 0;
    if (done) return Math.round(performance.now() - started);
    if (performance.now() - started > timeoutMs) return undefined;
    await new Promise((resolve) => setTimeout(resolve, POLL_MS));
  }
}

/** Waits for convergence and records it; a host that does not converge is a failure. */
export async function recordRecovery(ctx: ScenarioContext, metric: string): Promise<void> {
  const ms = await awaitConverged(ctx);
  if (ms === undefined) {
    ctx.finding(
      'failure',
      `The resident mode did not re-converge within ${CONVERGE_TIMEOUT_MS} ms after the fault was undone`,
    );
  } else {
    ctx.metric(metric, ms);
  }
}

/**
 * Streams class traffic that must stay in the tunnel (or be dropped) for the whole scenario;
 * resolves once every stream sends, so the fault that follows happens under traffic.
 */
export async function streamConfinedTraffic(ctx: ScenarioContext): Promise<void> {
  const streams = [...killSwitchFlows(ctx, { expect: 'confined' })].map(([node, flows]) =>
    ctx.stream(node, flows, 50),
  );
  await Promise.all(streams.map((s) => s.sending()));
}

/** Waits for the resident to re-converge, then measures the tunnel classes again. */
export async function measureRecovery(ctx: ScenarioContext): Promise<void> {
  await recordRecovery(ctx, 'recoveryMs');
  await ctx.measure({
    name: 'recovered',
    state: 'up',
    select: (p) => p.viaTunnel || 'only tunnel classes are measured again after recovery',
  });
}

/**
 * A tunnel fault under traffic: `inflict` registers its restore, then breaks the tunnel; the
 * probes are measured with it broken, the restores run, and the recovery is measured.
 */
export async function runTunnelFault(
  ctx: ScenarioContext,
  fault: { readonly name: string; inflict(): Promise<void> },
): Promise<void> {
  await streamConfinedTraffic(ctx);
  await fault.inflict();
  await ctx.measure({ name: fault.name, state: 'down' });
  await ctx.restores.unwind();
  await measureRecovery(ctx);
}

/**
 * Flows that must never leave beyond anything but their tunnel: every kill-switch class's denied
 * destinations, in TCP, UDP and ICMP. Through the tunnel while it is up, nowhere while it is down;
 * never beyond the uplink or a LAN.
 */
export function killSwitchFlows(
  env: ProofEnvironment,
  options: { readonly expect: 'confined' | 'deny' },
): Map<string, Flow[]> {
  const flows = new Map<string, Flow[]>();
  const seen = new Set<string>();
  for (const probe of env.probes) {
    if (!isKillSwitched(probe)) continue;
    const node = env.plan.nodeOf(probe);
    const target = env.plan.tunnels.find((t) =>
      env.probes.some((p) => p.className === probe.className && p.expect.via === t.iface),
    );
    for (const kind of ['tcp', 'udp', 'icmp'] as const) {
      if (kind !== 'icmp' && probe.port === undefined) continue;
      const key = `${node} ${kind} ${probe.from} ${probe.to}`;
      if (seen.has(key)) continue;
      seen.add(key);
      const list = flows.get(node) ?? [];
      list.push({
        kind,
        src: probe.from,
        dst: probe.to,
        dport: kind === 'icmp' ? undefined : probe.port,
        expect: options.expect === 'confined' ? 'allow' : 'deny',
        // A confined flow may reach its tunnel's far side; judged only for what leaks elsewhere.
        target: options.expect === 'confined' ? target : undefined,
        confined: options.expect === 'confined',
      });
      flows.set(node, list);
    }
  }
  return flows;
}

/** A probe the kill switch denies while the tunnel is down. */
export function isKillSwitched(probe: LabProbe): boolean {
  return (
    probe.viaTunnel &&
    probe.state === 'down' &&
    probe.expect.verdict === 'deny' &&
    probe.expect.decidedBy.kind === 'kill-switch'
  );
}

/** Every tunnel down (the host's end), after registering the restore. */
export async function takeTunnelsDown(ctx: ScenarioContext): Promise<void> {
  registerTunnelRestore(ctx);
  for (const tunnel of ctx.plan.tunnels) await ctx.lab.setLinkDown(tunnelRef(ctx, tunnel));
}
