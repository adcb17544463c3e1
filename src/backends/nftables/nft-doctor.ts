import type { MissingIngress, PolicyIR } from '../../ir/index.js';
import { classifyChains, type ForeignChain } from './nft-doctor-chains.js';
import { classifyNetworkd } from './nft-doctor-networkd.js';
import type {
  DoctorArea,
  DoctorContext,
  DoctorFinding,
  DoctorSeverity,
  DoctorSnapshot,
  SteeringRange,
} from './nft-doctor-snapshot.js';
import { classifyRouting } from './nft-doctor-routing.js';
import { classifyTopology } from './nft-doctor-topology.js';
import { STEERING_DEFAULTS, type SteeringSpec } from './steering.js';

export interface DoctorReport {
  readonly findings: readonly DoctorFinding[];
  /** Every foreign base chain on our hooks (and foreign drops before routing). */
  readonly foreignChains: readonly ForeignChain[];
  readonly summary: { readonly errors: number; readonly warnings: number; readonly infos: number };
}

/** The doctor context of a policy (optional), its steering and the resolved uplink. */
export function createDoctorContext(input: {
  readonly table: string;
  readonly uplink: string | null;
  readonly uplinkProblem?: string | null;
  readonly policy?: PolicyIR | undefined;
  readonly steering?: SteeringSpec | undefined;
  readonly missingIngress?: readonly MissingIngress[];
}): DoctorContext {
  const { policy, steering } = input;
  const d = STEERING_DEFAULTS;
  let range: SteeringRange;
  if (steering !== undefined && steering.tunnels.length > 0) {
    range = {
      tables: steering.tunnels.map((t) => t.table),
      priorities: steering.tunnels.map((t) => t.priority),
      protocol: steering.protocol,
      inUse: true,
    };
  } else {
    // Without tunnel classes nothing is steered yet; check the first table and priority anyway.
    const tunnelClasses = policy?.classes.filter((c) => c.via.kind === 'tunnel') ?? [];
    range = {
      tables: [d.table],
      priorities: [d.priority],
      protocol: d.protocol,
      inUse: policy === undefined ? null : tunnelClasses.length > 0,
    };
  }
  return {
    table: input.table,
    uplink: input.uplink,
    uplinkProblem: input.uplinkProblem ?? null,
    classes: (policy?.classes ?? []).flatMap((c) =>
      c.selector.kind === 'ingress'
        ? [{ name: c.name, interfaces: [...c.selector.interfaces] }]
        : [],
    ),
    tunnels: [...(policy?.tunnels ?? [])],
    steering: range,
    missingIngress: input.missingIngress ?? [],
  };
}

const SEVERITY_ORDER: Record<DoctorSeverity, number> = { error: 0, warning: 1, info: 2 };
const AREA_ORDER: Record<DoctorArea, number> = {
  nftables: 0,
  routing: 1,
  networkd: 2,
  topology: 3,
};

/** Every finding about a host, from what was read of it: pure, so fixtures test it. */
export function diagnose(snapshot: DoctorSnapshot, context: DoctorContext): DoctorReport {
  const chains = classifyChains(snapshot.ruleset, {
    table: context.table,
    legacyIptables: snapshot.legacyIptables,
  });
  const findings = [
    ...chains.findings,
    ...classifyRouting({ rules: snapshot.rules, routes: snapshot.routes }, context.steering),
    ...(snapshot.networkd === null ? [] : classifyNetworkd(snapshot.networkd, context.steering)),
    ...classifyTopology(snapshot, context),
  ].sort(
    (a, b) =>
      AREA_ORDER[a.area] - AREA_ORDER[b.area] ||
      SEVERITY_ORDER[a.severity] - SEVERITY_ORDER[b.severity],
  );
  return {
    findings,
    foreignChains: chains.foreignChains,
    summary: {
      errors: findings.filter((f) => f.severity === 'error').length,
      warnings: findings.filter((f) => f.severity === 'warning').length,
      infos: findings.filter((f) => f.severity === 'info').length,
    },
  };
}
