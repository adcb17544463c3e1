import {
  formatAddress,
  parseAddress,
  prefixEnd,
  type Family,
  type Prefix,
} from '../../src/core/index.js';
import {
  listChildAnchors,
  type PfAnchorLoad,
  type PfInterfaces,
} from '../../src/backends/pf/expand-pf-rules.js';
import { liveAddresses, maskPrefix } from '../../src/backends/pf/interface-addresses.js';
import type {
  PfAddress,
  PfDirection,
  PfKernelAnchorRule,
  PfKernelEndpoint,
  PfKernelFilterRule,
  PfKernelRule,
  PfKernelScrubRule,
  PfKernelTranslationRule,
  PfRulesetName,
  PfStateBinding,
  PfTagged,
} from '../../src/backends/pf/pf-rules.js';

/**
 * A pf evaluator: what pf does with one packet, given the rulesets the kernel holds. Written from
 * pf's documented semantics (F93 pf.conf(5), NOTES.md §6), independently of any compiler:
 *
 * - a packet that matches a state passes without rule evaluation, translated as the state says
 *   (pf.conf(5) STATEFUL FILTERING);
 * - translation first, first match wins, `no nat` ends the search (pf.conf.5:1180-1190): `nat` on
 *   the way out, `rdr` on the way in, only on the named interface (:1200);
 * - filtering sees the packet AFTER translation: "Since translation occurs before filtering the
 *   filter engine will see packets as they look after any addresses and ports have been
 *   translated" (pf.conf(5) TRANSLATION, F93 pf.conf.5:1116-1124) — so on the uplink a NATed VM
 *   packet carries the host's address, not the VM's;
 * - filtering: the last matching rule wins, `quick` ends evaluation, also from inside an anchor
 *   (pf.conf.5:1250, :1433-1437); `anchor "x/*"` evaluates x's children in name order
 *   (pf.conf.5:2562-2565); the default is pass;
 * - `tag` marks the packet whenever its rule matches, even if it is not the last match, and
 *   `tagged` tests the tag set so far (pf.conf.5:1831-1841); the tag stays on the packet from
 *   `in` to `out`;
 * - pass rules keep state unless `no state`; states are floating unless `(if-bound)` or
 *   `set state-policy if-bound` (pf.conf.5:511-519).
 *
 * - fragments meet the scrub ruleset first (XNU bsd/net/pf_norm.c pf_normalize_ip and
 *   pf_normalize_ip6): its first matching rule, anchors stepped into, decides; a `scrub` rule
 *   with `fragment reassemble` (the default) reassembles the datagram, which is then filtered
 *   whole; no match, `no scrub`, `fragment crop` or `fragment drop-ovl` leave the fragments as
 *   they are, and XNU pf.c pf_test hands each to pf_test_fragment: no state lookup, no
 *   translation, and a filter ruleset in which a rule with a port (TCP, UDP), with TCP flags
 *   (every stateful TCP pass rule has `flags S/SA`) or with an ICMP type is passed over, `tagged`
 *   is tested but no `tag` is set, and no state is created;
 * - `(if)` follows the interface's addresses as the kernel keeps them (interface-addresses.ts
 *   liveAddresses; `(self)` is empty on macOS); `self` and a bare interface name were resolved
 *   by pfctl when the rules loaded (expand-pf-rules.ts);
 * - a NAT pool of several addresses (`(en0)` with aliases) is round-robin in ascending address
 *   order (XNU pf.c pf_map_addr PF_POOL_ROUNDROBIN over the interface's table, which
 *   pfr_pool_get walks in radix order); `(en0:0)` is the first address alone.
 *
 * Not modelled (named so nobody relies on them): skip steps (real pf may skip rules, so its
 * Evaluations counters can be lower), NAT source-port allocation (the model keeps the source port,
 * as `static-port` would), binat, dummynet, scrub options other than fragment handling,
 * `no-route`/`urpf-failed` (match nothing), `:peer`, TCP state tracking beyond "a state exists";
 * a rule with `probability` or `tos` that a packet reaches throws "not modelled".
 */

export interface PfKernelView {
  /** Every anchor's loaded rulesets and tables, '' being the main ruleset. */
  readonly anchors: ReadonlyMap<string, PfAnchorLoad>;
  readonly interfaces: PfInterfaces;
  /** `set skip on …`: packets on these interfaces are not filtered. */
  readonly skip: readonly string[];
  /** `set state-policy`; floating by default. */
  readonly statePolicy: PfStateBinding;
}

export interface PfPacket {
  readonly direction: PfDirection;
  readonly interface: string;
  readonly family: Family;
  readonly source: number | bigint;
  readonly destination: number | bigint;
  /** IP protocol number: tcp 6, udp 17, icmp 1, icmp6 58. */
  readonly protocol: number;
  readonly sourcePort?: number;
  readonly destinationPort?: number;
  readonly icmpType?: number;
  readonly icmpCode?: number;
  /** TCP flags set, e.g. `S` for a connection's first packet (the default). */
  readonly tcpFlags?: string;
  /** A tag set by an earlier pass (the `in` side of a forwarded packet). */
  readonly tag?: string | null;
  readonly bytes?: number;
  /**
   * A fragment of a fragmented datagram (the fields above are the datagram's): `first` and
   * `non-first` belong to a datagram whose fragments all arrive, `alone` to one that never
   * completes. pf treats the first and a later one alike (pf_test_fragment reads no port).
   */
  readonly fragment?: 'first' | 'non-first' | 'alone';
}

export interface PfRuleRef {
  readonly anchor: string;
  readonly ruleset: PfRulesetName;
  readonly index: number;
}

export interface PfStateEndpoint {
  readonly address: string;
  readonly port: number;
}

/** A state entry; JSON-safe so a pfctl model can persist it. */
export interface PfState {
  readonly id: number;
  /** null: floating (matches on any interface); else the interface it is bound to. */
  readonly boundTo: string | null;
  readonly createdOn: string;
  readonly direction: PfDirection;
  readonly family: Family;
  readonly protocol: number;
  /** pf's three keys: lan (inside), gwy (after translation), ext (outside). */
  readonly lan: PfStateEndpoint;
  readonly gwy: PfStateEndpoint;
  readonly ext: PfStateEndpoint;
  readonly rule: PfRuleRef | null;
  readonly translationRule: PfRuleRef | null;
  readonly tag: string | null;
  readonly routeTo: PfRouteTarget | null;
}

export interface PfRouteTarget {
  readonly interface: string;
  /**
   * The next hop written with it (`route-to (utun3 10.8.0.1)`); null for the bare form, whose
   * zero pool address leaves the packet's own destination as the next hop (XNU pf.c pf_route:
   * `if (!PF_AZERO(&naddr, AF_INET))`). The packet's addresses are the same either way.
   */
  readonly address: string | null;
}

export interface PfTranslation {
  readonly kind: 'nat' | 'rdr';
  readonly rule: PfRuleRef | null;
  readonly source: PfStateEndpoint;
  readonly destination: PfStateEndpoint;
}

export interface PfEvaluation {
  readonly verdict: 'pass' | 'block';
  /** `block return`: a RST / ICMP unreachable is sent back. */
  readonly returned: boolean;
  /** `reassembly`: a fragment held for a datagram that never completes, then dropped. */
  readonly decidedBy: 'skip' | 'state' | 'rule' | 'default' | 'reassembly';
  /**
   * For a fragment: `reassembled` (a scrub rule reassembled its datagram, filtered whole) or
   * `unreassembled` (filtered as a fragment, pf_test_fragment); null for any other packet.
   */
  readonly fragment: 'reassembled' | 'unreassembled' | null;
  /** The deciding filter rule (the last match, or the quick one). */
  readonly rule: PfRuleRef | null;
  readonly label: string | null;
  readonly translation: PfTranslation | null;
  readonly tag: string | null;
  readonly routeTo: PfRouteTarget | null;
  readonly stateMatched: PfState | null;
  readonly stateCreated: PfState | null;
  /** The packet as it leaves this hook (after translation). */
  readonly packet: PfPacket;
  /** Every rule whose criteria were tested, in order: the Evaluations counters. */
  readonly evaluated: readonly PfRuleRef[];
}

/** The states pf holds; the evaluator looks up and inserts. */
export interface PfStateTable {
  readonly states: PfState[];
  nextId: number;
  /** Round-robin NAT pools' next position, by rule (`anchor:ruleset:index`). */
  readonly pools?: Record<string, number>;
}

export function createPfStateTable(): PfStateTable {
  return { states: [], nextId: 1, pools: {} };
}

/** Looks a rule up by reference. */
export function findPfRule(view: PfKernelView, ref: PfRuleRef): PfKernelRule | undefined {
  return view.anchors.get(ref.anchor)?.rulesets[ref.ruleset][ref.index];
}

/** Evaluates one packet at one hook (in or out on one interface), creating a state on pass. */
export function evaluatePfPacket(
  view: PfKernelView,
  states: PfStateTable,
  packet: PfPacket,
): PfEvaluation {
  const evaluated: PfRuleRef[] = [];
  const base = {
    returned: false,
    translation: null,
    stateMatched: null,
    stateCreated: null,
    rule: null,
    label: null,
    routeTo: null,
    fragment: null,
    evaluated,
  };
  if (view.skip.includes(packet.interface)) {
    return { ...base, verdict: 'pass', decidedBy: 'skip', tag: packet.tag ?? null, packet };
  }

  if (packet.fragment !== undefined) {
    const scrub = findScrub(view, packet, evaluated);
    if (scrub === null || scrub.rule.no || scrub.rule.fragments !== 'reassemble') {
      return evaluateFragment(view, packet, evaluated);
    }
    if (packet.fragment === 'alone') {
      // Held in the reassembly queue until its timer runs out, then freed (pf_reassemble
      // returns NULL: PF_DROP).
      return {
        ...base,
        verdict: 'block',
        decidedBy: 'reassembly',
        rule: scrub.ref,
        fragment: 'reassembled',
        tag: packet.tag ?? null,
        packet,
      };
    }
    const whole: PfPacket = { ...packet };
    Reflect.deleteProperty(whole, 'fragment');
    const result = evaluatePfPacket(view, states, whole);
    return { ...result, fragment: 'reassembled', evaluated: [...evaluated, ...result.evaluated] };
  }

  const state = findState(states, packet);
  if (state !== null) return passByState(state, packet, evaluated);

  // Translation first (pf.conf.5:1180-1190).
  let translation: PfTranslation | null = null;
  let translated = packet;
  let tag = packet.tag ?? null;
  const translationRulesets: ('nat' | 'rdr')[] = packet.direction === 'out' ? ['nat'] : ['rdr'];
  for (const ruleset of translationRulesets) {
    const found = findTranslation(view, ruleset, packet, tag, evaluated);
    if (found === null) continue;
    if (found.rule.tag !== null) tag = found.rule.tag;
    if (!found.rule.no) {
      const applied = applyTranslation(view, states, found.rule, found.ref, packet);
      if (applied !== null) {
        translation = applied.translation;
        translated = applied.packet;
      }
    }
    break;
  }

  // Filtering, on the translated packet.
  const context: FilterContext = {
    view,
    packet: translated,
    tag,
    last: null,
    evaluated,
    asFragment: false,
  };
  evaluateRuleset(context, '', 'filter');
  const last = context.last;
  const deciding = last === null ? null : (findPfRule(view, last) as PfKernelFilterRule);
  const verdict = deciding === null ? 'pass' : deciding.action;
  tag = context.tag;
  const routeTo =
    deciding !== null && deciding.action === 'pass' && deciding.route?.kind === 'route-to'
      ? routeTarget(deciding)
      : null;

  if (verdict === 'block') {
    return {
      ...base,
      verdict,
      returned: returns(deciding),
      decidedBy: 'rule',
      rule: last,
      label: deciding?.label ?? null,
      tag,
      packet,
    };
  }

  // A state is created for stateful pass rules, and for every translated connection "as long as
  // they are not blocked by the filtering section" (pf.conf(5) TRANSLATION).
  let created: PfState | null = null;
  const keepsState = deciding === null ? false : deciding.state !== 'no';
  if (keepsState || translation !== null) {
    const binding = deciding?.stateBinding ?? view.statePolicy;
    created = insertState(states, {
      boundTo: binding === 'if-bound' ? packet.interface : null,
      createdOn: packet.interface,
      packet,
      translated,
      rule: last,
      translationRule: translation?.rule ?? null,
      tag,
      routeTo,
    });
  }
  return {
    ...base,
    verdict: 'pass',
    decidedBy: deciding === null ? 'default' : 'rule',
    rule: last,
    label: deciding?.label ?? null,
    translation,
    tag,
    routeTo,
    stateCreated: created,
    packet: { ...translated, tag },
  };
}

/** A block rule that answers (`return`, `return-rst`, `return-icmp`) rather than drops. */
function returns(rule: PfKernelFilterRule | null): boolean {
  return (
    rule?.blockPolicy !== null &&
    rule?.blockPolicy !== undefined &&
    rule.blockPolicy.kind !== 'drop'
  );
}

/**
 * The scrub rule that decides a fragment: the first match of the main scrub ruleset, anchors
 * stepped into (XNU pf_norm.c pf_normalize_ip: interface, direction, family, protocol (IPv4
 * only: pf_normalize_ip6 does not test it), source and destination address; no port, no tag).
 */
function findScrub(
  view: PfKernelView,
  packet: PfPacket,
  evaluated: PfRuleRef[],
): { rule: PfKernelScrubRule; ref: PfRuleRef } | null {
  const walk = (anchor: string): { rule: PfKernelScrubRule; ref: PfRuleRef } | null => {
    const rules = view.anchors.get(anchor)?.rulesets.scrub ?? [];
    for (let index = 0; index < rules.length; index++) {
      const rule = rules[index] as PfKernelScrubRule | PfKernelAnchorRule;
      const ref: PfRuleRef = { anchor, ruleset: 'scrub', index };
      evaluated.push(ref);
      if (rule.direction !== null && rule.direction !== packet.direction) continue;
      if (rule.interface !== null) {
        if ((rule.interface.name === packet.interface) === rule.interface.negated) continue;
      }
      if (rule.family !== null && rule.family !== packet.family) continue;
      if (packet.family === 4 && rule.protocol !== null && rule.protocol !== packet.protocol) {
        continue;
      }
      if (!matchesAddressOf(view, anchor, rule.from, packet.family, packet.source)) continue;
      if (!matchesAddressOf(view, anchor, rule.to, packet.family, packet.destination)) continue;
      if (rule.kind === 'scrub') return { rule, ref };
      for (const child of anchorTargets(view, rule)) {
        const found = walk(child);
        if (found !== null) return found;
      }
    }
    return null;
  };
  return walk('');
}

/**
 * A fragment that was not reassembled (XNU pf.c pf_test → pf_test_fragment): the filter ruleset
 * without states or translation, rules that need the transport header passed over, `tag` not
 * applied; a pass keeps its route-to (pf_test sends it by pf_route after the verdict).
 */
function evaluateFragment(
  view: PfKernelView,
  packet: PfPacket,
  evaluated: PfRuleRef[],
): PfEvaluation {
  const context: FilterContext = {
    view,
    packet,
    tag: packet.tag ?? null,
    last: null,
    evaluated,
    asFragment: true,
  };
  evaluateRuleset(context, '', 'filter');
  const last = context.last;
  const deciding = last === null ? null : (findPfRule(view, last) as PfKernelFilterRule);
  const verdict = deciding === null ? 'pass' : deciding.action;
  const tag = packet.tag ?? null;
  const routeTo =
    deciding !== null && verdict === 'pass' && deciding.route?.kind === 'route-to'
      ? routeTarget(deciding)
      : null;
  return {
    verdict,
    // pf_test_fragment returns PF_DROP for every block: no RST, no ICMP is sent for a fragment.
    returned: false,
    decidedBy: deciding === null ? 'default' : 'rule',
    rule: last,
    label: deciding?.label ?? null,
    translation: null,
    tag,
    routeTo,
    stateMatched: null,
    stateCreated: null,
    fragment: 'unreassembled',
    packet: { ...packet, tag },
    evaluated,
  };
}

export interface PfForwarding {
  readonly inbound: PfEvaluation;
  /** null when the packet was blocked on the way in. */
  readonly outbound: PfEvaluation | null;
  readonly verdict: 'pass' | 'block';
  /** The interface it leaves by: route-to's target, else the routing decision. */
  readonly egress: string;
  /** The packet on the wire after pf (translated), when it passes. */
  readonly leaving: PfPacket | null;
  /**
   * The inbound rule passed it with `route-to` an interface that does not exist: pf_route drops
   * it before any outbound evaluation (upstream pf.c pf_route: `if (ifp == NULL) goto bad`).
   */
  readonly routeFailed: boolean;
}

/**
 * The path of a forwarded packet through pf: `in` on the ingress interface with its original
 * addresses, then `out` on the egress interface, where `nat` translates it before the outbound
 * filter rules see it (pf.conf(5) TRANSLATION). `route-to` on the inbound pass rule sends it to
 * its target interface instead of the routing decision, and pf evaluates it `out` there (F93
 * pf.c pf_route → pf_test(PF_OUT)), or drops it when that interface does not exist. The tag set
 * on the way in is still on it on the way out.
 */
export function evaluateForwardedPfPacket(
  view: PfKernelView,
  states: PfStateTable,
  packet: Omit<PfPacket, 'direction' | 'interface'> & {
    readonly ingress: string;
    /** The routing decision: where the packet would leave without route-to. */
    readonly egress: string;
  },
): PfForwarding {
  const { ingress, egress: routed, ...rest } = packet;
  const inbound = evaluatePfPacket(view, states, { ...rest, direction: 'in', interface: ingress });
  if (inbound.verdict === 'block') {
    return {
      inbound,
      outbound: null,
      verdict: 'block',
      egress: routed,
      leaving: null,
      routeFailed: false,
    };
  }
  const egress = inbound.routeTo?.interface ?? routed;
  // route-to names an interface, and the kernel rule keeps the name (pfi_kif_get creates a kif
  // for a name that does not exist yet); only an existing interface has an ifp to send by. A
  // utun that is gone (a VPN disconnected) is such a name.
  if (inbound.routeTo !== null && !view.interfaces.has(inbound.routeTo.interface)) {
    return { inbound, outbound: null, verdict: 'block', egress, leaving: null, routeFailed: true };
  }
  const outbound = evaluatePfPacket(view, states, {
    ...inbound.packet,
    direction: 'out',
    interface: egress,
  });
  return {
    inbound,
    outbound,
    verdict: outbound.verdict,
    egress,
    leaving: outbound.verdict === 'pass' ? outbound.packet : null,
    routeFailed: false,
  };
}

interface FilterContext {
  readonly view: PfKernelView;
  readonly packet: PfPacket;
  tag: string | null;
  last: PfRuleRef | null;
  readonly evaluated: PfRuleRef[];
  /** pf_test_fragment's matching (see evaluateFragment), else pf_test_rule's. */
  readonly asFragment: boolean;
}

/** Evaluates one anchor's filter ruleset; returns true when a quick rule ended evaluation. */
function evaluateRuleset(context: FilterContext, anchor: string, ruleset: 'filter'): boolean {
  const load = context.view.anchors.get(anchor);
  if (load === undefined) return false;
  const rules = load.rulesets[ruleset];
  for (let index = 0; index < rules.length; index++) {
    const rule = rules[index] as PfKernelFilterRule | PfKernelAnchorRule;
    const ref: PfRuleRef = { anchor, ruleset, index };
    context.evaluated.push(ref);
    if (!matchesRule(context.view, anchor, rule, context.packet, context.tag, context.asFragment)) {
      continue;
    }
    if (rule.kind === 'anchor') {
      for (const child of anchorTargets(context.view, rule)) {
        if (evaluateRuleset(context, child, ruleset)) return true;
      }
      continue;
    }
    if (rule.tag !== null && !context.asFragment) context.tag = rule.tag;
    context.last = ref;
    if (rule.quick) return true;
  }
  return false;
}

/** First matching translation rule across anchors (no quick: the first match decides). */
function findTranslation(
  view: PfKernelView,
  ruleset: 'nat' | 'rdr',
  packet: PfPacket,
  tag: string | null,
  evaluated: PfRuleRef[],
): { rule: PfKernelTranslationRule; ref: PfRuleRef } | null {
  const walk = (anchor: string): { rule: PfKernelTranslationRule; ref: PfRuleRef } | null => {
    const load = view.anchors.get(anchor);
    if (load === undefined) return null;
    const rules = load.rulesets[ruleset];
    for (let index = 0; index < rules.length; index++) {
      const rule = rules[index] as PfKernelTranslationRule | PfKernelAnchorRule;
      const ref: PfRuleRef = { anchor, ruleset, index };
      evaluated.push(ref);
      if (!matchesRule(view, anchor, rule, packet, tag)) continue;
      if (rule.kind === 'anchor') {
        for (const child of anchorTargets(view, rule)) {
          const found = walk(child);
          if (found !== null) return found;
        }
        continue;
      }
      return { rule, ref };
    }
    return null;
  };
  return walk('');
}

/** The rulesets an anchor rule evaluates: itself, or its children in name order for `x/*`. */
function anchorTargets(view: PfKernelView, rule: PfKernelAnchorRule): string[] {
  if (!rule.wildcard) return [rule.path];
  return listChildAnchors(view.anchors.keys(), rule.path);
}

function matchesRule(
  view: PfKernelView,
  anchor: string,
  rule: PfKernelFilterRule | PfKernelTranslationRule | PfKernelAnchorRule,
  packet: PfPacket,
  tag: string | null,
  asFragment = false,
): boolean {
  if (rule.kind === 'filter' || rule.kind === 'anchor') {
    if (rule.direction !== null && rule.direction !== packet.direction) return false;
  }
  if (rule.interface !== null) {
    const same = rule.interface.name === packet.interface;
    if (same === rule.interface.negated) return false;
  }
  if (rule.family !== null && rule.family !== packet.family) return false;
  if (rule.protocol !== null && rule.protocol !== packet.protocol) return false;
  if (asFragment) {
    // pf_test_fragment: addresses only; a rule that needs the transport header is passed over.
    if (!matchesAddressOf(view, anchor, rule.from, packet.family, packet.source)) return false;
    if (!matchesAddressOf(view, anchor, rule.to, packet.family, packet.destination)) return false;
    if (rule.kind === 'filter') {
      notModelled(rule);
      const ports = rule.from.port !== null || rule.to.port !== null;
      if (packet.protocol === 17 && ports) return false;
      if (packet.protocol === 6 && (ports || rule.flags !== null)) return false;
      if ((packet.protocol === 1 || packet.protocol === 58) && rule.icmpType !== null) {
        return false;
      }
    }
    return matchesTagged(rule.tagged, tag);
  }
  if (!matchesEndpoint(view, anchor, rule.from, packet, packet.source, packet.sourcePort))
    return false;
  if (!matchesEndpoint(view, anchor, rule.to, packet, packet.destination, packet.destinationPort))
    return false;
  if (rule.kind === 'filter') {
    // pf_test_rule: a `fragment` rule is for fragments only (PFRULE_FRAGMENT).
    if (rule.fragment) return false;
    notModelled(rule);
    if (rule.flags !== null && packet.protocol === 6) {
      const flags = packet.tcpFlags ?? 'S';
      // TCP flag letters are ASCII: splitting by code unit is exact.
      const masked = rule.flags.mask
        .split('')
        .filter((f) => flags.includes(f))
        .sort()
        .join('');
      if (masked !== rule.flags.set.split('').sort().join('')) return false;
    }
    if (rule.icmpType !== null) {
      if (packet.icmpType !== rule.icmpType.type) return false;
      if (rule.icmpType.code !== null && packet.icmpCode !== rule.icmpType.code) return false;
    }
  }
  return matchesTagged(rule.tagged, tag);
}

/** Refuses, rather than guesses, what the evaluator does not model when a packet reaches it. */
function notModelled(rule: PfKernelFilterRule): void {
  if (rule.probability !== null) {
    throw new Error(
      `not modelled: probability (line ${rule.line}): the evaluator is deterministic`,
    );
  }
  if (rule.tos !== null) {
    throw new Error(`not modelled: tos (line ${rule.line}): packets carry no TOS here`);
  }
}

function matchesAddressOf(
  view: PfKernelView,
  anchor: string,
  endpoint: PfKernelEndpoint,
  family: Family,
  address: number | bigint,
): boolean {
  return matchesAddress(view, anchor, endpoint.address, family, address) !== endpoint.negated;
}

function matchesTagged(tagged: PfTagged | null, tag: string | null): boolean {
  if (tagged === null) return true;
  return (tag === tagged.name) !== tagged.negated;
}

function matchesEndpoint(
  view: PfKernelView,
  anchor: string,
  endpoint: PfKernelEndpoint,
  packet: PfPacket,
  address: number | bigint,
  port: number | undefined,
): boolean {
  const hit = matchesAddress(view, anchor, endpoint.address, packet.family, address);
  if (hit === endpoint.negated) return false;
  if (endpoint.port === null) return true;
  if (port === undefined) return false;
  const { op, low, high } = endpoint.port;
  switch (op) {
    case '=':
      return port === low;
    case '!=':
      return port !== low;
    case '<':
      return port < low;
    case '<=':
      return port <= low;
    case '>':
      return port > low;
    case '>=':
      return port >= low;
    case '><':
      return port > low && port < high;
    case '<>':
      return port < low || port > high;
    case ':':
      return port >= low && port <= high;
  }
}

function matchesAddress(
  view: PfKernelView,
  anchor: string,
  address: PfAddress,
  family: Family,
  value: number | bigint,
): boolean {
  switch (address.kind) {
    case 'any':
      return true;
    case 'prefix':
      return inPrefix(address.prefix, family, value);
    case 'table':
      return matchesTable(view, anchor, address.name, family, value);
    case 'self':
      // pfctl resolved `self` into addresses when the rules loaded (expand-pf-rules.ts): a kernel
      // rule never holds it.
      return false;
    case 'range':
      return (
        address.from.family === family && value >= address.from.start && value <= address.to.start
      );
    case 'interface':
      // A bare name was resolved at load; `(if)` is the kernel's live set (pfi_dynaddr_update).
      return dynamicAddresses(view, address).some((p) => inPrefix(p, family, value));
    case 'no-route':
    case 'urpf-failed':
      return false;
  }
}

/**
 * Table lookup: the anchor's own table, else the main ruleset's table of that name (xnu
 * pf_table.c: an anchor's reference to a table it does not define attaches to the root table).
 * Longest prefix wins; a negated entry (`!addr`) that is the longest match means "no match"
 * (pf.conf(5) TABLES).
 */
function matchesTable(
  view: PfKernelView,
  anchor: string,
  name: string,
  family: Family,
  value: number | bigint,
): boolean {
  const table =
    view.anchors.get(anchor)?.tables.get(name) ?? view.anchors.get('')?.tables.get(name);
  if (table === undefined) return false;
  let best: { length: number; negated: boolean } | null = null;
  for (const entry of table.entries) {
    if (!inPrefix(entry.prefix, family, value)) continue;
    if (best === null || entry.prefix.length > best.length) {
      best = { length: entry.prefix.length, negated: entry.negated };
    }
  }
  return best !== null && !best.negated;
}

function inPrefix(prefix: Prefix, family: Family, value: number | bigint): boolean {
  if (prefix.family !== family) return false;
  return value >= prefix.start && value <= prefixEnd(prefix);
}

function routeTarget(rule: PfKernelFilterRule): PfRouteTarget | null {
  const target = rule.route?.targets[0];
  if (target === undefined) return null;
  return {
    interface: target.interface,
    address:
      target.address === null ? null : formatAddress(target.address.family, target.address.start),
  };
}

function applyTranslation(
  view: PfKernelView,
  states: PfStateTable,
  rule: PfKernelTranslationRule,
  ref: PfRuleRef,
  packet: PfPacket,
): { translation: PfTranslation; packet: PfPacket } | null {
  const redirect = rule.redirect;
  if (redirect === null) return null;
  const pool = redirect.hosts.flatMap((host) => poolAddresses(view, host, packet.family));
  if (pool.length === 0) return null;
  // One address: it; several: round-robin, one step per translation (pf_map_addr).
  const key = `${ref.anchor}:${ref.ruleset}:${ref.index}`;
  const position = states.pools?.[key] ?? 0;
  const target = pool[position % pool.length] as number | bigint;
  if (pool.length > 1 && states.pools !== undefined) states.pools[key] = position + 1;
  let next: PfPacket;
  if (rule.kind === 'nat') {
    next = { ...packet, source: target };
  } else {
    const port = redirect.port === null ? packet.destinationPort : redirect.port.low;
    next = {
      ...packet,
      destination: target,
      ...(port === undefined ? {} : { destinationPort: port }),
    };
  }
  return {
    packet: next,
    translation: {
      kind: rule.kind === 'nat' ? 'nat' : 'rdr',
      rule: ref,
      source: endpointOf(next.family, next.source, next.sourcePort),
      destination: endpointOf(next.family, next.destination, next.destinationPort),
    },
  };
}

/**
 * The addresses a translation pool entry stands for now: an address, or the interface's live
 * addresses for `(if)` / `(if:0)`, in ascending order (the pool's radix table order).
 */
function poolAddresses(
  view: PfKernelView,
  address: PfAddress,
  family: Family,
): (number | bigint)[] {
  if (address.kind === 'prefix') {
    return address.prefix.family === family ? [address.prefix.start] : [];
  }
  if (address.kind === 'interface') {
    return dynamicAddresses(view, address)
      .filter((p) => p.family === family)
      .map((p) => p.start)
      .sort((a, b) => (a < b ? -1 : a > b ? 1 : 0));
  }
  return [];
}

/** What `(if)`, `(if:mod)`, `(if)/mask` hold now (interface-addresses.ts liveAddresses). */
function dynamicAddresses(
  view: PfKernelView,
  address: Extract<PfAddress, { kind: 'interface' }>,
): Prefix[] {
  const live = liveAddresses(view.interfaces, address.name, address.modifier);
  return address.mask === null ? live : live.map((p) => maskPrefix(p, address.mask ?? 0));
}

function endpointOf(
  family: Family,
  address: number | bigint,
  port: number | undefined,
): PfStateEndpoint {
  return { address: formatAddress(family, address), port: port ?? 0 };
}

function sameEndpoint(a: PfStateEndpoint, b: PfStateEndpoint): boolean {
  return a.address === b.address && a.port === b.port;
}

/**
 * pf's state lookup: an inbound packet matches by (ext, gwy), an outbound one by (lan, ext)
 * (the ext_gwy and lan_ext trees of OpenBSD 4.5 pf.c pf_find_state), so a state created in one
 * direction also matches the replies in the other. An if-bound state matches only on its
 * interface; a floating one on any.
 */
function findState(table: PfStateTable, packet: PfPacket): PfState | null {
  const source = endpointOf(packet.family, packet.source, packet.sourcePort);
  const destination = endpointOf(packet.family, packet.destination, packet.destinationPort);
  for (const state of table.states) {
    if (state.family !== packet.family || state.protocol !== packet.protocol) continue;
    if (state.boundTo !== null && state.boundTo !== packet.interface) continue;
    const hit =
      packet.direction === 'in'
        ? sameEndpoint(source, state.ext) && sameEndpoint(destination, state.gwy)
        : sameEndpoint(source, state.lan) && sameEndpoint(destination, state.ext);
    if (hit) return state;
  }
  return null;
}

function passByState(state: PfState, packet: PfPacket, evaluated: PfRuleRef[]): PfEvaluation {
  let next: PfPacket = packet;
  if (packet.direction === 'in') {
    next = withDestination(packet, state.lan);
  } else {
    next = withSource(packet, state.gwy);
  }
  const tag = state.tag ?? packet.tag ?? null;
  return {
    verdict: 'pass',
    returned: false,
    decidedBy: 'state',
    fragment: null,
    rule: state.rule,
    label: null,
    translation: null,
    tag,
    routeTo: packet.direction === state.direction ? state.routeTo : null,
    stateMatched: state,
    stateCreated: null,
    packet: { ...next, tag },
    evaluated,
  };
}

function withSource(packet: PfPacket, endpoint: PfStateEndpoint): PfPacket {
  return {
    ...packet,
    source: parseEndpointAddress(packet.family, endpoint.address),
    sourcePort: endpoint.port,
  };
}

function withDestination(packet: PfPacket, endpoint: PfStateEndpoint): PfPacket {
  return {
    ...packet,
    destination: parseEndpointAddress(packet.family, endpoint.address),
    destinationPort: endpoint.port,
  };
}

function parseEndpointAddress(family: Family, text: string): number | bigint {
  const parsed = parseAddress(text);
  if (parsed?.family !== family) throw new Error(`State address "${text}" is not IPv${family}`);
  return parsed.value;
}

function insertState(
  table: PfStateTable,
  options: {
    boundTo: string | null;
    createdOn: string;
    packet: PfPacket;
    translated: PfPacket;
    rule: PfRuleRef | null;
    translationRule: PfRuleRef | null;
    tag: string | null;
    routeTo: PfRouteTarget | null;
  },
): PfState {
  const { packet, translated } = options;
  const src = endpointOf(packet.family, packet.source, packet.sourcePort);
  const dst = endpointOf(packet.family, packet.destination, packet.destinationPort);
  const translatedSrc = endpointOf(translated.family, translated.source, translated.sourcePort);
  const translatedDst = endpointOf(
    translated.family,
    translated.destination,
    translated.destinationPort,
  );
  // Outbound: lan = original source, gwy = translated source, ext = destination. Inbound:
  // ext = source, gwy = original destination, lan = translated destination.
  const keys =
    packet.direction === 'out'
      ? { lan: src, gwy: translatedSrc, ext: dst }
      : { lan: translatedDst, gwy: dst, ext: src };
  const state: PfState = {
    id: table.nextId++,
    boundTo: options.boundTo,
    createdOn: options.createdOn,
    direction: packet.direction,
    family: packet.family,
    protocol: packet.protocol,
    ...keys,
    rule: options.rule,
    translationRule: options.translationRule,
    tag: options.tag,
    routeTo: options.routeTo,
  };
  table.states.push(state);
  return state;
}
