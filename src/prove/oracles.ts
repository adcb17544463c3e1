import type { ObservedPacket } from './lab/parse-packet.js';
import type { ProbeOrigin, TunnelState } from './lab-probes.js';
import type { PhaseRun, ProbeRun, ProofLayer, SideObservation } from './measure-phase.js';
import type { ProofLab } from './plan-proof-lab.js';

/** The three oracles: the probe itself, packet counts outside the enforcer, the enforcer. */
export type OracleName = 'probe' | 'packets' | 'enforcer';

/** One oracle's reading of one probe. */
export interface OracleVerdict {
  readonly oracle: OracleName;
  /** What it measured: allowed (got through), denied, or nothing conclusive. */
  readonly verdict: 'allow' | 'deny' | 'unknown';
  /** Whether its reading agrees with what the policy expects. */
  readonly agrees: boolean;
  readonly detail: string;
}

/**
 * What a measurement came to: every oracle agreed with the policy (passed); an oracle measured
 * what the policy does not allow, so enforcement failed (failed); or an oracle could not read at
 * all, a fault of the lab and not of the enforcer (unmeasured: a probe that could not be sent, an
 * observer that lost packets, a client that failed on its own), and nothing measured disagreed.
 */
export type MeasurementOutcome = 'passed' | 'failed' | 'unmeasured';

/** The outcome of a set of oracle readings: a definite disagreement fails, an unknown one is unmeasured. */
export function outcomeOf(oracles: readonly OracleVerdict[]): {
  outcome: MeasurementOutcome;
  unmeasured: string | null;
} {
  const disagreeing = oracles.filter((o) => !o.agrees);
  if (disagreeing.length === 0) return { outcome: 'passed', unmeasured: null };
  if (disagreeing.some((o) => o.verdict !== 'unknown'))
    return { outcome: 'failed', unmeasured: null };
  return {
    outcome: 'unmeasured',
    unmeasured: disagreeing.map((o) => `${o.oracle}: ${o.detail}`).join('; '),
  };
}

/** Nonce'd packets of one probe seen beyond one far side. */
export interface SideCount {
  readonly node: string;
  readonly role: string;
  readonly raw: number;
  readonly client: number;
  /** Source addresses the packets arrived with. */
  readonly sources: readonly string[];
}

/** One probe of one phase, judged by the three oracles. */
export interface ProbeJudgement {
  readonly scenario: string;
  readonly phase: string;
  readonly key: string;
  readonly tag: string;
  readonly origins: readonly ProbeOrigin[];
  readonly derived: boolean;
  readonly className: string;
  readonly viaTunnel: boolean;
  readonly state: TunnelState;
  readonly expected: {
    readonly verdict: 'allow' | 'deny';
    readonly via: string | null;
    readonly egress: string | null;
    readonly decidedBy: string | null;
  };
  readonly oracles: readonly OracleVerdict[];
  /** All three agree with the expectation. */
  readonly passed: boolean;
  readonly outcome: MeasurementOutcome;
  /** Why it could not be measured (outcome unmeasured): the oracles that could not read. */
  readonly unmeasured: string | null;
  /** The layers that acted, read from the enforcer (routing: the route; the filter: counters). */
  readonly actedLayers: readonly string[];
  /** When it failed: the layers that should have held and did not. */
  readonly failingLayers: readonly ProofLayer[];
  readonly sent: number;
  readonly counts: readonly SideCount[];
  /** Raw and client packets of a denied probe beyond any far side, or at a wrong far side. */
  readonly leaked: number;
  /** Raw packets of an allowed probe that never reached the far side they should. */
  readonly lost: number;
  /** Packets carrying the probe's tag that a host service sent on (a resolver forwarding it). */
  readonly forwardedByHost: number;
}

const DENYING_ROUTES = new Set(['blackhole', 'unreachable', 'prohibit']);

/** Judges every probe of a phase with the observations its scenario's far sides made. */
export function judgePhase(
  phase: PhaseRun,
  sides: readonly SideObservation[],
  plan: ProofLab,
  /** The backend's filter layer (explain's `filter`), by its firewall's name. */
  filterLayer: string,
): ProbeJudgement[] {
  // A counter shared by several probes must have moved by at least all their raw packets (the
  // reassembly counter counts fragments: at least one per datagram).
  const need = new Map<string, number>();
  for (const run of phase.runs) {
    const id = run.probe.expect.decidedBy.id;
    if (id === null || DENYING_ROUTES.has(run.route.type)) continue;
    need.set(id, (need.get(id) ?? 0) + run.raw.sent);
  }
  const hostAddresses = new Set(
    plan.facts.topology.links
      .filter((l) => l.a.node === plan.host)
      .flatMap((l) => (l.a.addresses ?? []).map((a) => a.split('/')[0] ?? a)),
  );
  return phase.runs.map((run) =>
    judgeProbe({ run, phase, sides, plan, need, hostAddresses, filterLayer }),
  );
}

function judgeProbe(input: {
  run: ProbeRun;
  phase: PhaseRun;
  sides: readonly SideObservation[];
  plan: ProofLab;
  need: ReadonlyMap<string, number>;
  hostAddresses: ReadonlySet<string>;
  filterLayer: string;
}): ProbeJudgement {
  const { run, phase, sides, plan } = input;
  const { probe } = run;
  const expect = probe.expect;
  const checkEgress = phase.spec.checkEgress ?? true;
  const expectedSide =
    expect.verdict === 'allow' && expect.via !== null ? plan.farSideOf(expect.via) : undefined;
  const isLocal = expect.verdict === 'allow' && expect.via === 'local';

  const counts: SideCount[] = sides.map((s) => {
    const raw = s.packets.filter((p) => p.tag === run.tag);
    const client = s.packets.filter((p) => p.tag === `${run.tag}c`);
    return {
      node: s.side.node,
      role: s.side.role,
      raw: raw.length,
      client: client.length,
      sources: [...new Set([...raw, ...client].map((p: ObservedPacket) => p.src))].sort(),
    };
  });

  // Oracle 1: the probe's own outcome, and where and as whom it arrived.
  const o1 = judgeClient(run, {
    expectedNode: expectedSide?.node,
    isLocal,
    egress: checkEgress ? expect.egress : null,
    expectAllow: expect.verdict === 'allow',
  });

  // Oracle 2: nonce'd packets counted beyond the uplink, the tunnels and the LANs.
  const untrusted = sides.filter((s) => !s.trusted);
  let forwardedByHost = 0;
  let leaked = 0;
  let lost = 0;
  let o2: OracleVerdict;
  const seenAnywhere = counts.reduce((sum, c) => sum + c.raw, 0);
  if (
    run.raw.sent === 0 &&
    run.raw.failed === 0 &&
    run.raw.refused > 0 &&
    probe.ingress === undefined
  ) {
    // A host class's packet is sent by the host itself: its own stack refusing every send (our
    // output drop, the kill switch's blackhole) is the drop, measured where it happens.
    o2 = {
      oracle: 'packets',
      verdict: 'deny',
      agrees: expect.verdict === 'deny',
      detail: `the host refused all ${run.raw.refused} sends (${run.raw.error ?? 'no error given'}): none left it`,
    };
  } else if (run.raw.sent === 0) {
    o2 = {
      oracle: 'packets',
      verdict: 'unknown',
      agrees: false,
      detail: `no raw packet could be sent: ${run.raw.error ?? 'unknown error'}`,
    };
  } else if (untrusted.length > 0) {
    o2 = {
      oracle: 'packets',
      verdict: 'unknown',
      agrees: false,
      detail: `cannot count beyond ${untrusted.map((s) => `${s.side.role} (${s.side.node}): ${s.error ?? 'not armed'}`).join('; ')}`,
    };
  } else if (expect.verdict === 'deny' || isLocal || expectedSide === undefined) {
    const own = sides.flatMap((s) =>
      s.packets.filter(
        (p) =>
          (p.tag === run.tag || p.tag === `${run.tag}c`) &&
          !(isLocal && input.hostAddresses.has(p.src)),
      ),
    );
    forwardedByHost = isLocal
      ? sides.reduce(
          (sum, s) =>
            sum +
            s.packets.filter(
              (p) =>
                (p.tag === run.tag || p.tag === `${run.tag}c`) && input.hostAddresses.has(p.src),
            ).length,
          0,
        )
      : 0;
    leaked = own.length;
    const where = counts
      .filter((c) => c.raw + c.client > 0)
      .map(
        (c) => `${c.raw + c.client} beyond the ${c.role} (${c.node}, from ${c.sources.join(', ')})`,
      );
    o2 = {
      oracle: 'packets',
      verdict: leaked > 0 ? 'allow' : 'deny',
      agrees: leaked === 0,
      detail:
        leaked === 0
          ? `0 of ${run.raw.sent} nonce'd packets beyond ${sides.map((s) => s.side.role).join(', ')}${forwardedByHost > 0 ? `; ${forwardedByHost} forwarded by a host service` : ''}`
          : `${leaked} nonce'd packets seen: ${where.join('; ')}`,
    };
  } else {
    const at = counts.find((c) => c.node === expectedSide.node);
    const side = sides.find((s) => s.side.node === expectedSide.node);
    const tail = probe.fragments === 'datagram' ? fragmentsOf(side, run.tag) : undefined;
    // A datagram in fragments arrived when its first fragment did, and its tail with it.
    const arrived = tail === undefined ? (at?.raw ?? 0) : Math.min(tail.first, tail.later);
    const elsewhere = counts.filter((c) => c.node !== expectedSide.node);
    const astray = elsewhere.reduce((sum, c) => sum + c.raw + c.client, 0);
    lost = run.raw.sent - arrived;
    leaked = astray;
    o2 = {
      oracle: 'packets',
      verdict: arrived > 0 || astray > 0 ? 'allow' : 'deny',
      agrees: arrived === run.raw.sent && astray === 0,
      detail: `${arrived} of ${run.raw.sent} nonce'd ${tail === undefined ? 'packets' : `datagrams (${tail.first} first and ${tail.later} later fragments)`} beyond the ${expectedSide.role} (${expectedSide.node})${
        astray > 0
          ? `; ${astray} astray: ${elsewhere
              .filter((c) => c.raw + c.client > 0)
              .map((c) => `${c.raw + c.client} beyond the ${c.role}`)
              .join(', ')}`
          : ''
      }`,
    };
    if (seenAnywhere === 0 && arrived === 0) lost = run.raw.sent;
  }

  // Oracle 3: the enforcer's own account, naming the layer that acted.
  const o3 = judgeEnforcer(run, phase, {
    need: input.need,
    expectedIface: expectedSide?.iface ?? null,
    filterLayer: input.filterLayer,
  });

  const oracles = [o1, o2, o3.verdict];
  const { outcome, unmeasured } = outcomeOf(oracles);
  const passed = outcome === 'passed';
  const expectedLayers: ProofLayer[] =
    phase.spec.expectLayer !== undefined
      ? [phase.spec.expectLayer]
      : expect.layers.map((l) => (l === 'filter' ? input.filterLayer : 'routing'));
  let failingLayers: ProofLayer[] = [];
  if (outcome === 'failed') {
    const missing = expectedLayers.filter((l) => !o3.acted.includes(l));
    failingLayers = missing.length > 0 ? missing : expectedLayers;
  }
  return {
    scenario: phase.scenario,
    phase: phase.spec.name,
    key: probe.key,
    tag: run.tag,
    origins: probe.origins,
    derived: probe.derived,
    className: probe.className,
    viaTunnel: probe.viaTunnel,
    state: probe.state,
    expected: {
      verdict: expect.verdict,
      via: expect.via,
      egress: expect.egress,
      decidedBy: expect.decidedBy.id,
    },
    oracles,
    passed,
    outcome,
    unmeasured,
    actedLayers: o3.acted,
    failingLayers,
    sent: run.raw.sent,
    counts,
    leaked,
    lost,
    forwardedByHost,
  };
}

function judgeClient(
  run: ProbeRun,
  expected: {
    expectedNode: string | undefined;
    isLocal: boolean;
    egress: string | null;
    expectAllow: boolean;
  },
): OracleVerdict {
  const c = run.client;
  switch (c.outcome) {
    case 'none':
      return {
        oracle: 'probe',
        verdict: 'unknown',
        agrees: true,
        detail: `no client for ${run.probe.kind}: the other two oracles decide`,
      };
    case 'answered':
    case 'refused': {
      const by = c.node === null ? 'an unnamed responder' : `"${c.node}"`;
      const as = c.seen === null ? '' : ` as ${c.seen}`;
      const problems: string[] = [];
      if (!expected.expectAllow) problems.push('it should have been dropped');
      else {
        if (
          !expected.isLocal &&
          expected.expectedNode !== undefined &&
          c.node !== null &&
          c.node !== expected.expectedNode
        ) {
          problems.push(`expected "${expected.expectedNode}"`);
        }
        if (expected.egress !== null && c.seen !== null && c.seen !== expected.egress) {
          problems.push(`expected egress ${expected.egress}`);
        }
        if (c.outcome === 'refused') problems.push('refused instead of answered');
      }
      return {
        oracle: 'probe',
        verdict: 'allow',
        agrees: problems.length === 0,
        detail: `${c.outcome} by ${by}${as} in ${c.ms ?? '?'} ms${problems.length > 0 ? `: ${problems.join('; ')}` : ''}`,
      };
    }
    case 'timeout':
    case 'unreachable':
      return {
        oracle: 'probe',
        verdict: 'deny',
        agrees: !expected.expectAllow,
        detail:
          c.outcome === 'timeout'
            ? `no answer in ${c.ms ?? '?'} ms`
            : `unreachable: ${c.error ?? ''}`,
      };
    case 'error':
      // Not an answer and not a drop: the client could not tell (the other oracles still can).
      return {
        oracle: 'probe',
        verdict: 'unknown',
        agrees: false,
        detail: `the client failed: ${c.error ?? 'unknown error'}`,
      };
  }
}

/** The first and later fragments carrying a probe's tag that a far side saw. */
function fragmentsOf(
  side: SideObservation | undefined,
  tag: string,
): { first: number; later: number } {
  const own = side?.packets.filter((p) => p.tag === tag) ?? [];
  return {
    first: own.filter((p) => p.fragment === 'first').length,
    later: own.filter((p) => p.fragment === 'non-first').length,
  };
}

function judgeEnforcer(
  run: ProbeRun,
  phase: PhaseRun,
  context: {
    readonly need: ReadonlyMap<string, number>;
    readonly expectedIface: string | null;
    readonly filterLayer: string;
  },
): { verdict: OracleVerdict; acted: string[] } {
  const { need, expectedIface, filterLayer } = context;
  const expect = run.probe.expect;
  const id = expect.decidedBy.id;
  const moved = id === null ? undefined : phase.counters.delta[id];
  const needed = id === null ? 0 : (need.get(id) ?? 0);
  const route = run.route;
  const routeText =
    route.type === 'unicast' || route.type === 'local'
      ? `route ${route.type === 'local' ? 'local' : `dev ${route.dev ?? '?'}`}${route.flags.includes('linkdown') ? ' (linkdown)' : ''}`
      : `route ${route.type}`;
  const counterText = !phase.counters.present
    ? 'our table is absent'
    : id === null
      ? 'no counter'
      : `counter ${id} +${moved ?? 0}${needed > 0 ? ` (≥ ${needed} needed)` : ''}`;
  const acted: string[] = [];
  if (expect.verdict === 'deny') {
    if (DENYING_ROUTES.has(route.type)) acted.push('routing');
    if (phase.counters.present && moved !== undefined && moved >= Math.max(needed, 1)) {
      acted.push(filterLayer);
    }
    if (route.flags.includes('linkdown')) acted.push('link (no carrier)');
    const layer = phase.spec.expectLayer;
    const agrees = layer === undefined ? acted.length > 0 : acted.includes(layer);
    return {
      acted,
      verdict: {
        oracle: 'enforcer',
        verdict: acted.length > 0 ? 'deny' : 'allow',
        agrees,
        detail: `${acted.length > 0 ? `dropped by ${acted.join(' + ')}` : 'no layer of ours dropped it'}${layer !== undefined && !acted.includes(layer) ? ` (the layer under test, ${layer}, did not act)` : ''}: ${routeText}, ${counterText}`,
      },
    };
  }
  const routeOk =
    expectedIface === null ||
    expect.via === 'local' ||
    (route.type === 'unicast' && route.dev === expectedIface) ||
    route.type === 'local';
  const counterOk = !phase.counters.present || (moved !== undefined && moved >= needed);
  if (routeOk) acted.push('routing');
  if (phase.counters.present && counterOk) acted.push(filterLayer);
  return {
    acted,
    verdict: {
      oracle: 'enforcer',
      verdict: routeOk && counterOk ? 'allow' : 'deny',
      agrees: routeOk && counterOk,
      detail: `${routeOk && counterOk ? 'passed' : 'not passed as expected'}: ${routeText}${expectedIface === null ? '' : ` (expected dev ${expectedIface})`}, ${counterText}`,
    },
  };
}
