import type { MissingIngress, PolicyIR } from '../../ir/index.js';
import { classifyChains, type ForeignChain } from './nft-doctor-chains.js';
import { classifyNetworkd, type NetworkdState } from './nft-doctor-networkd.js';
import { classifyRouting } from './nft-doctor-routing.js';
import { classifyTopology } from './nft-doctor-topology.js';
import { STEERING_DEFAULTS, type SteeringSpec } from './steering.js';

export type DoctorSeverity = 'error' | 'warning' | 'info';
/** Which part of the host a finding is about; human output groups by it. */
export type DoctorArea = 'nftables' | 'routing' | 'networkd' | 'topology';

/** One thing doctor noticed: problems as data, with what to do about them. */
export interface DoctorFinding {
  readonly severity: DoctorSeverity;
  readonly area: DoctorArea;
  /** Stable, kebab-case: scripts match on it. */
  readonly code: string;
  readonly message: string;
  readonly hint: string;
}

/**
 * Everything doctor reads, as the commands print it: parsed JSON where they speak it, text
 * where they do not (`ip xfrm`). Null where a source could not be read (tool missing).
 */
export interface DoctorSnapshot {
  /** `nft -j -t list ruleset`. */
  readonly ruleset: unknown;
  /** `ip -N -j -4|-6 rule show`: numeric tables and protocols, whatever rt_tables says. */
  readonly rules: { readonly 4: unknown; readonly 6: unknown };
  /** `ip -N -j -4|-6 route show table all`. */
  readonly routes: { readonly 4: unknown; readonly 6: unknown };
  /** `ip -j -d link show`. */
  readonly links: unknown;
  /** `tc -j filter show dev X ingress|egress` for each device with an ingress or clsact qdisc. */
  readonly tcFilters: readonly TcFilterListing[] | null;
  /** `ip xfrm policy show` (ip prints no JSON for xfrm). */
  readonly xfrmPolicies: string | null;
  /** `net.bridge.bridge-nf-call-iptables`: null when br_netfilter is not loaded. */
  readonly bridgeNetfilter: boolean | null;
  /** Names in /proc/net/ip_tables_names and ip6_tables_names: legacy iptables, invisible to nft. */
  readonly legacyIptables: { readonly 4: readonly string[]; readonly 6: readonly string[] };
  /** systemd-networkd manages the machine's own namespace only: null inside a lab namespace. */
  readonly networkd: NetworkdState | null;
}

export interface TcFilterListing {
  readonly dev: string;
  readonly direction: 'ingress' | 'egress';
  readonly filters: unknown;
}

/** What doctor knows from the policy (when given) and the host facts. */
export interface DoctorContext {
  /** Our table: `table inet <name>`. */
  readonly table: string;
  /** The uplink, or null when it cannot be resolved (then `uplinkProblem` says why). */
  readonly uplink: string | null;
  readonly uplinkProblem: string | null;
  /** Classes selected by ingress interface, with their patterns ("veth*" is a prefix). */
  readonly classes: readonly { readonly name: string; readonly interfaces: readonly string[] }[];
  readonly tunnels: readonly string[];
  readonly steering: SteeringRange;
  /** Ingress interfaces of the classes on this host that it does not have. */
  readonly missingIngress: readonly MissingIngress[];
}

/** The routing tables and `ip rule` priorities egressguard uses, and whether it uses them. */
export interface SteeringRange {
  readonly tables: readonly number[];
  readonly priorities: readonly number[];
  /** rt_protos value of our rules and routes. */
  readonly protocol: number;
  /** True: the policy has tunnel classes; false: it has none; null: no policy given. */
  readonly inUse: boolean | null;
}

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
