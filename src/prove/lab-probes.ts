import type { Family } from '../core/index.js';
import {
  evaluatePacket,
  matchesInterface,
  toPacket,
  type Decision,
  type HostView,
  type Layer,
  type HostIR,
} from '../ir/index.js';
import type { Policy, Protocol } from '../policy/index.js';

/** The kinds of packet a lab probe sends (scripts/lab/probe.py). */
export type ProbeKind = 'tcp' | 'udp' | 'dns' | 'icmp' | 'gre' | 'esp' | 'sctp' | 'ip';

/** A tunnel state, as probes and the reference evaluator name it. */
export type TunnelState = 'up' | 'down';

/**
 * A probe sent in IP fragments: `datagram`, each datagram's every fragment (judged like the
 * datagram: its first and its non-first fragments must arrive, or none may); `alone`, only the
 * non-first fragments (a datagram that never completes: none may arrive).
 */
export type LabFragments = 'datagram' | 'alone';

/** Where a lab probe comes from: a probe of the policy (its requirement and index). */
export interface ProbeOrigin {
  readonly requirement: string;
  readonly index: number;
}

/** What a probe must measure, from the policy's own probe or else the reference evaluator. */
export interface ProbeExpectation {
  readonly verdict: 'allow' | 'deny';
  /** The host interface it leaves by ("local": the host itself); null when denied. */
  readonly via: string | null;
  /** The source address the far side must see, when known. */
  readonly egress: string | null;
  /** The evaluator's deciding rule: its id names the counter that must move. */
  readonly decidedBy: Decision;
  /** The layers the evaluator says enforce it. */
  readonly layers: readonly Layer[];
  /** Whether the policy's probe states this verdict (else the evaluator derived it). */
  readonly stated: boolean;
}

/** One packet a lab sends and judges: a policy probe, or a variant derived from one. */
export interface LabProbe {
  /** Stable and readable: `10.10.0.5 > 203.0.113.7 tcp/443 (tunnel down)`. */
  readonly key: string;
  readonly origins: readonly ProbeOrigin[];
  /** No policy probe states exactly this packet and state: a variant (protocol, tunnel state). */
  readonly derived: boolean;
  readonly from: string;
  readonly to: string;
  readonly family: Family;
  readonly protocol: Protocol;
  readonly port: number | undefined;
  readonly kind: ProbeKind;
  /** The IP protocol number, for kind `ip`. */
  readonly ipProtocol: number | undefined;
  /** The host interface it arrives on; undefined for a host class (sent by the host itself). */
  readonly ingress: string | undefined;
  readonly className: string;
  /** Whether the class leaves by a tunnel (its probes are the kill switch's business). */
  readonly viaTunnel: boolean;
  readonly state: TunnelState;
  /** Sent in fragments; absent: whole. */
  readonly fragments?: LabFragments | undefined;
  readonly expect: ProbeExpectation;
}

/** A packet a scenario probes on its own (a DNS query to the host's resolver, say). */
export interface DerivedPacket {
  readonly from: string;
  readonly to: string;
  readonly protocol: 'tcp' | 'udp' | 'icmp';
  readonly port?: number | undefined;
  readonly ingress?: string | undefined;
  readonly state: 'up' | 'down';
}

/** A policy probe that cannot run in the lab, and why. */
export interface SkippedProbe {
  readonly origin: ProbeOrigin;
  readonly reason: string;
}

const NAMED_KINDS: Readonly<Record<number, ProbeKind>> = { 47: 'gre', 50: 'esp', 132: 'sctp' };

/**
 * Every lab probe of a policy: each probe as stated, plus derived variants (the other tunnel
 * state; UDP and ICMP for a TCP probe and so on; UDP and ICMP in fragments, whole datagrams and
 * lone non-first fragments) whose expectation the reference evaluator gives, so a kill switch is
 * measured for more than the one protocol and shape a policy happened to write down.
 */
export function expandProbes(
  policy: Policy,
  ir: HostIR,
  host: HostView,
  options: { readonly only?: readonly string[] | undefined } = {},
): { probes: LabProbe[]; skipped: SkippedProbe[] } {
  const byKey = new Map<string, LabProbe>();
  const skipped: SkippedProbe[] = [];
  for (const requirement of policy.requirements) {
    if (options.only !== undefined && !options.only.includes(requirement.id)) continue;
    requirement.probes.forEach((probe, index) => {
      const origin = { requirement: requirement.id, index };
      for (const state of ['up', 'down'] as const) {
        for (const { protocol, fragments } of variantsOf(probe.proto, probe.port)) {
          const packetClass = ir.classes.find(
            (c) =>
              c.name ===
              evaluatePacket(
                ir,
                host,
                toPacket({ from: probe.from, to: probe.to, ingress: probe.in }),
                { tunnel: 'up' },
              ).class,
          );
          // A class that leaves by the uplink ignores the tunnel: its probe holds in both states.
          const stated =
            protocol === probe.proto &&
            fragments === undefined &&
            (state === probe.tunnel || packetClass?.via.kind !== 'tunnel');
          const port = protocol === 'icmp' ? undefined : probe.port;
          const whole = toPacket({
            from: probe.from,
            to: probe.to,
            ingress: probe.in,
            protocol,
            port,
          });
          const packet =
            fragments === undefined
              ? whole
              : {
                  ...whole,
                  fragment: fragments === 'alone' ? ('alone' as const) : ('non-first' as const),
                };
          const explanation = evaluatePacket(ir, host, packet, { tunnel: state });
          const cls = ir.classes.find((c) => c.name === explanation.class);
          if (cls === undefined) {
            if (stated) {
              skipped.push({
                origin,
                reason: `no class selects ${probe.from}${probe.in === undefined ? '' : ` on ${probe.in}`}: egressguard leaves it alone, so there is nothing to measure`,
              });
            }
            continue;
          }
          const ingress =
            cls.selector.kind === 'host'
              ? undefined
              : (probe.in ??
                [...host.interfaceAddresses.keys()].find((name) =>
                  cls.selector.kind === 'ingress'
                    ? cls.selector.interfaces.some((p) => matchesInterface(p, name))
                    : false,
                ) ??
                cls.selector.interfaces[0]);
          const expect: ProbeExpectation = stated
            ? {
                verdict: probe.expect,
                via: probe.expect === 'deny' ? null : (probe.via ?? explanation.via),
                egress: probe.expect === 'deny' ? null : (probe.egress ?? explanation.egress),
                decidedBy: explanation.decidedBy,
                layers: explanation.layers,
                stated: true,
              }
            : evaluatorExpectation(explanation);
          // A DNS query is never fragmented: fragments go as plain UDP to the same port.
          const kind =
            fragments === undefined
              ? kindOf(protocol, port)
              : protocol === 'udp'
                ? 'udp'
                : kindOf(protocol, port);
          const key = probeKey({ ...probe, kind, port, state, fragments });
          const known = byKey.get(key);
          if (known !== undefined) {
            byKey.set(key, {
              ...known,
              origins: known.origins.some(
                (o) => o.requirement === origin.requirement && o.index === origin.index,
              )
                ? known.origins
                : [...known.origins, origin],
              derived: known.derived && !stated,
              expect: stated && !known.expect.stated ? expect : known.expect,
            });
            continue;
          }
          byKey.set(key, {
            key,
            origins: [origin],
            derived: !stated,
            from: probe.from,
            to: probe.to,
            family: packet.family,
            protocol,
            port,
            kind,
            ipProtocol: typeof protocol === 'number' ? protocol : undefined,
            ingress,
            className: cls.name,
            viaTunnel: cls.via.kind === 'tunnel',
            state,
            ...(fragments === undefined ? {} : { fragments }),
            expect,
          });
        }
      }
    });
  }
  return { probes: [...byKey.values()], skipped };
}

/**
 * A probe the policy does not state (a scenario's own packet), with the reference evaluator's
 * expectation; undefined when no class selects it.
 */
export function deriveProbe(
  ir: HostIR,
  host: HostView,
  packet: DerivedPacket,
): LabProbe | undefined {
  const parsed = toPacket({
    from: packet.from,
    to: packet.to,
    ingress: packet.ingress,
    protocol: packet.protocol,
    port: packet.port,
  });
  const explanation = evaluatePacket(ir, host, parsed, { tunnel: packet.state });
  const cls = ir.classes.find((c) => c.name === explanation.class);
  if (cls === undefined) return undefined;
  const kind = kindOf(packet.protocol, packet.port);
  return {
    // Its ingress is the lab's, not one a policy probe names: not part of its name.
    key: probeKey({ ...packet, kind, port: packet.port, in: undefined }),
    origins: [],
    derived: true,
    from: packet.from,
    to: packet.to,
    family: parsed.family,
    protocol: packet.protocol,
    port: packet.port,
    kind,
    ipProtocol: undefined,
    ingress: packet.ingress,
    className: cls.name,
    viaTunnel: cls.via.kind === 'tunnel',
    state: packet.state,
    expect: evaluatorExpectation(explanation),
  };
}

/** A probe's stable, readable name: `10.10.0.5 > 203.0.113.7 tcp/443 in vwl0 (tunnel down)`. */
function probeKey(probe: {
  readonly from: string;
  readonly to: string;
  readonly kind: ProbeKind;
  readonly port: number | undefined;
  readonly in: string | undefined;
  readonly state: TunnelState;
  readonly fragments?: LabFragments | undefined;
}): string {
  const shape =
    probe.fragments === undefined
      ? ''
      : probe.fragments === 'datagram'
        ? ' in fragments'
        : ' lone fragments';
  return `${probe.from} > ${probe.to} ${probe.kind}${probe.port === undefined ? '' : `/${probe.port}`}${shape}${probe.in === undefined ? '' : ` in ${probe.in}`} (tunnel ${probe.state})`;
}

/** What the reference evaluator says of a packet, as the expectation of a probe it derived. */
function evaluatorExpectation(explanation: ReturnType<typeof evaluatePacket>): ProbeExpectation {
  return {
    verdict: explanation.verdict,
    via: explanation.via,
    egress: explanation.egress,
    decidedBy: explanation.decidedBy,
    layers: explanation.layers,
    stated: false,
  };
}

/**
 * The shapes a probe is measured in: its own protocol; for TCP, UDP and ICMP the other two; and
 * UDP and ICMP in fragments (whole datagrams, and lone non-first fragments).
 */
function variantsOf(
  protocol: Protocol,
  port: number | undefined,
): { protocol: Protocol; fragments?: LabFragments }[] {
  if (typeof protocol === 'number') return [{ protocol }];
  const all: { protocol: Protocol; fragments?: LabFragments }[] = [{ protocol }];
  for (const other of ['tcp', 'udp', 'icmp'] as const) {
    if (other === protocol) continue;
    if (other !== 'icmp' && port === undefined) continue; // a port is needed and none is known
    all.push({ protocol: other });
  }
  for (const fragmented of ['udp', 'icmp'] as const) {
    if (fragmented === 'udp' && port === undefined) continue;
    all.push(
      { protocol: fragmented, fragments: 'datagram' },
      { protocol: fragmented, fragments: 'alone' },
    );
  }
  return all;
}

function kindOf(protocol: Protocol, port: number | undefined): ProbeKind {
  if (protocol === 'udp') return port === 53 ? 'dns' : 'udp';
  if (protocol === 'tcp' || protocol === 'icmp') return protocol;
  if (protocol === 6) return 'tcp';
  if (protocol === 17) return 'udp';
  return NAMED_KINDS[protocol] ?? 'ip';
}
