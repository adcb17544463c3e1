import type { MissingIngress } from '../../ir/index.js';

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

/** What doctor knows of systemd-networkd on this machine. */
export interface NetworkdState {
  /** A systemd-networkd process is running. */
  readonly running: boolean;
  /** systemd-networkd.service is enabled (it will run after the next boot). */
  readonly enabled: boolean;
  /** networkd.conf and its drop-ins, in the order systemd reads them (see orderNetworkdConfig). */
  readonly files: readonly { readonly path: string; readonly text: string }[];
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
