import { EgressguardError } from '../core/index.js';
import type { HostControl } from './host-control.js';
import type { Lab } from './lab/create-lab.js';
import type { ObservedPacket } from './lab/parse-packet.js';
import { startObserver, type Observer } from './lab/start-observer.js';
import type { LabProbe, TunnelState } from './lab-probes.js';
import { labPython } from './lab/lab-python.js';
import { labScript } from './lab-services.js';
import type { FarSide, ProofLab } from './plan-proof-lab.js';

/** A layer a proof names: one of the backend's (policy routing, its filter). */
export type ProofLayer = string;

/** What the probe's real client got (oracle 1). */
export interface ClientOutcome {
  readonly outcome: 'answered' | 'refused' | 'unreachable' | 'timeout' | 'error' | 'none';
  /** The far side that answered (echo.py names itself). */
  readonly node: string | null;
  /** The source address the far side saw: the egress address. */
  readonly seen: string | null;
  readonly error: string | null;
  readonly ms: number | null;
}

/** The nonce'd raw packets sent for the far sides' counters (oracle 2). */
export interface RawSend {
  readonly sent: number;
  /**
   * Sends the node's own stack refused (its firewall's output drop, a blackhole, unreachable or
   * prohibit route, no route): those packets never left it.
   */
  readonly refused: number;
  /** Sends that failed otherwise. */
  readonly failed: number;
  readonly error: string | null;
}

/** The host's route for the probe, as `ip route get` reports it after the probe (oracle 3). */
export interface RouteLookup {
  /** unicast, local, blackhole, unreachable, prohibit, or error. */
  readonly type: string;
  readonly dev: string | null;
  /** Route flags: `linkdown` when the device has lost its carrier. */
  readonly flags: readonly string[];
  readonly detail: string;
}

/** One probe run in one phase, before the oracles judge it. */
export interface ProbeRun {
  readonly probe: LabProbe;
  /** Tells its packets apart beyond the nonce; the client's end in "c". */
  readonly tag: string;
  readonly node: string;
  readonly client: ClientOutcome;
  readonly raw: RawSend;
  readonly route: RouteLookup;
}

/** What a phase is: the tunnel state probes are judged in, and what must hold. */
export interface PhaseSpec {
  readonly name: string;
  readonly state: TunnelState;
  /** Which probes run: true, or why not. Default: every probe of the state. */
  readonly select?: (probe: LabProbe) => true | string;
  /** A layer-alone proof: the one layer that must have acted for every denied probe. */
  readonly expectLayer?: ProofLayer;
  /** Whether the egress address is judged (not when NAT is part of a removed layer). */
  readonly checkEgress?: boolean;
  /** Raw packets per probe; default 10. */
  readonly count?: number;
}

/** One measured phase of a scenario. */
export interface PhaseRun {
  readonly scenario: string;
  readonly spec: PhaseSpec;
  readonly runs: readonly ProbeRun[];
  readonly skipped: readonly { readonly probe: LabProbe; readonly reason: string }[];
  /** Our table's named counters, packets moved during the phase by policy id. */
  readonly counters: {
    readonly present: boolean;
    readonly delta: Readonly<Record<string, number>>;
  };
  readonly startedAt: string;
  readonly durationMs: number;
}

const CLIENT_TIMEOUT_MS = 700;
const DEFAULT_COUNT = 10;

/**
 * Runs one phase: every selected probe at once from its workload (a real client and `count`
 * nonce'd raw packets each), the host's route for each afterwards, and our counters before and
 * after. The far sides' observers run across the whole scenario and are read at its end.
 */
export async function runPhase(input: {
  readonly lab: Lab;
  readonly plan: ProofLab;
  readonly host: HostControl;
  readonly scenario: string;
  readonly nonce: string;
  readonly tagPrefix: string;
  readonly probes: readonly LabProbe[];
  readonly spec: PhaseSpec;
}): Promise<PhaseRun> {
  const { lab, plan, host, spec } = input;
  const started = performance.now();
  const startedAt = new Date().toISOString();
  const selected: LabProbe[] = [];
  const skipped: { probe: LabProbe; reason: string }[] = [];
  for (const probe of input.probes) {
    if (probe.state !== spec.state) continue;
    const verdict = spec.select?.(probe) ?? true;
    if (verdict === true) selected.push(probe);
    else skipped.push({ probe, reason: verdict });
  }
  const before = await readCounters(host);
  const tagged = selected.map((probe, i) => ({
    probe,
    tag: `${input.tagPrefix}x${i}`,
    node: plan.nodeOf(probe),
  }));
  const byNode = new Map<string, typeof tagged>();
  for (const t of tagged) byNode.set(t.node, [...(byNode.get(t.node) ?? []), t]);
  const results = new Map<string, { client: ClientOutcome; raw: RawSend }>();
  await Promise.all(
    [...byNode].map(async ([node, list]) => {
      const outcome = await runProbeScript(lab, node, {
        nonce: input.nonce,
        timeoutMs: CLIENT_TIMEOUT_MS,
        probes: list.map(({ probe, tag }) => ({
          tag,
          kind: probe.kind,
          src: probe.from,
          dst: probe.to,
          ...(probe.port === undefined ? {} : { port: probe.port }),
          ...(probe.ipProtocol === undefined ? {} : { protocol: probe.ipProtocol }),
          ...(probe.fragments === undefined
            ? {}
            : { fragment: probe.fragments === 'alone' ? 'non-first' : 'all' }),
          // A datagram that never completes has nothing a client could send.
          ...(probe.fragments === 'alone' ? { client: false } : {}),
          count: spec.count ?? DEFAULT_COUNT,
        })),
      });
      for (const r of outcome) results.set(r.tag, r);
    }),
  );
  const [routes, carrierless] = await Promise.all([
    Promise.all(tagged.map(({ probe }) => lookupRoute(host, probe))),
    readCarrierless(host),
  ]);
  const after = await readCounters(host);
  const delta: Record<string, number> = {};
  for (const [id, packets] of after.counters) {
    delta[id] = packets - (before.counters.get(id) ?? 0);
  }
  return {
    scenario: input.scenario,
    spec,
    runs: tagged.map(({ probe, tag, node }, i) => ({
      probe,
      tag,
      node,
      client: results.get(tag)?.client ?? noClient('the probe script reported nothing'),
      raw: results.get(tag)?.raw ?? { sent: 0, refused: 0, failed: 0, error: 'not run' },
      route: withCarrier(
        routes[i] ?? { type: 'error', dev: null, flags: [], detail: 'not looked up' },
        carrierless,
      ),
    })),
    skipped,
    counters: { present: before.present && after.present, delta },
    startedAt,
    durationMs: Math.round(performance.now() - started),
  };
}

/** The host's interfaces that are up but have no carrier (a tunnel whose far end is gone). */
async function readCarrierless(host: HostControl): Promise<Set<string>> {
  const { stdout } = await host.runner.run(['ip', '-j', 'link', 'show'], { effect: 'read' });
  const links = JSON.parse(stdout || '[]') as { ifname: string; flags?: string[] }[];
  return new Set(
    links
      .filter((l) => (l.flags ?? []).includes('UP') && !(l.flags ?? []).includes('LOWER_UP'))
      .map((l) => l.ifname),
  );
}

/** Marks a route through a device without carrier `linkdown`, as the kernel flags it. */
function withCarrier(route: RouteLookup, carrierless: ReadonlySet<string>): RouteLookup {
  if (route.dev === null || !carrierless.has(route.dev) || route.flags.includes('linkdown')) {
    return route;
  }
  return { ...route, flags: [...route.flags, 'linkdown'] };
}

/** Our table's named counters (packets by policy id), and whether the table is there. */
export async function readCounters(
  host: HostControl,
): Promise<{ present: boolean; counters: Map<string, number> }> {
  const live = await host.readLive();
  return {
    present: live.present,
    counters: new Map(live.counters.map((c) => [c.id, c.packets])),
  };
}

async function runProbeScript(
  lab: Lab,
  node: string,
  request: {
    readonly nonce: string;
    readonly timeoutMs: number;
    readonly probes: readonly Record<string, unknown>[];
  },
): Promise<{ tag: string; client: ClientOutcome; raw: RawSend }[]> {
  const runner = lab.runner(node);
  const { stdout } = await runner.run([await labPython(runner), labScript('probe.py'), 'probe'], {
    effect: 'change',
    input: JSON.stringify(request),
    timeoutMs: 30_000,
  });
  try {
    return (
      JSON.parse(stdout) as { results: { tag: string; client: ClientOutcome; raw: RawSend }[] }
    ).results;
  } catch (error) {
    throw new EgressguardError(
      'command-failed',
      `Cannot read the probe results of lab node "${node}": "${stdout.slice(0, 200)}"`,
      { cause: error },
    );
  }
}

function noClient(error: string): ClientOutcome {
  return { outcome: 'error', node: null, seen: null, error, ms: null };
}

/** `ip route get` for the probe as the host sees it (arriving on its ingress). */
async function lookupRoute(host: HostControl, probe: LabProbe): Promise<RouteLookup> {
  const argv = ['ip', '-j', 'route', 'get', probe.to, 'from', probe.from];
  if (probe.ingress !== undefined) argv.push('iif', probe.ingress);
  const result = await host.runner.run(argv, { effect: 'read', allowFailure: true });
  if (result.exitCode !== 0) {
    const detail = result.stderr.trim();
    // The kernel answers a lookup that ends in a blackhole or prohibit route with an error.
    const type = /Invalid argument/.test(detail)
      ? 'blackhole'
      : /Permission denied|prohibit/i.test(detail)
        ? 'prohibit'
        : /unreachable/i.test(detail)
          ? 'unreachable'
          : 'error';
    return { type, dev: null, flags: [], detail };
  }
  try {
    const [entry] = JSON.parse(result.stdout) as {
      type?: string;
      dev?: string;
      flags?: string[];
    }[];
    return {
      type: entry?.type ?? 'unicast',
      dev: entry?.dev ?? null,
      flags: entry?.flags ?? [],
      detail: result.stdout.trim(),
    };
  } catch {
    return { type: 'error', dev: null, flags: [], detail: result.stdout.trim() };
  }
}

/** What one far side's observer counted over a scenario. */
export interface SideObservation {
  readonly side: FarSide;
  /** Armed by its positive control and closed by another: counts can be trusted. */
  readonly trusted: boolean;
  readonly error: string | null;
  readonly packets: readonly ObservedPacket[];
}

/** Observers on every far side (the uplink, each tunnel, each LAN), each armed by a control. */
export async function observeFarSides(
  lab: Lab,
  plan: ProofLab,
  nonce: string,
): Promise<{ stop(): Promise<SideObservation[]> }> {
  const started = await Promise.all(
    plan.farSides.map(async (side) => {
      let observer: Observer | undefined;
      try {
        observer = await startObserver(lab, {
          node: side.node,
          iface: side.observe,
          nonce,
          direction: 'in',
          control: { from: plan.host, dst: side.controlDst },
        });
        await observer.armed();
        return { side, observer, error: null };
      } catch (error) {
        if (observer !== undefined) await observer.stop().catch(() => undefined);
        return { side, observer: undefined, error: messageOf(error) };
      }
    }),
  );
  return {
    async stop() {
      return Promise.all(
        started.map(async ({ side, observer, error }) => {
          if (observer === undefined) return { side, trusted: false, error, packets: [] };
          try {
            const observation = await observer.stop();
            return { side, trusted: true, error: null, packets: observation.packets };
          } catch (stopError) {
            return { side, trusted: false, error: messageOf(stopError), packets: [] };
          }
        }),
      );
    },
  };
}

export function messageOf(error: unknown): string {
  return error instanceof Error ? error.message : String(error);
}
