import { AddressSet, EgressguardError, type Family } from '../../core/index.js';
import {
  assertNever,
  BLANK_STAMP,
  carries,
  type HostClassIR,
  type HostIR,
  type HousekeepingIR,
  type RuleIR,
} from '../../ir/index.js';
import type { PortRange, Protocol } from '../../policy/index.js';
import type { Artifact, CompileOptions, Compiler } from '../backend.js';
import { parseAnchorOption } from './pf-options.js';

/** The one artifact: everything for our anchor, loaded with `pfctl -a ANCHOR -f FILE`. */
export const ANCHOR_ARTIFACT = 'anchor.pf';

/** The class lockdown `restore` loads into our anchor when the applied state is lost. */
export const LOCKDOWN_ARTIFACT = 'lockdown.pf';
const LOCKDOWN_LABEL = 'egressguard-lockdown';

/** The labels of the two never-matching rules that carry the host config hash, in halves. */
export const HASH_LABEL_PREFIXES = ['eg-hash-1:', 'eg-hash-2:'] as const;

/** Class source tables: a rule's table (`eg_<id>`) never takes this prefix. */
export const SOURCE_TABLE_PREFIX = 'egsrc_';

// pf's fixed buffers (XNU pfvar.h PF_RULE_LABEL_SIZE 64, PF_TABLE_NAME_SIZE 32), NUL included.
const LABEL_MAX = 63;
const TABLE_NAME_MAX = 31;

/**
 * The pf compiler: a HostIR → one anchor file in the grammar macOS parses (OpenBSD 4.5 era,
 * NOTES.md §1): tables, then normalization, then translation, then filtering, as `require-order`
 * wants. VM classes are filtered `in` on their bridge, where pf sees a VM's own address (on the
 * uplink it sees it only after NAT: DESIGN.md §1A), with `quick` on every filter rule so the
 * first match decides, as in the IR. Each rule carries its policy id as its label, and two rules
 * that never match carry the host config hash (a label holds 63 bytes, the stamp 72). Pure.
 */
export function createPfCompiler(): Compiler {
  return {
    compile(ir: HostIR, options: CompileOptions = {}): Artifact[] {
      return compileAnchor(ir, options).artifacts;
    },
    notes(ir: HostIR, options: CompileOptions = {}): string[] {
      return compileAnchor(ir, options).notes;
    },
  };
}

function compileAnchor(
  ir: HostIR,
  options: CompileOptions,
): { artifacts: Artifact[]; notes: string[] } {
  const anchor = parseAnchorOption(options.options ?? {});
  refuseUnsupported(ir);
  const stamp = options.stamp ?? BLANK_STAMP;
  const emitter = new AnchorEmitter();
  for (const cls of ir.classes) emitter.addClass(cls, ir);
  const hex = stamp.slice('eg-hash:'.length);
  const header = [
    `# egressguard: policy "${ir.name}" for pf anchor "${anchor}"`,
    `# Load only this anchor: pfctl -a ${anchor} -f FILE (never pfctl -f /etc/pf.conf)`,
    `# ${stamp}`,
    ...tunnelBindings(ir),
    ...emitter.notes.map((note) => `# Note: ${note}`),
  ];
  const hashRules = HASH_LABEL_PREFIXES.map(
    (prefix, i) =>
      // Port 0 from and to 0.0.0.0 on loopback: no TCP segment ever carries it.
      `block drop in quick on lo0 inet proto tcp from 0.0.0.0 port 0 to 0.0.0.0 port 0 label "${prefix}${hex.slice(i * 32, i * 32 + 32)}"`,
  );
  const sections = [
    header,
    emitter.tables,
    emitter.scrub,
    emitter.nat,
    [...hashRules, ...emitter.filter],
  ].filter((s) => s.length > 0);
  const interfaces = [
    ...new Set(
      ir.classes.flatMap((c) => (c.selector.kind === 'ingress' ? c.selector.interfaces : [])),
    ),
  ].sort();
  // Fail closed: every packet of every class is dropped where it comes in. The classes' source
  // tables ride along, unreferenced, for the applier: loading the lockdown kills the states of
  // those sources, or an established flow would go on passing by its state (pf.conf(5) STATEFUL
  // FILTERING: a packet that matches a state is not evaluated against the rules).
  const lockdown = [
    `# egressguard: class lockdown of policy "${ir.name}" for pf anchor "${anchor}"`,
    `# ${stamp}`,
    ...emitter.tables.filter((t) => t.startsWith(`table <${SOURCE_TABLE_PREFIX}`)),
    ...(interfaces.length === 0
      ? []
      : [`block drop in quick on ${list(interfaces)} all label "${LOCKDOWN_LABEL}"`]),
  ];
  const artifacts = [
    { name: ANCHOR_ARTIFACT, content: `${sections.map((s) => s.join('\n')).join('\n\n')}\n` },
    { name: LOCKDOWN_ARTIFACT, content: `${lockdown.join('\n')}\n` },
  ];
  return { artifacts, notes: emitter.notes };
}

/** Every reason the pf backend cannot compile a policy, in one refusal. */
function refuseUnsupported(ir: HostIR): void {
  const reasons: string[] = [];
  for (const cls of ir.classes) {
    const kind = cls.selector.kind;
    switch (kind) {
      case 'host':
        reasons.push(
          `class "${cls.name}" is host-originated (origin: host): the pf backend filters workload classes in on their bridge only`,
        );
        break;
      case 'ingress':
        for (const name of cls.selector.interfaces) {
          if (name.endsWith('*')) {
            reasons.push(
              `class "${cls.name}" selects interfaces by the prefix "${name}": pf matches an interface by its whole name`,
            );
          } else if (name === ir.uplink) {
            reasons.push(
              `class "${cls.name}" comes in on the uplink "${name}": pf sees traffic there only after NAT, so a rule out on it from the class's sources never matches; filter the class in on its own bridge`,
            );
          }
        }
        break;
      default:
        assertNever(kind);
    }
    if (cls.via.kind === 'tunnel' && cls.killSwitch === null) {
      // pf_route drops what route-to sends to an absent interface (upstream pf.c pf_route:
      // `if (ifp == NULL) goto bad`): a pf tunnel class cannot fall back to the uplink.
      reasons.push(
        `class "${cls.name}" leaves by tunnel "${cls.via.interface}" without a kill switch: pf's route-to drops the class's traffic while the tunnel is absent, so it cannot fall back to the uplink as the policy says; add "killSwitch: {}"`,
      );
    }
    if (cls.mssClamp !== null) {
      reasons.push(
        `class "${cls.name}" clamps the MSS: the pf backend does not compile MSS clamping`,
      );
    }
    for (const rule of [...cls.rules, cls.defaultRule]) {
      if (rule.id.length > LABEL_MAX) {
        reasons.push(`rule id "${rule.id}" is longer than a pf label (${LABEL_MAX} bytes)`);
      }
      if (rule.kind === 'rule' && rule.match.ports !== null) {
        const other = (rule.match.protocols ?? []).filter((p) => p !== 'tcp' && p !== 'udp');
        if (other.length > 0) {
          reasons.push(
            `rule "${rule.id}" matches ports on protocol ${other.map(String).join(', ')}: pf matches ports on tcp and udp only`,
          );
        }
      }
    }
  }
  if (reasons.length > 0) {
    throw new EgressguardError(
      'unsupported',
      `Cannot compile policy "${ir.name}" for pf: ${reasons.join('; ')}`,
      { hint: 'compile it for another backend (--target), or change the classes named' },
    );
  }
}

const ND_TYPES = [133, 135, 136];

/** Builds the four sections of the anchor file, class by class. */
class AnchorEmitter {
  readonly tables: string[] = [];
  readonly scrub: string[] = [];
  readonly nat: string[] = [];
  readonly filter: string[] = [];
  /** What a person should know of the anchor (Compiler.notes), in class order. */
  readonly notes: string[] = [];
  private readonly tableNames = new Set<string>();

  addClass(cls: HostClassIR, ir: HostIR): void {
    if (cls.selector.kind !== 'ingress') return;
    const uplink = ir.uplink;
    const interfaces = cls.selector.interfaces;
    const on = `on ${list(interfaces)}`;
    const sources = cls.selector.sources;
    const sourceTable = this.table(cls.name, sources, SOURCE_TABLE_PREFIX);
    // Fragments are reassembled before filtering, so a fragment is judged like its datagram and
    // one that never completes is held and dropped (the IR's reassembly node; pf.conf(5) SCRUB).
    this.scrub.push(`scrub in ${on} all fragment reassemble`);
    // A tunnel absent from the facts carries nothing: nothing to translate on it.
    if (cls.nat !== null && (cls.via.kind !== 'tunnel' || cls.via.present)) {
      // IPv4: `(exit:0)`, the interface's first address, following it as it changes (DHCP, a
      // tunnel's new address). A bare `(exit)` would be a round-robin pool over every address
      // of the interface (F93 parse.y natrule: DYNIF_MULTIADDR makes it PF_POOL_ROUNDROBIN; XNU
      // pf.c pf_map_addr walks the pool's table), so connections would leave from aliases the
      // IR does not name; Apple's own Internet Sharing NAT uses `(en0:0)` too. IPv6: the
      // interface's first address beyond link-local, written out: `(exit:0)` would be its first
      // IPv6 address, and XNU pfi_instance_add keeps link-local ones, which macOS configures
      // first; the address is in the anchor, so a new one changes its hash and the re-converge
      // loads it. Never `nat pass`, which would let the translated packets skip filtering
      // (pf.conf.5:1116-1124). A tunnel class is translated on its tunnel only: what leaves by
      // the LAN keeps its source.
      const exit = cls.via.kind === 'tunnel' ? cls.via.interface : uplink;
      for (const family of families(sources)) {
        if (!carries(cls.via, family)) continue;
        const target = family === 4 ? `(${exit}:0)` : (ir.ipv6NatSources[exit] ?? `(${exit}:0)`);
        this.nat.push(`nat on ${exit} ${inet(family)} from <${sourceTable}> to any -> ${target}`);
      }
    }
    // A fragment pf did not reassemble (the scrub rule above unreached: no scrub-anchor point
    // in the main ruleset) is filtered by XNU pf_test_fragment, which passes over every rule with
    // a port, TCP flags or an ICMP type and sets no tag: our rules would judge it without its
    // transport header. Dropped first instead (a `fragment` rule matches fragments only, and a
    // reassembled datagram is none: PFRULE_FRAGMENT). Behind a reached scrub it never matches.
    this.filter.push(`block drop in quick ${on} all fragment label ${quote(ir.reassembly.id)}`);
    const self = selfList(interfaces, ir);
    for (const node of cls.housekeeping) this.filter.push(...housekeeping(node, on, self));

    if (cls.antiSpoofing !== null) {
      const label = quote(cls.antiSpoofing.id);
      if (sources.has(4)) {
        this.filter.push(
          `block drop in quick ${on} inet from ! <${sourceTable}> to any label ${label}`,
        );
      } else {
        this.filter.push(`block drop in quick ${on} inet all label ${label}`);
      }
      if (sources.has(6)) {
        this.filter.push(
          `block drop in quick ${on} inet6 from ! <${sourceTable}> to any label ${label}`,
        );
      } else if (cls.ipv6Block !== null) {
        this.filter.push(`block drop in quick ${on} inet6 all label ${quote(cls.ipv6Block.id)}`);
      }
    }

    if (cls.via.kind === 'tunnel' && cls.killSwitch !== null) {
      if (!cls.via.present) {
        const declared = ir.tunnels.find((t) => t.name === cls.via.interface)?.declared;
        this.notes.push(
          `class "${cls.name}" is compiled kill-switch-only: its tunnel "${declared ?? cls.via.interface}" matches no interface in this host's facts, and pf's route-to must name one that exists, so what would take the tunnel is dropped until a re-arm (apply, or the next reconcile of run) finds it`,
        );
      }
      this.addTunnelRules(cls, {
        on,
        self,
        tunnel: cls.via,
        killSwitch: cls.killSwitch,
        bypass: ir.localPrefixes.union(cls.killSwitch.except),
      });
      return;
    }
    for (const rule of cls.rules) this.filter.push(...this.rule(rule, on, self));
    const fallback = cls.defaultRule;
    this.filter.push(
      fallback.action === 'allow'
        ? `pass in quick ${on} all keep state label ${quote(fallback.id)}`
        : `block drop in quick ${on} all label ${quote(fallback.id)}`,
    );
  }

  private rule(rule: RuleIR, on: string, self: { 4: string; 6: string }): string[] {
    const { destination } = rule.match;
    let to: Record<Family, string | null>;
    switch (destination.kind) {
      case 'any':
        to = { 4: 'any', 6: 'any' };
        break;
      case 'self':
        to = self;
        break;
      case 'addresses':
        to = this.tableTarget(rule.id, destination.set);
        break;
      default:
        return assertNever(destination);
    }
    return ruleLines(rule, { direction: 'in', on, to, tagged: '' });
  }

  /**
   * A tunnel class (DESIGN.md §4, pf; NOTES.md §6): what leaves by the tunnel is sent there with
   * `route-to` and tagged, and its rules are judged `out` on the tunnel, where the tag still marks
   * it (pf.conf.5:1831-1841); a backstop blocks the tag out of every other interface. When the
   * tunnel goes away after the load, pf_route drops what the route-to rule passed (XNU pf.c
   * pf_route and pf_route6: `if (ifp == NULL) goto bad`), before any rule of the class: the kill
   * switch, as in the IR, decides ahead of the rules. Destinations that do not take the tunnel
   * (the host itself, the kill switch's exceptions, the host's connected prefixes) are judged
   * `in` on the bridge, rules in order; link-local destinations never reach the tunnel and are
   * dropped.
   *
   * A tunnel absent from the facts at compile time gets no route-to at all: pfctl of the 2003–04
   * parse.y (1.291, 1.449) checks that a route-to interface exists while it parses
   * (`routeto: unknown interface`), so an anchor naming it is refused whole, under `-n` too;
   * F93's parse.y no longer checks, and which of the two macOS's closed pfctl follows is on the
   * self-test list (docs/macos.md, "route-to and pfctl's grammar"). The class is then
   * compiled kill-switch-only: the same rules for what does not take the tunnel, and a block
   * labelled with the kill switch where the route-to would be; nothing carries the class's tag,
   * so no backstop and no rules out on the tunnel. The re-arm that finds the tunnel compiles the route-to.
   */
  private addTunnelRules(
    cls: HostClassIR,
    context: {
      on: string;
      self: { 4: string; 6: string };
      tunnel: { interface: string; families: readonly Family[]; present: boolean };
      killSwitch: { id: string };
      bypass: AddressSet;
    },
  ): void {
    const { on, self, tunnel, bypass } = context;
    const sources = cls.selector.sources;
    const ks = quote(context.killSwitch.id);
    const tag = pfTag(cls.name);
    const local = pfTag(`local_${cls.name}`);
    // Marks what the host takes as its own; never the last match: a quick rule below decides
    // every packet it marks. `! self` would not do: a list expands into one rule per item, and
    // a negated item matches every other address (pf.conf(5) PARAMETERS). Labelled like every
    // rule here: pfctl's optimizer leaves a labelled rule alone (F93 pfctl_optimize.c: `label`
    // is a BARRIER field, a superblock of its own), while unlabelled neighbours may be merged
    // into a table or dropped as duplicates, and read-back could not count them.
    for (const family of families(sources)) {
      this.filter.push(
        `pass in ${on} ${inet(family)} from any to ${self[family]} tag ${local} label ${ks}`,
      );
    }
    const bypassTarget = this.tableTarget(`${cls.name}_bypass`, bypass);
    const outTargets = new Map<string, Record<Family, string | null>>();
    const tunnelled = new Set<string>();
    for (const rule of cls.rules) {
      const { destination } = rule.match;
      let direct: Record<Family, string | null>;
      let out: Record<Family, string | null> | null;
      switch (destination.kind) {
        case 'any':
          direct = bypassTarget;
          out = { 4: 'any', 6: 'any' };
          break;
        case 'self':
          direct = { 4: null, 6: null };
          out = null;
          break;
        case 'addresses': {
          direct = this.tableTarget(`${rule.id}_bypass`, destination.set.intersect(bypass));
          out = this.tableTarget(rule.id, destination.set);
          // Nothing of it takes the tunnel (it is all excepted or local): no rule out there.
          if (destination.set.subtract(bypass).isEmpty()) tunnelled.delete(rule.id);
          else tunnelled.add(rule.id);
          break;
        }
        default:
          assertNever(destination);
      }
      if (out !== null && (destination.kind !== 'addresses' || tunnelled.has(rule.id))) {
        outTargets.set(rule.id, out);
      }
      this.filter.push(...ruleLines(rule, { direction: 'in', on, to: direct, tagged: '' }));
      const mine = destination.kind === 'addresses' ? (out as Record<Family, string | null>) : null;
      this.filter.push(
        ...ruleLines(rule, {
          direction: 'in',
          on,
          to: mine ?? { 4: 'any', 6: 'any' },
          tagged: ` tagged ${local}`,
        }),
      );
    }
    const fallback = cls.defaultRule;
    const inHead =
      fallback.action === 'allow' ? `pass in quick ${on}` : `block drop in quick ${on}`;
    const inTail = `${fallback.action === 'allow' ? ' keep state' : ''} label ${quote(fallback.id)}`;
    for (const family of families(bypass)) {
      if (!sources.has(family)) continue;
      this.filter.push(
        `${inHead} ${inet(family)} from any to ${bypassTarget[family] as string}${inTail}`,
      );
    }
    this.filter.push(`${inHead} all tagged ${local}${inTail}`);

    // The kill switch on the bridge: link-local destinations leave by the link they came by,
    // never by the tunnel; everything else left takes the tunnel, or dies with it.
    if (sources.has(6)) {
      const linkLocal = AddressSet.parse(['fe80::/10']).subtract(bypass);
      if (!linkLocal.isEmpty()) {
        const name = this.table(`${cls.name}_link_local`, linkLocal);
        this.filter.push(`block drop in quick ${on} inet6 from any to <${name}> label ${ks}`);
      }
    }
    for (const family of families(sources)) {
      if (tunnel.present && tunnel.families.includes(family)) {
        // The bare form, `route-to IF`: parse.y's route_host is `STRING | '(' STRING host ')'`
        // (from 1.291 of 2003 through F93), so `(IF)` without an address is a syntax error.
        // Its pool address is zero, and pf_route then keeps the packet's own destination as the
        // next hop (XNU pf.c pf_route: `if (!PF_AZERO(&naddr, AF_INET))`), right for a
        // point-to-point utun: no link-layer next hop to resolve. `(IF PEER)` would add nothing
        // there, and needs a peer of each family (the facts give at most an IPv4 one).
        this.filter.push(
          `pass in quick ${on} route-to ${tunnel.interface} ${inet(family)} all tag ${tag} keep state (if-bound) label ${ks}`,
        );
      } else {
        this.filter.push(`block drop in quick ${on} ${inet(family)} all label ${ks}`);
      }
    }
    if (!tunnel.present) return;

    // The backstop: a packet of the class never leaves by another interface.
    this.filter.push(`block drop out quick on ! ${tunnel.interface} all tagged ${tag} label ${ks}`);
    const outOn = `on ${tunnel.interface}`;
    for (const rule of cls.rules) {
      const to = outTargets.get(rule.id);
      if (to === undefined) continue;
      this.filter.push(
        ...ruleLines(rule, { direction: 'out', on: outOn, to, tagged: ` tagged ${tag}` }),
      );
    }
    this.filter.push(
      fallback.action === 'allow'
        ? `pass out quick ${outOn} all tagged ${tag} keep state label ${quote(fallback.id)}`
        : `block drop out quick ${outOn} all tagged ${tag} label ${quote(fallback.id)}`,
    );
  }

  /** `<table>` for the families a set has, null for those it lacks (no table when empty). */
  private tableTarget(base: string, set: AddressSet): Record<Family, string | null> {
    if (set.isEmpty()) return { 4: null, 6: null };
    const name = this.table(base, set);
    return { 4: set.has(4) ? `<${name}>` : null, 6: set.has(6) ? `<${name}>` : null };
  }

  /** Defines a table once (NOTES.md §4: each table in exactly one place, no `persist`). */
  private table(base: string, set: AddressSet, prefix = 'eg_'): string {
    let name = `${prefix}${base.replace(/[^A-Za-z0-9_]/g, '_')}`.slice(0, TABLE_NAME_MAX);
    for (let n = 2; this.tableNames.has(name); n++) {
      const suffix = `_${n}`;
      name = `${name.slice(0, TABLE_NAME_MAX - suffix.length)}${suffix}`;
    }
    this.tableNames.add(name);
    const entries = [...set.toCidrs(4), ...set.toCidrs(6)].map((c) =>
      c.endsWith('/32') || c.endsWith('/128') ? c.slice(0, c.lastIndexOf('/')) : c,
    );
    this.tables.push(`table <${name}> { ${entries.join(', ')} }`);
    return name;
  }
}

/**
 * One policy rule as pf filter rules to the targets given (per family; null: none), `in` on the
 * bridge or `out` on a tunnel, with a `tagged` condition when given.
 */
function ruleLines(
  rule: RuleIR,
  options: {
    direction: 'in' | 'out';
    on: string;
    to: Record<Family, string | null>;
    tagged: string;
  },
): string[] {
  const { protocols, ports } = rule.match;
  const { direction, on, to } = options;
  const head =
    rule.action === 'deny'
      ? `block drop ${direction} quick ${on}`
      : `pass ${direction}${rule.action === 'audit' ? ' log' : ''} quick ${on}`;
  const tail = `${options.tagged}${rule.action === 'deny' ? '' : ' keep state'} label ${quote(rule.id)}`;
  const port = ports === null ? '' : ` port ${list(ports.map(formatPort))}`;
  const out: string[] = [];
  // ICMP means ICMPv6 for an IPv6 destination: the protocol differs by family, so the rule
  // splits by family where it names icmp; otherwise one rule covers both.
  const split = protocols?.includes('icmp') === true;
  const byFamily: (Family | null)[] = split || to[4] !== to[6] ? [4, 6] : [null];
  for (const family of byFamily) {
    const target = family === null ? to[4] : to[family];
    if (target === null) continue;
    const proto =
      protocols === null ? '' : ` proto ${list(protocols.map((p) => pfProtocol(p, family)))}`;
    const af = family === null ? '' : ` ${inet(family)}`;
    out.push(`${head}${af}${proto} from any to ${target}${port}${tail}`);
  }
  return out;
}

/** A pf tag for a name (PF_TAG_NAME_SIZE 64 in pfvar.h; class names hold at most 31). */
function pfTag(name: string): string {
  return `EG_${name.replace(/[^A-Za-z0-9_]/g, '_')}`;
}

function housekeeping(node: HousekeepingIR, on: string, self: { 6: string }): string[] {
  const label = ` label ${quote(node.id)}`;
  switch (node.kind) {
    case 'neighbour-discovery':
      return [
        `pass in quick ${on} inet6 proto ipv6-icmp from any to ${self[6]} icmp6-type ${list(ND_TYPES.map(String))} keep state${label}`,
      ];
    case 'dhcp':
      // RFC 2131: from 0.0.0.0 to the limited broadcast; RFC 8415 §7.1: from a link-local
      // address to All_DHCP_Relay_Agents_and_Servers.
      return [
        `pass in quick ${on} inet proto udp from 0.0.0.0 to 255.255.255.255 port 67 keep state${label}`,
        `pass in quick ${on} inet6 proto udp from fe80::/10 to ff02::1:2 port 547 keep state${label}`,
      ];
    default:
      return assertNever(node);
  }
}

/**
 * What the host takes as its own, seen from a class's bridge, per family. Not pfctl's `self`:
 * pfctl expands it once, into the addresses the interfaces have when the anchor loads (F93
 * pfctl_parser.c host_if → ifa_lookup("self")), and the anchor is not reloaded when an interface
 * is renumbered, so a renumbered uplink would stop being the host to our rules. Nor `(self)`:
 * XNU looks it up as the interface group "ALL" (bsd/net/pf_if.c pfi_dynaddr_setup:
 * `pfi_kif_get(IFG_ALL)`), a kif with no ifnet, and pfi_table_update fills the table only
 * `if (kif->pfik_ifp != NULL)`, so it matches nothing. Instead every host interface by name in
 * parentheses, whose addresses, link-local ones included, the kernel follows as they change
 * (pfi_kifaddr_update → pfi_dynaddr_update → pfi_instance_add), plus what no interface holds:
 * the limited broadcast and each class bridge's and the uplink's directed broadcast
 * (`(if:broadcast)`), link-local multicast (neighbour discovery, DHCPv6) and the subnet-router
 * anycast of each connected IPv6 prefix, which the IR takes as the host's own. An interface that
 * appears later changes the list, and so the anchor's hash: the next re-converge loads it.
 */
function selfList(interfaces: readonly string[], ir: HostIR): { 4: string; 6: string } {
  const bridges = ir.classes.flatMap((c) =>
    c.selector.kind === 'ingress' ? c.selector.interfaces : [],
  );
  const own = ir.hostInterfaces.map((name) => `(${name})`);
  const broadcasts = [...interfaces, ...bridges, ir.uplink].map((name) => `(${name}:broadcast)`);
  // The subnet-router anycast of each connected IPv6 prefix shorter than /127 (RFC 4291
  // §2.6.1): the IR takes it as the host's own (evaluate.ts createHostView).
  const anycast = ir.localPrefixes
    .toCidrs(6)
    .filter((c) => Number(c.slice(c.lastIndexOf('/') + 1)) < 127)
    .map((c) => c.slice(0, c.lastIndexOf('/')));
  return {
    4: list([...own, '255.255.255.255', ...new Set(broadcasts)]),
    6: list([...own, 'ff02::/16', ...anycast]),
  };
}

/**
 * The tunnels the anchor routes into, with the addresses they had when it was compiled: a VPN
 * that reconnects gets new ones, and the anchor (its hash) changes with them, so the re-arm loads
 * it again and kills the class's states, NAT states translated to the old address included.
 */
function tunnelBindings(ir: HostIR): string[] {
  return ir.tunnels
    .filter((t) => t.present)
    .map(
      (t) =>
        `# tunnel "${t.declared}": ${t.name} ${t.addresses.join(' ') || 'with no address'}${t.peer === null ? '' : ` --> ${t.peer}`}`,
    );
}

function families(set: AddressSet): Family[] {
  return ([4, 6] as const).filter((f) => set.has(f));
}

function inet(family: Family): string {
  return family === 4 ? 'inet' : 'inet6';
}

function pfProtocol(protocol: Protocol, family: Family | null): string {
  if (protocol === 'icmp') return family === 6 ? 'ipv6-icmp' : 'icmp';
  return String(protocol);
}

function formatPort(range: PortRange): string {
  return range.from === range.to ? String(range.from) : `${range.from}:${range.to}`;
}

function list(items: readonly string[]): string {
  return items.length === 1 ? (items[0] as string) : `{ ${items.join(', ')} }`;
}

function quote(text: string): string {
  return `"${text.replace(/"/g, '')}"`;
}
