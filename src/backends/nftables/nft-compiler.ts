import type { AddressSet, Family } from '../../core/index.js';
import {
  assertNever,
  BLANK_STAMP,
  type HostClassIR,
  type HostIR,
  type HousekeepingIR,
  type ReassemblyIR,
  type RuleIR,
  type SelectorIR,
} from '../../ir/index.js';
import type { Protocol } from '../../policy/index.js';
import type { Artifact, CompileOptions, Compiler } from '../backend.js';
import { createNamer, nftString } from './nft-names.js';
import { parseNftOptions } from './nft-options.js';
import { definitionHash, setBlock, STAMP_SET } from './nft-sets.js';
import { compileSteering, STEERING_ARTIFACT } from './steering.js';

export const RULESET_ARTIFACT = 'ruleset.nft';
/** Loaded by `restore` when the state is lost: drops everything of every class. */
export const LOCKDOWN_ARTIFACT = 'lockdown.nft';
/** nflog group of audit and drop logs (`egressguard drops` reads it). */
export const LOG_GROUP = 2;
const LOG_LIMIT = 'limit rate 20/second burst 40 packets';
/**
 * Sets above this many elements are split into shards of contiguous address ranges, so `apply`
 * can load them in parallel nft processes (nft itself uses one core). A packet is in at most one
 * shard; a rule over a sharded set becomes one rule per shard, "in none" one rule that checks all.
 */
export const SHARD_ELEMENTS = 32_768;
const MAX_SHARDS = 8;
/** Before the kernel's defragmentation (NF_IP_PRI_CONNTRACK_DEFRAG, -400). */
const REASSEMBLY_PRIORITY = -450;

const FAMILY = {
  4: { nfproto: 'ipv4', addr: 'ip', type: 'ipv4_addr', icmp: 'icmp' },
  6: { nfproto: 'ipv6', addr: 'ip6', type: 'ipv6_addr', icmp: 'ipv6-icmp' },
} as const;

/** Destinations the host takes as its own, as the evaluator's `self` (see createHostView). */
const SELF_TYPES = '{ local, broadcast, anycast }';
// RFC 4861: neighbour discovery is link-local and always sent with hop limit 255.
const ND_MATCH =
  'meta nfproto ipv6 icmpv6 type { nd-router-solicit, nd-neighbor-solicit, nd-neighbor-advert } ip6 hoplimit 255';
// RFC 2131: a client without an address broadcasts from 0.0.0.0 to the server port. RFC 8415
// §7.1: a DHCPv6 client sends from its link-local address to All_DHCP_Relay_Agents_and_Servers.
// The client port is not matched (the evaluator's packets have none): only the server's counts.
const DHCP_MATCHES = [
  'meta nfproto ipv4 ip saddr 0.0.0.0 ip daddr 255.255.255.255 udp dport 67',
  'meta nfproto ipv6 ip6 saddr fe80::/10 ip6 daddr ff02::1:2 udp dport 547',
];

/**
 * Compiles the IR into one owned `table inet` as a single nft transaction (declare, delete,
 * define: a rejected transaction leaves the old table intact), plus steering specs.
 */
export function createNftCompiler(): Compiler {
  return {
    compile(ir: HostIR, options: CompileOptions = {}): readonly Artifact[] {
      const { table, steering } = parseNftOptions(options.options);
      const stamp = options.stamp ?? BLANK_STAMP;
      return [
        { name: RULESET_ARTIFACT, content: compileRuleset(ir, { table, stamp }) },
        { name: STEERING_ARTIFACT, content: compileSteering(ir, steering) },
        { name: LOCKDOWN_ARTIFACT, content: compileLockdown(ir, table) },
      ];
    },
  };
}

/** Per family, the names of a set's shards (one name unless the set is large). */
type SetNames = Partial<Record<Family, readonly string[]>>;

interface Emitter {
  readonly sets: string[];
  readonly counters: Map<string, string>;
  readonly declared: Map<string, SetNames>;
  readonly chains: string[];
  readonly name: (prefix: string, id: string) => string;
}

function compileRuleset(ir: HostIR, ctx: { table: string; stamp: string }): string {
  const e: Emitter = {
    sets: [],
    counters: new Map(),
    declared: new Map(),
    chains: [],
    name: createNamer(),
  };
  const dispatch = { forward: [] as string[], input: [] as string[], output: [] as string[] };
  const nat: string[] = [];
  const blackholed: string[] = [];

  for (const cls of ir.classes) {
    const families = producedFamilies(cls);
    const src = declareAddressSets(
      e,
      `${cls.name}_src`,
      cls.selector.sources,
      `class ${cls.name} sources`,
    );
    switch (cls.selector.kind) {
      case 'ingress': {
        const ifnames = nftSet(cls.selector.interfaces.map(ifnamePattern));
        const fwd = e.name('c_', `${cls.name}_fwd`);
        const inp = e.name('c_', `${cls.name}_in`);
        dispatch.forward.push(
          `iifname ${ifnames} jump ${fwd} comment ${nftString(`class ${cls.name}`)}`,
        );
        dispatch.input.push(
          `iifname ${ifnames} jump ${inp} comment ${nftString(`class ${cls.name}`)}`,
        );
        e.chains.push(chain(fwd, classChain(e, cls, { hook: 'forward', src, families, ir })));
        e.chains.push(chain(inp, classChain(e, cls, { hook: 'input', src, families, ir })));
        blackholed.push(...blackholeCount(e, cls, { ifnames, src, families }));
        break;
      }
      case 'host': {
        const out = e.name('c_', `${cls.name}_out`);
        for (const f of families) {
          for (const match of inSets(f, 'saddr', src[f])) {
            dispatch.output.push(
              `meta nfproto ${FAMILY[f].nfproto} ${match} jump ${out} comment ${nftString(`class ${cls.name}`)}`,
            );
          }
        }
        e.chains.push(chain(out, classChain(e, cls, { hook: 'output', src, families, ir })));
        break;
      }
      default:
        assertNever(cls.selector);
    }
    if (cls.nat !== null) {
      const ingress = natIngressMatch(cls.selector);
      for (const f of families) {
        for (const match of inSets(f, 'saddr', src[f])) {
          nat.push(
            `${ingress}meta nfproto ${FAMILY[f].nfproto} ${match} oifname ${nftString(cls.via.interface)} masquerade comment ${nftString(`class ${cls.name} nat`)}`,
          );
        }
      }
    }
  }

  const base = (name: string, spec: string, rules: string[]): string =>
    chain(name, [spec, ...rules]);
  const reassembly = reassemblyChains(e, ir.reassembly);
  const body = [
    setBlock(
      STAMP_SET,
      `\t\ttype ipv4_addr\n\t\tcomment ${nftString(`${ctx.stamp} policy ${ir.name}`)}`,
    ),
    ...[...e.counters.entries()].map(
      ([name, id]) => `\tcounter ${name} {\n\t\tcomment ${nftString(id)}\n\t}`,
    ),
    ...e.sets,
    base('forward', 'type filter hook forward priority filter; policy accept;', dispatch.forward),
    base('input', 'type filter hook input priority filter; policy accept;', dispatch.input),
    base('output', 'type filter hook output priority filter; policy accept;', dispatch.output),
    base('postrouting', 'type nat hook postrouting priority srcnat; policy accept;', nat),
    ...(blackholed.length === 0
      ? []
      : [
          base(
            'routing',
            'type filter hook prerouting priority filter; policy accept;',
            blackholed,
          ),
        ]),
    ...reassembly,
    ...e.chains,
  ];
  return [
    `# egressguard: policy "${ir.name}". Generated; do not edit. As it is, one transaction that`,
    '# replaces the table (declare, delete, define). `egressguard apply` loads new sets first, then',
    '# swaps the rest in one transaction, never deleting the table (docs/linux.md).',
    `table inet ${ctx.table} {}`,
    `delete table inet ${ctx.table}`,
    `table inet ${ctx.table} {`,
    body.join('\n\n'),
    '}',
    '',
  ].join('\n');
}

/**
 * Forwarded classes are NATed by ingress too: a packet of no class that merely carries a
 * class-range source (from the LAN, say) is not ours to rewrite.
 */
function natIngressMatch(selector: SelectorIR): string {
  switch (selector.kind) {
    case 'ingress':
      return `iifname ${nftSet(selector.interfaces.map(ifnamePattern))} `;
    case 'host':
      return '';
    default:
      return assertNever(selector);
  }
}

/**
 * Fragments are reassembled before our hooks whatever the policy: any conntrack expression in the
 * table makes the kernel register its defragmentation hooks for the namespace (priority -400,
 * before every filter chain: nft_ct's init takes nf_ct_netns_get for both families of an inet
 * table, and nf_conntrack registers nf_defrag_ipv4/ipv6). The `conntrack` chain is never jumped
 * to; its rule's presence is its job. Measured without it: non-first fragments of a datagram to a
 * denied port passed `th dport` rules (they carry no transport header) and the class default took
 * them. The `reassembly` chain counts, before the kernel reassembles them, the fragments it is
 * about to hold: the enforcer's own count of what a lone fragment meets (the kernel keeps none for
 * the IPv6 fragments conntrack reassembles).
 */
function reassemblyChains(e: Emitter, node: ReassemblyIR): string[] {
  const count = counter(e, node.id);
  const comment = `comment ${nftString(node.id)}`;
  return [
    chain('conntrack', [`ct state invalid ${comment}`]),
    chain('reassembly', [
      `type filter hook prerouting priority ${REASSEMBLY_PRIORITY}; policy accept;`,
      `meta nfproto ipv4 ip frag-off & 0x3fff != 0 ${count} ${comment}`,
      `meta nfproto ipv6 exthdr frag exists ${count} ${comment}`,
    ]),
  ];
}

/**
 * The routing half of a kill switch, counted: with the tunnel down, steering's blackhole drops the
 * class's packets in the route lookup, before the forward hook, and a route has no counter. A
 * lookup of our own ahead of routing (`fib daddr oif missing`: the kernel's lookup with the
 * packet's source, so our policy rule applies, finds no interface) counts and logs them as
 * `<class>/blackhole`, for status and `drops`. It drops nothing itself. Packets to the host are
 * not routed out (a local route gives no interface either). A host class has nothing to count:
 * the kernel refuses its sends during the lookup (EINVAL), and no packet is ever made.
 */
function blackholeCount(
  e: Emitter,
  cls: HostClassIR,
  ctx: { ifnames: string; src: SetNames; families: readonly Family[] },
): string[] {
  if (cls.killSwitch === null || cls.via.kind !== 'tunnel') return [];
  // Only this table knows the routing half: routing has no rule to carry an id, so the id is
  // the class's, named here once (`drops` maps it back to its class by the part before "/").
  const id = `${cls.name}/blackhole`;
  const lines: string[] = [];
  for (const f of ctx.families) {
    for (const match of inSets(f, 'saddr', ctx.src[f])) {
      const packet = `iifname ${ctx.ifnames} meta nfproto ${FAMILY[f].nfproto} ${match} fib daddr type != ${SELF_TYPES} fib daddr oif missing`;
      lines.push(
        `${packet} ${LOG_LIMIT} ${logPrefix('drop', id)}`,
        `${packet} ${counter(e, id)} comment ${nftString(id)}`,
      );
    }
  }
  return lines;
}

/** Fail closed without a policy: every class interface and host-class source is dropped. */
function compileLockdown(ir: HostIR, table: string): string {
  const forward: string[] = [];
  const output: string[] = [];
  for (const cls of ir.classes) {
    const comment = `comment ${nftString(`lockdown ${cls.name}`)}`;
    const selector = cls.selector;
    switch (selector.kind) {
      case 'ingress':
        forward.push(
          `iifname ${nftSet(selector.interfaces.map(ifnamePattern))} counter drop ${comment}`,
        );
        break;
      case 'host':
        for (const f of [4, 6] as const) {
          const cidrs = selector.sources.toCidrs(f);
          if (cidrs.length > 0)
            output.push(`${FAMILY[f].addr} saddr ${nftSet(cidrs)} counter drop ${comment}`);
        }
        break;
      default:
        assertNever(selector);
    }
  }
  return [
    `# egressguard class lockdown for policy "${ir.name}": loaded only when the state is lost.`,
    `table inet ${table} {}`,
    `delete table inet ${table}`,
    `table inet ${table} {`,
    chain('forward', ['type filter hook forward priority filter; policy accept;', ...forward]),
    '',
    chain('output', ['type filter hook output priority filter; policy accept;', ...output]),
    '}',
    '',
  ].join('\n');
}

function chain(name: string, lines: readonly string[]): string {
  return `\tchain ${name} {\n${lines.map((l) => `\t\t${l}`).join('\n')}\n\t}`;
}

/** The families a class's packets can have once anti-spoofing has run. */
function producedFamilies(cls: HostClassIR): Family[] {
  const out: Family[] = [];
  if (cls.selector.sources.has(4)) out.push(4);
  if (cls.selector.sources.has(6) || lets6Unlisted(cls)) out.push(6);
  return out;
}

/**
 * Whether IPv6 from a class without IPv6 prefixes enters its chains: a forwarded class lets it
 * through unless it blocks it (`ipv6: allow`); a host class's chain is entered by source address.
 */
function lets6Unlisted(cls: HostClassIR): boolean {
  switch (cls.selector.kind) {
    case 'ingress':
      return cls.ipv6Block === null;
    case 'host':
      return false;
    default:
      return assertNever(cls.selector);
  }
}

function ifnamePattern(pattern: string): string {
  return nftString(pattern); // nft matches a trailing "*" in a quoted ifname as a prefix
}

function nftSet(items: readonly string[]): string {
  return items.length === 1 ? (items[0] ?? '') : `{ ${items.join(', ')} }`;
}

/**
 * Declares the interval sets of one address set, per family that has addresses, and returns
 * their names. A name ends in a hash of the set's whole definition: a set whose name is live
 * already has exactly these elements, so `apply` leaves it alone, and a changed set gets a new
 * name, so `apply` can load it before the transaction that switches the rules over to it.
 */
function declareAddressSets(e: Emitter, id: string, set: AddressSet, comment: string): SetNames {
  const known = e.declared.get(id);
  if (known !== undefined) return known;
  const names: Partial<Record<Family, string[]>> = {};
  e.declared.set(id, names);
  for (const f of [4, 6] as const) {
    if (!set.has(f)) continue;
    const base = e.name('s_', `${id}${f}`);
    const elements = set.toCidrs(f);
    const shards = Math.min(MAX_SHARDS, Math.ceil(elements.length / SHARD_ELEMENTS));
    const size = Math.ceil(elements.length / shards);
    names[f] = [];
    for (let i = 0; i < shards; i++) {
      // No auto-merge: AddressSet already merged overlapping and adjacent prefixes, and with
      // auto-merge nft 1.0.6 takes twice as long to replace a table of 100k elements (0.95 s
      // against 0.47 s, measured here).
      const definition = `\t\ttype ${FAMILY[f].type}\n\t\tflags interval\n\t\tcomment ${nftString(comment)}\n\t\telements = { ${elements.slice(i * size, (i + 1) * size).join(`,\n\t\t\t     `)} }`;
      const name = `${base}${shards === 1 ? '' : `_p${i}`}_${definitionHash(definition)}`;
      names[f].push(name);
      e.sets.push(setBlock(name, definition));
    }
  }
  return names;
}

/** One match per shard: a packet is in the set when it is in any of them. */
function inSets(f: Family, field: 'saddr' | 'daddr', names: readonly string[] = []): string[] {
  return names.map((name) => `${FAMILY[f].addr} ${field} @${name}`);
}

/** One match for "in none of the shards" (no match at all when there is no set). */
function notInSets(f: Family, field: 'saddr' | 'daddr', names: readonly string[] = []): string {
  return names.map((name) => `${FAMILY[f].addr} ${field} != @${name}`).join(' ');
}

function counter(e: Emitter, id: string): string {
  const name = e.name('n_', id);
  e.counters.set(name, id);
  return `counter name ${name}`;
}

function logPrefix(kind: string, id: string): string {
  return `log prefix ${nftString(`eg ${kind} ${id} `, 127)} group ${LOG_GROUP}`;
}

/** A verdict with its named counter; drops and audits also log (rate-limited, first). */
function verdict(
  e: Emitter,
  match: string,
  id: string,
  action: 'allow' | 'deny' | 'audit',
): string[] {
  const prefix = match === '' ? '' : `${match} `;
  const comment = `comment ${nftString(id)}`;
  switch (action) {
    case 'allow':
      return [`${prefix}${counter(e, id)} accept ${comment}`];
    case 'deny':
      return [
        `${prefix}${LOG_LIMIT} ${logPrefix('drop', id)}`,
        `${prefix}${counter(e, id)} drop ${comment}`,
      ];
    case 'audit':
      return [
        `${prefix}${LOG_LIMIT} ${logPrefix('audit', id)}`,
        `${prefix}${counter(e, id)} accept ${comment}`,
      ];
    default:
      return assertNever(action);
  }
}

function classChain(
  e: Emitter,
  cls: HostClassIR,
  ctx: {
    hook: 'forward' | 'input' | 'output';
    src: SetNames;
    families: readonly Family[];
    ir: HostIR;
  },
): string[] {
  const lines: string[] = [];
  if (ctx.hook === 'input') {
    // Link housekeeping with the host comes before anti-spoofing: neighbour discovery uses
    // link-local sources, and DHCP clients send from 0.0.0.0 before they have an address.
    for (const node of cls.housekeeping) {
      for (const match of housekeepingMatches(node)) {
        lines.push(...verdict(e, match, node.id, 'allow'));
      }
    }
  }
  lines.push(...antiSpoofing(e, cls, ctx.src));
  // The kill switch: before any rule and regardless of conntrack state, so an established flow
  // cannot keep leaving by the uplink once the tunnel is gone.
  if (cls.killSwitch !== null && ctx.hook !== 'input') {
    const allowed = cls.killSwitch.except.union(ctx.ir.localPrefixes);
    const ks = declareAddressSets(
      e,
      `${cls.name}_ks`,
      allowed,
      `class ${cls.name} kill-switch exceptions`,
    );
    // In the output hook, traffic to the host itself leaves by "lo", never by the tunnel: let it
    // reach the class's rules (`to: self`), as the evaluator does.
    const selfMatch = ctx.hook === 'output' ? ` fib daddr type != ${SELF_TYPES}` : '';
    for (const f of ctx.families) {
      const except = notInSets(f, 'daddr', ks[f]);
      const exceptMatch = except === '' ? '' : ` ${except}`;
      lines.push(
        ...verdict(
          e,
          `meta nfproto ${FAMILY[f].nfproto} oifname != ${nftString(cls.via.interface)}${exceptMatch}${selfMatch}`,
          cls.killSwitch.id,
          'deny',
        ),
      );
    }
  }
  if (cls.mssClamp !== null && ctx.hook !== 'input') {
    const size = cls.mssClamp.size === 'pmtu' ? 'rt mtu' : String(cls.mssClamp.size);
    lines.push(
      `oifname ${nftString(cls.via.interface)} tcp flags syn tcp option maxseg size set ${size}`,
    );
  }
  cls.rules.forEach((rule, index) => {
    for (const f of ctx.families) {
      for (const match of ruleMatches(e, cls, rule, { index, family: f, hook: ctx.hook })) {
        lines.push(...verdict(e, match, rule.id, rule.action));
      }
    }
  });
  lines.push(...verdict(e, '', cls.defaultRule.id, cls.defaultRule.action));
  return lines;
}

function housekeepingMatches(node: HousekeepingIR): readonly string[] {
  switch (node.kind) {
    case 'neighbour-discovery':
      return [ND_MATCH];
    case 'dhcp':
      return DHCP_MATCHES;
    default:
      return assertNever(node);
  }
}

/**
 * Anti-spoofing (and IPv6 of a class without IPv6 prefixes): a workload with root can spoof.
 * A host class needs none: its dispatch rules jump by source address already.
 */
function antiSpoofing(e: Emitter, cls: HostClassIR, src: SetNames): string[] {
  const node = cls.antiSpoofing;
  if (node === null) return [];
  const lines: string[] = [];
  for (const f of [4, 6] as const) {
    const set = src[f];
    if (set !== undefined) {
      lines.push(
        ...verdict(
          e,
          `meta nfproto ${FAMILY[f].nfproto} ${notInSets(f, 'saddr', set)}`,
          node.id,
          'deny',
        ),
      );
    } else if (f === 4) {
      lines.push(...verdict(e, 'meta nfproto ipv4', node.id, 'deny'));
    } else if (cls.ipv6Block !== null) {
      lines.push(...verdict(e, 'meta nfproto ipv6', cls.ipv6Block.id, 'deny'));
    }
  }
  return lines;
}

/**
 * The matches of one rule in one family: one, one per shard of its destination set, or none when
 * it can match nothing there.
 */
function ruleMatches(
  e: Emitter,
  cls: HostClassIR,
  rule: RuleIR,
  ctx: { index: number; family: Family; hook: 'forward' | 'input' | 'output' },
): string[] {
  const f = ctx.family;
  let destinations = [''];
  const parts: string[] = [];
  const destination = rule.match.destination;
  switch (destination.kind) {
    case 'any':
      break;
    case 'self':
      if (ctx.hook === 'forward') return []; // forwarded packets are never for the host
      // The kernel delivers its subnets' broadcasts locally too (the evaluator agrees).
      if (ctx.hook === 'output') parts.push(`fib daddr type ${SELF_TYPES}`);
      break;
    case 'addresses': {
      // An emptied destination matches nothing; it must never become match-all.
      if (!destination.set.has(f)) return [];
      const sets = declareAddressSets(
        e,
        `${cls.name}_r${ctx.index}_dst`,
        destination.set,
        `rule ${rule.id}`,
      );
      destinations = inSets(f, 'daddr', sets[f]).map((m) => ` ${m}`);
      break;
    }
    default:
      return assertNever(destination);
  }
  if (rule.match.protocols !== null) {
    parts.push(`meta l4proto ${nftSet(rule.match.protocols.map((p) => protocolName(p, f)))}`);
  }
  if (rule.match.ports !== null) {
    parts.push(
      `th dport ${nftSet(rule.match.ports.map((r) => (r.from === r.to ? String(r.from) : `${r.from}-${r.to}`)))}`,
    );
  }
  const rest = parts.map((p) => ` ${p}`).join('');
  return destinations.map((d) => `meta nfproto ${FAMILY[f].nfproto}${d}${rest}`);
}

function protocolName(protocol: Protocol, family: Family): string {
  if (protocol === 'icmp') return FAMILY[family].icmp;
  return String(protocol);
}
