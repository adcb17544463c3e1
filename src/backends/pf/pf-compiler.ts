import { EgressguardError, type AddressSet, type Family } from '../../core/index.js';
import {
  assertNever,
  BLANK_STAMP,
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
      const anchor = parseAnchorOption(options.options ?? {});
      refuseUnsupported(ir);
      const stamp = options.stamp ?? BLANK_STAMP;
      const emitter = new AnchorEmitter();
      for (const cls of ir.classes) emitter.addClass(cls, ir.uplink);
      const hex = stamp.slice('eg-hash:'.length);
      const header = [
        `# egressguard: policy "${ir.name}" for pf anchor "${anchor}"`,
        `# Load only this anchor: pfctl -a ${anchor} -f FILE (never pfctl -f /etc/pf.conf)`,
        `# ${stamp}`,
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
      // Fail closed: every packet of every class is dropped where it comes in.
      const lockdown = [
        `# egressguard: class lockdown of policy "${ir.name}" for pf anchor "${anchor}"`,
        `# ${stamp}`,
        ...(interfaces.length === 0
          ? []
          : [`block drop in quick on ${list(interfaces)} all label "${LOCKDOWN_LABEL}"`]),
      ];
      return [
        { name: ANCHOR_ARTIFACT, content: `${sections.map((s) => s.join('\n')).join('\n\n')}\n` },
        { name: LOCKDOWN_ARTIFACT, content: `${lockdown.join('\n')}\n` },
      ];
    },
  };
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
    if (cls.via.kind === 'tunnel') {
      reasons.push(
        `class "${cls.name}" leaves by tunnel "${cls.via.interface}": the pf backend does not compile tunnel classes (route-to with a kill switch) yet`,
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
  private readonly tableNames = new Set<string>();

  addClass(cls: HostClassIR, uplink: string): void {
    if (cls.selector.kind !== 'ingress') return;
    const interfaces = cls.selector.interfaces;
    const on = `on ${list(interfaces)}`;
    const sources = cls.selector.sources;
    const sourceTable = this.table(cls.name, sources, SOURCE_TABLE_PREFIX);
    // Fragments are reassembled before filtering, so a fragment is judged like its datagram and
    // one that never completes is held and dropped (the IR's reassembly node; pf.conf(5) SCRUB).
    this.scrub.push(`scrub in ${on} all fragment reassemble`);
    if (cls.nat !== null) {
      // `(uplink)`: the address follows the interface (DHCP); never `nat pass`, which would let
      // the translated packets skip filtering (pf.conf.5:1116-1124).
      for (const family of families(sources)) {
        this.nat.push(
          `nat on ${uplink} ${inet(family)} from <${sourceTable}> to any -> (${uplink})`,
        );
      }
    }
    const self = selfList(interfaces, uplink);
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

    for (const rule of cls.rules) this.filter.push(...this.rule(rule, on, self));
    const fallback = cls.defaultRule;
    this.filter.push(
      fallback.action === 'allow'
        ? `pass in quick ${on} all keep state label ${quote(fallback.id)}`
        : `block drop in quick ${on} all label ${quote(fallback.id)}`,
    );
  }

  private rule(rule: RuleIR, on: string, self: { 4: string; 6: string }): string[] {
    const { destination, protocols, ports } = rule.match;
    let to: Record<Family, string | null>;
    switch (destination.kind) {
      case 'any':
        to = { 4: 'any', 6: 'any' };
        break;
      case 'self':
        to = self;
        break;
      case 'addresses': {
        const name = this.table(rule.id, destination.set);
        to = {
          4: destination.set.has(4) ? `<${name}>` : null,
          6: destination.set.has(6) ? `<${name}>` : null,
        };
        break;
      }
      default:
        return assertNever(destination);
    }
    const head =
      rule.action === 'deny'
        ? `block drop in quick ${on}`
        : `pass in${rule.action === 'audit' ? ' log' : ''} quick ${on}`;
    const tail = `${rule.action === 'deny' ? '' : ' keep state'} label ${quote(rule.id)}`;
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
 * What the host takes as its own, seen from a class's bridge: `self` (every interface address),
 * and what it receives though no interface has it: the limited broadcast and the directed
 * broadcast of the class's bridges and the uplink (`(if:broadcast)`, dynamic); for IPv6,
 * link-local multicast (neighbour discovery, DHCPv6). pf's `self` has neither.
 */
function selfList(interfaces: readonly string[], uplink: string): { 4: string; 6: string } {
  const broadcasts = [...interfaces, uplink].map((name) => `(${name}:broadcast)`);
  return {
    4: `{ self, 255.255.255.255, ${[...new Set(broadcasts)].join(', ')} }`,
    6: '{ self, ff02::/16 }',
  };
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
