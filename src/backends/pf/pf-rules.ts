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
  | { readonly kind: 'self' }
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
    }
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
}

export type PfDirection = 'in' | 'out';
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

export interface PfFilterRule extends PfRuleBase {
  readonly kind: 'filter';
  readonly action: 'pass' | 'block';
  readonly blockPolicy: 'drop' | 'return' | null;
  readonly direction: PfDirection | null;
  readonly log: boolean;
  readonly quick: boolean;
  readonly route: PfRoute | null;
  /** `flags S/SA`; `any` for `flags any`; null: unspecified (pass rules default to S/SA). */
  readonly flags: { readonly set: string; readonly mask: string } | 'any' | null;
  readonly icmpTypes: readonly PfIcmpType[] | null;
  readonly state: PfStateMode | null;
  readonly stateBinding: PfStateBinding | null;
  readonly tag: string | null;
  readonly tagged: PfTagged | null;
  readonly label: string | null;
}

export interface PfRedirect {
  readonly hosts: readonly PfAddress[];
  readonly port: PfPort | null;
  readonly staticPort: boolean;
}

/** `[no] nat|rdr|binat [pass] …`: no `label` in this grammar (NOTES §1, F93 parse.y:3861). */
export interface PfTranslationRule extends PfRuleBase {
  readonly kind: 'nat' | 'rdr' | 'binat';
  readonly no: boolean;
  readonly pass: boolean;
  readonly log: boolean;
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
  readonly tagged: PfTagged | null;
  readonly label: string | null;
}

/** A `scrub` rule, kept as its words: egressguard never emits one, the stock files do not either. */
export interface PfScrubRule extends PfRuleBase {
  readonly kind: 'scrub';
  readonly direction: PfDirection | null;
  readonly options: string;
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
  readonly entries: readonly PfTableEntry[];
  readonly files: readonly string[];
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

export interface PfKernelFilterRule extends PfKernelBase {
  readonly kind: 'filter';
  readonly action: 'pass' | 'block';
  readonly blockPolicy: 'drop' | 'return' | null;
  readonly direction: PfDirection | null;
  readonly log: boolean;
  readonly quick: boolean;
  readonly route: PfRoute | null;
  readonly flags: { readonly set: string; readonly mask: string } | null;
  readonly icmpType: PfIcmpType | null;
  readonly state: PfStateMode;
  readonly stateBinding: PfStateBinding | null;
  readonly tag: string | null;
  readonly tagged: PfTagged | null;
  readonly label: string | null;
}

export interface PfKernelTranslationRule extends PfKernelBase {
  readonly kind: 'nat' | 'rdr' | 'binat';
  readonly no: boolean;
  readonly pass: boolean;
  readonly log: boolean;
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
  readonly tagged: PfTagged | null;
  readonly label: string | null;
}

export interface PfKernelScrubRule extends PfKernelBase {
  readonly kind: 'scrub';
  readonly direction: PfDirection | null;
  readonly options: string;
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

export const PROTOCOL_NUMBERS: Readonly<Record<string, number>> = {
  icmp: 1,
  igmp: 2,
  tcp: 6,
  udp: 17,
  gre: 47,
  esp: 50,
  ah: 51,
  icmp6: 58,
  'ipv6-icmp': 58,
  sctp: 132,
};

/** The name pfctl prints for a protocol number (getprotobynumber), else the number. */
export function formatProtocol(protocol: number): string {
  switch (protocol) {
    case 1:
      return 'icmp';
    case 2:
      return 'igmp';
    case 6:
      return 'tcp';
    case 17:
      return 'udp';
    case 47:
      return 'gre';
    case 50:
      return 'esp';
    case 51:
      return 'ah';
    case 58:
      return 'ipv6-icmp';
    case 132:
      return 'sctp';
    default:
      return String(protocol);
  }
}
