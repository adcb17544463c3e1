import type { Family, Prefix } from '../../core/index.js';

/**
 * pf.conf as macOS parses it: the OpenBSD 4.5-era grammar (NOTES.md §1; F93 pf.conf.5 BNF at
 * lines 2858–2960). Two shapes: the parsed file (lists, negations and interface names as written)
 * and the kernel rule (one address, one port operator, one interface each), which is what pfctl
 * loads after expanding every list (F93 pfctl_parser.c expand_rule) and what `pfctl -sr` prints.
 */

/** An address as written in a rule, a table or a translation target. */
export type PfAddress =
  | { readonly kind: 'any' }
  /** `self`: every interface's addresses when the file loads (F93 host_if → ifa_lookup). */
  | { readonly kind: 'self'; readonly mask: number | null }
  | { readonly kind: 'prefix'; readonly prefix: Prefix }
  | { readonly kind: 'table'; readonly name: string }
  /**
   * `en0` (resolved at load time) or `(en0)` (dynamic: follows the interface's addresses).
   * pf.conf(5) PARAMETERS: "interface to address translation are done at ruleset load-time …
   * Surrounding the interface name (and optional modifiers) in parentheses changes this".
   */
  | {
      readonly kind: 'interface';
      readonly name: string;
      readonly modifier: 'network' | 'broadcast' | 'peer' | '0' | null;
      readonly dynamic: boolean;
      /** `(en0)/24`, `en0/24`: each address cut to this many bits (F93 parse.y host). */
      readonly mask: number | null;
    }
  /** `10.0.0.1 - 10.0.0.9`: every address from one to the other (F93 parse.y host: PF_ADDR_RANGE). */
  | { readonly kind: 'range'; readonly from: Prefix; readonly to: Prefix }
  | { readonly kind: 'no-route' }
  | { readonly kind: 'urpf-failed' };

export interface PfHost {
  readonly negated: boolean;
  readonly address: PfAddress;
}

/** pf.conf(5) port operators: `=`, `!=`, `<`, `<=`, `>`, `>=`, `><` (exclusive range), `<>` (outside), `:` (inclusive range). */
export type PfPortOp = '=' | '!=' | '<' | '<=' | '>' | '>=' | '><' | '<>' | ':';

export interface PfPort {
  readonly op: PfPortOp;
  readonly low: number;
  /** The second bound of `><`, `<>` and `:`; equal to `low` otherwise. */
  readonly high: number;
}

export interface PfEndpoint {
  readonly hosts: readonly PfHost[];
  readonly ports: readonly PfPort[] | null;
}

export interface PfInterfaceSpec {
  readonly negated: boolean;
  readonly name: string;
}

export interface PfIcmpType {
  readonly type: number;
  readonly code: number | null;
  /** Written as `icmp-type` (4) or `icmp6-type` (6): the protocol it needs (F93 node_icmp.proto). */
  readonly family: 4 | 6;
}

export type PfDirection = 'in' | 'out';

/**
 * What a block rule does with the packet (F93 parse.y blockspec): `drop`, `return` (a TCP RST
 * or an ICMP unreachable, by protocol), `return-rst` (TTL optional), `return-icmp` (the codes
 * for IPv4 and IPv6, each `type << 8 | code`, F93 parseicmpspec). A bare `block` takes the
 * `set block-policy` in force where it is written.
 */
export type PfBlockPolicy =
  | { readonly kind: 'drop' }
  | { readonly kind: 'return' }
  | { readonly kind: 'return-rst'; readonly ttl: number | null }
  | { readonly kind: 'return-icmp'; readonly icmp: number; readonly icmp6: number };

/** `log`, `log (all, user, to pflogN)` (F93 parse.y log / logopts). */
export interface PfLog {
  readonly all: boolean;
  readonly user: boolean;
  /** pflog interface number; 0 is the default pflog0. */
  readonly to: number;
}

/**
 * Route pool options (F93 parse.y pool_opts): the pool type and sticky-address. A pool of more
 * than one address, a table or an interface with aliases is round-robin unless told otherwise.
 */
export interface PfPool {
  readonly type: 'bitmask' | 'random' | 'source-hash' | 'round-robin' | null;
  readonly stickyAddress: boolean;
}
export type PfStateMode = 'keep' | 'modulate' | 'synproxy' | 'no';
export type PfStateBinding = 'if-bound' | 'floating';

/**
 * `route-to utun3` (address null: the packet's own destination is the next hop) or
 * `route-to (utun3 10.0.0.1)`, and reply-to / dup-to / fastroute. `(utun3)` alone is not one:
 * parse.y's route_host is `STRING | '(' STRING host ')'`.
 */
export interface PfRoute {
  readonly kind: 'route-to' | 'reply-to' | 'dup-to' | 'fastroute';
  readonly targets: readonly { readonly interface: string; readonly address: Prefix | null }[];
  readonly pool: PfPool;
}

export interface PfTagged {
  readonly negated: boolean;
  readonly name: string;
}

interface PfRuleBase {
  readonly line: number;
  readonly interfaces: readonly PfInterfaceSpec[] | null;
  readonly family: Family | null;
  /** IP protocol numbers (tcp 6, udp 17, icmp 1, icmp6 58, …); null: any. */
  readonly protocols: readonly number[] | null;
  readonly from: PfEndpoint;
  readonly to: PfEndpoint;
}

/** What filter and anchor rules share beyond matching (F93 parse.y filter_opts). */
interface PfFilterOptions {
  readonly tag: string | null;
  readonly tagged: PfTagged | null;
  readonly label: string | null;
  /** `probability 20%`, as a fraction; null: always. */
  readonly probability: number | null;
  /** `tos 0x10`; null: any. */
  readonly tos: number | null;
  readonly rtable: number | null;
}

export interface PfFilterRule extends PfRuleBase, PfFilterOptions {
  readonly kind: 'filter';
  readonly action: 'pass' | 'block';
  /** null on pass rules. */
  readonly blockPolicy: PfBlockPolicy | null;
  readonly direction: PfDirection | null;
  readonly log: PfLog | null;
  readonly quick: boolean;
  readonly route: PfRoute | null;
  /** `flags S/SA`; `any` for `flags any`; null: unspecified (pass rules default to S/SA). */
  readonly flags: { readonly set: string; readonly mask: string } | 'any' | null;
  readonly icmpTypes: readonly PfIcmpType[] | null;
  readonly state: PfStateMode | null;
  readonly stateBinding: PfStateBinding | null;
  /**
   * The other state options, as pfctl prints them, in its order (F93 pfctl_parser.c print_rule:
   * max, no-sync, source-track, max-src-states, max-src-conn, max-src-conn-rate, max-src-nodes,
   * overload, sloppy, pflow, timeouts); the model keeps and prints them but does not act on them.
   */
  readonly stateOptions: readonly string[];
  readonly allowOpts: boolean;
  /** `fragment`: the rule matches fragments only (F93 PFRULE_FRAGMENT). */
  readonly fragment: boolean;
}

export interface PfRedirect {
  readonly hosts: readonly PfAddress[];
  readonly port: PfPort | null;
  readonly staticPort: boolean;
  readonly pool: PfPool;
}

/** `[no] nat|rdr|binat [pass] …`: no `label` in this grammar (NOTES §1, F93 parse.y:3861). */
export interface PfTranslationRule extends PfRuleBase {
  readonly kind: 'nat' | 'rdr' | 'binat';
  readonly no: boolean;
  readonly pass: boolean;
  readonly log: PfLog | null;
  readonly tag: string | null;
  readonly tagged: PfTagged | null;
  readonly redirect: PfRedirect | null;
}

export type PfAnchorRuleset = 'filter' | 'nat' | 'rdr' | 'binat' | 'scrub' | 'dummynet';

/** `anchor "name[/*]"` and its nat-/rdr-/binat-/scrub-/dummynet- forms (pf.conf.5:2913-2921). */
export interface PfAnchorRule extends PfRuleBase {
  readonly kind: 'anchor';
  readonly ruleset: PfAnchorRuleset;
  /** The anchor path as written, without a trailing `/*`. */
  readonly name: string;
  readonly wildcard: boolean;
  readonly direction: PfDirection | null;
  readonly quick: boolean;
  readonly tagged: PfTagged | null;
  readonly label: string | null;
}

/**
 * A `[no] scrub` rule (F93 parse.y scrubrule, scrub_opts). Its fragment handling decides whether
 * fragments are reassembled before filtering (XNU pf_norm.c pf_normalize_ip).
 */
export interface PfScrubRule extends PfRuleBase {
  readonly kind: 'scrub';
  readonly no: boolean;
  readonly direction: PfDirection | null;
  readonly log: PfLog | null;
  /** `fragment reassemble` (the default), `fragment crop`, `fragment drop-ovl`. */
  readonly fragments: 'reassemble' | 'crop' | 'drop-ovl';
  /** The other options as pfctl prints them (`no-df`, `min-ttl 3`, `max-mss 1440`, ...). */
  readonly options: readonly string[];
}

export type PfRule = PfFilterRule | PfTranslationRule | PfAnchorRule | PfScrubRule;

export interface PfTableEntry {
  readonly negated: boolean;
  readonly prefix: Prefix;
}

export interface PfTableDefinition {
  readonly line: number;
  readonly name: string;
  readonly persist: boolean;
  readonly constant: boolean;
  readonly counters: boolean;
  /** Entries as written: addresses, or interface names and host names resolved at load. */
  readonly entries: readonly PfTableItem[];
  readonly files: readonly string[];
}

/** One entry of a table as written (F93 parse.y table_opt: host_list of plain addresses). */
export interface PfTableItem {
  readonly negated: boolean;
  readonly address: PfAddress;
}

export interface PfLoadAnchor {
  readonly line: number;
  readonly anchor: string;
  readonly file: string;
}

export interface PfOption {
  readonly line: number;
  readonly name: string;
  /** The words after the option name, as written. */
  readonly value: readonly string[];
}

/** A parsed pf.conf (or anchor file), in file order. */
export interface PfConf {
  readonly options: readonly PfOption[];
  readonly tables: readonly PfTableDefinition[];
  readonly rules: readonly PfRule[];
  readonly loadAnchors: readonly PfLoadAnchor[];
}

/** A problem pfctl would print as `file:line: message`. */
export interface PfConfProblem {
  readonly file: string;
  readonly line: number;
  readonly message: string;
}

/** One kernel rule: a parsed rule with every list expanded (F93 pfctl_parser.c expand_rule). */
export interface PfKernelEndpoint {
  readonly negated: boolean;
  readonly address: PfAddress;
  readonly port: PfPort | null;
}

interface PfKernelBase {
  readonly interface: PfInterfaceSpec | null;
  readonly family: Family | null;
  readonly protocol: number | null;
  readonly from: PfKernelEndpoint;
  readonly to: PfKernelEndpoint;
  /** The source line of the rule it was expanded from, for messages. */
  readonly line: number;
}

export interface PfKernelFilterRule extends PfKernelBase, PfFilterOptions {
  readonly kind: 'filter';
  readonly action: 'pass' | 'block';
  readonly blockPolicy: PfBlockPolicy | null;
  readonly direction: PfDirection | null;
  readonly log: PfLog | null;
  readonly quick: boolean;
  readonly route: PfRoute | null;
  readonly flags: { readonly set: string; readonly mask: string } | null;
  readonly icmpType: PfIcmpType | null;
  readonly state: PfStateMode;
  readonly stateBinding: PfStateBinding | null;
  readonly stateOptions: readonly string[];
  readonly allowOpts: boolean;
  readonly fragment: boolean;
}

export interface PfKernelTranslationRule extends PfKernelBase {
  readonly kind: 'nat' | 'rdr' | 'binat';
  readonly no: boolean;
  readonly pass: boolean;
  readonly log: PfLog | null;
  readonly tag: string | null;
  readonly tagged: PfTagged | null;
  readonly redirect: PfRedirect | null;
}

export interface PfKernelAnchorRule extends PfKernelBase {
  readonly kind: 'anchor';
  readonly ruleset: PfAnchorRuleset;
  /** Absolute anchor path (relative names resolved against the anchor holding the rule). */
  readonly path: string;
  /** The name as written (what `pfctl -sr` prints). */
  readonly name: string;
  readonly wildcard: boolean;
  readonly direction: PfDirection | null;
  readonly quick: boolean;
  readonly tagged: PfTagged | null;
  readonly label: string | null;
}

export interface PfKernelScrubRule extends PfKernelBase {
  readonly kind: 'scrub';
  readonly no: boolean;
  readonly direction: PfDirection | null;
  readonly log: PfLog | null;
  readonly fragments: 'reassemble' | 'crop' | 'drop-ovl';
  readonly options: readonly string[];
}

export type PfKernelRule =
  PfKernelFilterRule | PfKernelTranslationRule | PfKernelAnchorRule | PfKernelScrubRule;

/** The rulesets of one anchor as the kernel holds them (pfvar.h PF_RULESET_*). */
export interface PfKernelRulesets {
  readonly scrub: readonly (PfKernelScrubRule | PfKernelAnchorRule)[];
  readonly filter: readonly (PfKernelFilterRule | PfKernelAnchorRule)[];
  readonly nat: readonly (PfKernelTranslationRule | PfKernelAnchorRule)[];
  readonly rdr: readonly (PfKernelTranslationRule | PfKernelAnchorRule)[];
  readonly binat: readonly (PfKernelTranslationRule | PfKernelAnchorRule)[];
  readonly dummynet: readonly PfKernelAnchorRule[];
}

export type PfRulesetName = keyof PfKernelRulesets;

export const PF_RULESET_NAMES: readonly PfRulesetName[] = [
  'scrub',
  'filter',
  'nat',
  'rdr',
  'binat',
  'dummynet',
];

/**
 * getprotobyname(3) for the model: the names of /etc/protocols (IANA's numbers) a ruleset is
 * likely to name; another name is "unknown protocol", as pfctl says of a name it cannot find.
 */
export const PROTOCOL_NUMBERS: Readonly<Record<string, number>> = {
  ip: 0,
  icmp: 1,
  igmp: 2,
  ggp: 3,
  ipencap: 4,
  ipip: 4,
  tcp: 6,
  egp: 8,
  pup: 12,
  udp: 17,
  idp: 22,
  ipv6: 41,
  'ipv6-route': 43,
  'ipv6-frag': 44,
  rsvp: 46,
  gre: 47,
  esp: 50,
  ah: 51,
  icmp6: 58,
  'ipv6-icmp': 58,
  'ipv6-nonxt': 59,
  'ipv6-opts': 60,
  ospf: 89,
  etherip: 97,
  encap: 98,
  pim: 103,
  ipcomp: 108,
  vrrp: 112,
  carp: 112,
  l2tp: 115,
  sctp: 132,
  udplite: 136,
  pfsync: 240,
};

/** The name pfctl prints for a protocol number (getprotobynumber), else the number. */
export function formatProtocol(protocol: number): string {
  return PROTOCOL_NAMES.get(protocol) ?? String(protocol);
}

// /etc/protocols lists the canonical name first: `ipv6-icmp` for 58, `vrrp`... for 112.
const CANONICAL = new Set(['icmp6', 'ipip', 'carp']);
const PROTOCOL_NAMES = new Map(
  Object.entries(PROTOCOL_NUMBERS)
    .filter(([name]) => !CANONICAL.has(name))
    .map(([name, n]) => [n, name] as const),
);
