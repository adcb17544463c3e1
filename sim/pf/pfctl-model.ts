import { parseAddress, parsePrefix, prefixEnd, type Family } from '../../src/core/index.js';
import {
  concatRulesets,
  listChildAnchors,
  loadPfConfText,
  type PfAnchorLoad,
  type PfInterfaceAddress,
  type PfTable,
} from '../../src/backends/pf/expand-pf-rules.js';
import { formatPfConfProblems, isNotModelled } from '../../src/backends/pf/parse-pf-conf.js';
import {
  evaluateForwardedPfPacket,
  evaluatePfPacket,
  type PfEvaluation,
  type PfForwarding,
  type PfKernelView,
  type PfPacket,
  type PfRuleRef,
  type PfState,
  type PfStateTable,
} from './pf-evaluator.js';
import { formatPfRule, formatPrefix } from '../../src/backends/pf/format-pf-rule.js';
import { parseInterfaceAddresses } from '../../src/backends/pf/interface-addresses.js';
import { optimizeFilterRuleset } from '../../src/backends/pf/pfctl-optimize.js';
import {
  formatProtocol,
  PF_RULESET_NAMES,
  type PfKernelRule,
  type PfKernelRulesets,
  type PfOption,
  type PfRulesetName,
  type PfTableEntry,
} from '../../src/backends/pf/pf-rules.js';

/**
 * A MODEL of macOS pfctl and of the kernel pf state it drives — not pfctl. pf does not run on
 * Linux; this reproduces the documented behaviour egressguard depends on, each behaviour with its
 * source: NOTES.md (shared/reference/pf, "F93" = FreeBSD 9.3 pfctl, "XNU" = xnu-11417.101.15),
 * pfctl(8), pf.conf(5), and the seed incident (DESIGN.md §1A). Options it does not model fail
 * with "pfctl-model: … is not modelled" (exit 2) rather than pretending. What it models:
 *
 * - `-f FILE|-` on the main ruleset: one transaction for the file and each `load anchor`
 *   (NOTES §4; F93 pfctl_ruleset_trans 1235-1261); rolled back on any error, printing
 *   `pfctl: Syntax error in config file: pf rules not loaded` (F93 pfctl.c ERRX); replaces the
 *   main ruleset, so rules system services inserted are gone (stock pf.conf's warning);
 *   prints macOS's "Use of -f option" warning and the ALTQ notice (public macOS output).
 * - per-anchor rule and table tickets; a table defined with a stale ticket is
 *   `cannot define table NAME: Resource busy` (NOTES §4: pfr_ina_define, parse.y:4546-4550),
 *   a stale commit `DIOCXCOMMIT: Resource busy` (pf_ioctl.c:4303-4331); two `load anchor` lines
 *   for one anchor collide, and so does another process (`injectTransactionCollision`).
 * - `-a ANCHOR -f FILE`: that anchor alone (rules of every ruleset, tables), `load anchor` and
 *   options ignored (NOTES §2, pfctl.c:1505-1507, :2191).
 * - `-n`: parse only, no ticket, no table, every `load anchor` parsed (F93 pfctl.c pfctl_rules,
 *   pfctl_load_anchors; parse.y process_tabledef): a duplicated `load anchor` passes `-n` and
 *   fails the load. A file using what the model does not implement fails with exit 2 and
 *   "not modelled: …", never as a pfctl refusal.
 * - the optimizer (`-o none|basic`, `set ruleset-optimization`, basic by default): pfctl-optimize.ts.
 * - `-E`/`-X`/`-s References`/`-e`/`-d`: XNU pf_ioctl.c tokens and reference count (NOTES §3).
 * - `-s rules|nat|Anchors|Tables|References|info|states`, `-v` counters (F93 print formats), the
 *   counters moved by packets sent through the pf evaluator (`sendPacket`, `forwardPacket`).
 * - `-F rules|nat|Tables|states|all` with and without `-a` (F93 pfctl.c main), `-k`, `-K`,
 *   `-T show|add|delete|replace|flush`.
 * - UNVERIFIED wording (no macOS source): the `-E`/`-X` messages, the `-s References` columns,
 *   the EINVAL text of an unknown token, the order of -E/-X among the other options.
 *
 * Driven by argv (plus stdin for `-f -`), it returns `{ exitCode, stdout, stderr }` shaped like
 * pfctl's, and records every call in an invocation log for audits. Its state is JSON
 * (`PfctlModelState`) so a separate process (the `pfctl` shim) can drive the same host.
 */

/** Everything the model holds; JSON-safe. */
export interface PfctlModelState {
  readonly version: 1;
  /** pf's running flag (DIOCSTART/DIOCSTOP). */
  enabled: boolean;
  /** `-E` tokens (XNU pf_ioctl.c generate_token 340–367). */
  tokens: PfctlModelToken[];
  /** `-e` took the token-less reference (XNU pf_ioctl.c 1614–1634). */
  tokenlessReference: boolean;
  nextToken: string;
  /** A logical clock in seconds (no wall clock: tests stay deterministic). */
  clock: number;
  /** Host interfaces and their addresses with prefix length (`192.168.64.1/22`). */
  interfaces: Record<string, string[]>;
  /** Files pfctl can read by path (`/etc/pf.conf`…); other paths go to the host reader. */
  files: Record<string, string>;
  anchors: Record<string, PfctlModelAnchor>;
  /** XNU per-anchor transaction tickets: rules (`pf_ioctl.c:979`) and tables (`pf_table.c:1643`). */
  tickets: Record<string, { rules: number; tables: number }>;
  states: PfState[];
  nextStateId: number;
  /** Round-robin NAT pools' positions (XNU pf_pool counter), by rule; absent in older states. */
  pools?: Record<string, number>;
  skip: string[];
  statePolicy: 'floating' | 'if-bound';
  /** Fault injection: another process begins a transaction on these anchors during our next load. */
  collisions: Record<string, number>;
  log: PfctlModelInvocation[];
}

export interface PfctlModelToken {
  readonly token: string;
  readonly pid: number;
  readonly name: string;
  readonly timestamp: number;
}

export interface PfctlModelAnchor {
  /** The texts loaded into this anchor: the file of the last load, then rules inserted by system services. */
  sources: {
    file: string;
    text: string;
    interfaces: Record<string, string[]>;
    /** The optimizer level it was loaded with (absent: none, as rules inserted without pfctl). */
    optimize?: 'none' | 'basic';
  }[];
  tables: Record<string, { entries: string[]; persist: boolean; constant: boolean }>;
  /** Rulesets emptied by `-F` since the last load. */
  flushed: PfRulesetName[];
  counters: Partial<Record<PfRulesetName, RuleCounters[]>>;
  /** Who loaded it (`-vsr` "Inserted: uid 0 pid N"). */
  pid: number;
}

interface RuleCounters {
  evaluations: number;
  packets: number;
  bytes: number;
}

export interface PfctlModelInvocation {
  readonly argv: readonly string[];
  readonly exitCode: number;
  readonly pid: number;
  readonly clock: number;
  /** The forms DESIGN.md §4 (pf) forbids egressguard, found in this call; empty when none. */
  readonly forbidden: readonly string[];
}

/**
 * What DESIGN.md §4 (pf) says egressguard must never run: a main-ruleset load (`-f` without
 * `-a`: it re-runs every `load anchor` and flushes what system services inserted), a flush
 * without `-a` (it removes the anchor points the system relies on), and `-d` (it stops pf and
 * invalidates every enable token, vmnet NAT included).
 */
export function findForbiddenPfctlForms(argv: readonly string[]): string[] {
  const seen = new Set<string>();
  for (let i = 0; i < argv.length; i++) {
    const arg = argv[i] ?? '';
    if (!arg.startsWith('-') || arg === '-') continue;
    for (let j = 1; j < arg.length; j++) {
      const letter = arg[j] ?? '';
      seen.add(letter);
      if (OPTIONS_WITH_VALUE.has(letter)) {
        if (j === arg.length - 1) i++; // the value is the next word
        break;
      }
    }
  }
  const forbidden: string[] = [];
  if (seen.has('f') && !seen.has('a')) forbidden.push('loads the main ruleset (-f without -a)');
  if (seen.has('F') && !seen.has('a')) forbidden.push('flushes without -a');
  if (seen.has('d')) forbidden.push('disables pf (-d)');
  return forbidden;
}

export interface PfctlResult {
  readonly exitCode: number;
  readonly stdout: string;
  readonly stderr: string;
}

export interface PfctlModelRunOptions {
  readonly stdin?: string;
  /** The caller's process id and name, recorded with `-E` tokens (XNU generate_token). */
  readonly pid?: number;
  readonly processName?: string;
  /** Reads a file the model does not hold itself (the shim reads the real filesystem). */
  readonly readFile?: (path: string) => string | undefined;
}

const MAIN = '';
/** The first token the model hands out; real tokens are 64-bit numbers too (pfioc_token). */
const FIRST_TOKEN = 9_007_199_254_740_993n;

export function createPfctlModelState(
  options: { interfaces?: Record<string, string[]>; files?: Record<string, string> } = {},
): PfctlModelState {
  return {
    version: 1,
    enabled: false,
    tokens: [],
    tokenlessReference: false,
    nextToken: FIRST_TOKEN.toString(),
    clock: 0,
    interfaces: options.interfaces ?? {},
    files: options.files ?? {},
    anchors: {},
    tickets: {},
    states: [],
    nextStateId: 1,
    skip: [],
    statePolicy: 'floating',
    collisions: {},
    log: [],
  };
}

/** The pfctl model around one state; `state` is mutated in place by every call. */
export class PfctlModel {
  private cache = new Map<string, PfAnchorLoad>();

  constructor(readonly state: PfctlModelState) {}

  /** Runs one pfctl command line (argv without the program name). */
  run(argv: readonly string[], options: PfctlModelRunOptions = {}): PfctlResult {
    const pid = options.pid ?? 1000 + this.state.log.length;
    let result: PfctlResult;
    try {
      result = new Invocation(this, argv, { ...options, pid }).execute();
    } catch (error) {
      if (!(error instanceof PfctlExit)) throw error;
      result = error.result;
    }
    this.state.log.push({
      argv: [...argv],
      forbidden: findForbiddenPfctlForms(argv),
      exitCode: result.exitCode,
      pid,
      clock: this.state.clock,
    });
    this.state.clock++;
    return result;
  }

  /** Advances the logical clock (seconds). */
  tick(seconds: number): void {
    this.state.clock += seconds;
  }

  /** Makes the next load that touches `anchor` collide with another process's transaction. */
  injectTransactionCollision(anchor: string, times = 1): void {
    this.state.collisions[anchor] = (this.state.collisions[anchor] ?? 0) + times;
  }

  /**
   * A system service inserting rules without a transaction (XNU DIOCINSERTRULE via /dev/pfm,
   * pf_ioctl.c:556-562; stock pf.conf: "some system services would dynamically insert anchors
   * into the main ruleset"). Internet Sharing's `com.apple.internet-sharing` anchors arrive so.
   */
  insertSystemRules(anchor: string, text: string): PfctlResult | null {
    const loaded = loadPfConfText(text, {
      file: `<${anchor}>`,
      anchorPath: anchor,
      interfaces: this.interfaceMap(),
      interfacesComplete: true,
    });
    if (loaded.load === null) {
      return { exitCode: 1, stdout: '', stderr: formatPfConfProblems(loaded.problems) };
    }
    const target = this.anchorFor(anchor);
    target.sources.push({ file: `<${anchor}>`, text, interfaces: { ...this.state.interfaces } });
    this.cache.delete(anchor);
    for (const [name, table] of loaded.load.tables) {
      target.tables[name] = serialiseTable(table);
    }
    this.resetCounters(anchor);
    return null;
  }

  /** A reboot: the kernel forgets rules, tables, states and tokens; files and interfaces stay. */
  reboot(): void {
    Object.assign(this.state, {
      enabled: false,
      tokens: [],
      tokenlessReference: false,
      anchors: {},
      states: [],
      skip: [],
      statePolicy: 'floating',
      tickets: {},
      collisions: {},
    });
    this.cache.clear();
  }

  /** Replaces an interface's addresses (DHCP renumbering, a utun coming back as another unit). */
  setInterface(name: string, addresses: string[] | null): void {
    if (addresses === null) Reflect.deleteProperty(this.state.interfaces, name);
    else this.state.interfaces[name] = addresses;
    // Loaded rules keep what pfctl resolved when they were loaded (each load keeps the
    // interfaces it saw): nothing expanded changes; dynamic `(if)` and route-to read them live.
  }

  /** One packet at one hook, through the evaluator; counters and states move as in pf. */
  sendPacket(packet: PfPacket): PfEvaluation {
    if (!this.state.enabled) return passDisabled(packet);
    const view = this.view();
    const table = this.stateTable();
    const result = evaluatePfPacket(view, table, packet);
    this.state.nextStateId = table.nextId;
    this.count(result, packet.bytes ?? 64);
    return result;
  }

  /** A forwarded packet: `in` on the ingress interface, then `out` on the egress one. */
  forwardPacket(
    packet: Omit<PfPacket, 'direction' | 'interface'> & { ingress: string; egress: string },
  ): PfForwarding {
    if (!this.state.enabled) {
      const leaving: PfPacket = { ...packet, direction: 'out', interface: packet.egress };
      return {
        inbound: passDisabled({ ...packet, direction: 'in', interface: packet.ingress }),
        outbound: passDisabled(leaving),
        verdict: 'pass',
        egress: packet.egress,
        leaving,
        routeFailed: false,
      };
    }
    const view = this.view();
    const table = this.stateTable();
    const result = evaluateForwardedPfPacket(view, table, packet);
    this.state.nextStateId = table.nextId;
    this.count(result.inbound, packet.bytes ?? 64);
    if (result.outbound !== null) this.count(result.outbound, packet.bytes ?? 64);
    return result;
  }

  /** What the evaluator reads: every anchor's rules and tables as the kernel holds them now. */
  view(): PfKernelView {
    const anchors = new Map<string, PfAnchorLoad>();
    for (const [path, anchor] of Object.entries(this.state.anchors)) {
      anchors.set(path, this.anchorLoad(path, anchor));
    }
    return {
      anchors,
      interfaces: this.interfaceMap(),
      skip: this.state.skip,
      statePolicy: this.state.statePolicy,
    };
  }

  /** Kernel rules of one anchor's ruleset, as loaded. */
  rules(anchor: string, ruleset: PfRulesetName): readonly PfKernelRule[] {
    const found = this.state.anchors[anchor];
    return found === undefined ? [] : this.anchorLoad(anchor, found).rulesets[ruleset];
  }

  /** The counters of one rule (`-vsr`), after the evaluations so far. */
  counters(ref: PfRuleRef): {
    evaluations: number;
    packets: number;
    bytes: number;
    states: number;
  } {
    const c = this.state.anchors[ref.anchor]?.counters[ref.ruleset]?.[ref.index];
    const states = this.state.states.filter(
      (s) =>
        s.rule !== null &&
        s.rule.anchor === ref.anchor &&
        s.rule.ruleset === ref.ruleset &&
        s.rule.index === ref.index,
    ).length;
    return {
      evaluations: c?.evaluations ?? 0,
      packets: c?.packets ?? 0,
      bytes: c?.bytes ?? 0,
      states,
    };
  }

  /** @internal */
  anchorFor(path: string): PfctlModelAnchor {
    let anchor = this.state.anchors[path];
    if (anchor === undefined) {
      anchor = { sources: [], tables: {}, flushed: [], counters: {}, pid: 0 };
      this.state.anchors[path] = anchor;
    }
    return anchor;
  }

  /** @internal */
  resetCounters(path: string): void {
    const anchor = this.state.anchors[path];
    if (anchor === undefined) return;
    const load = this.anchorLoad(path, anchor, true);
    anchor.counters = {};
    for (const name of PF_RULESET_NAMES) {
      anchor.counters[name] = load.rulesets[name].map(() => ({
        evaluations: 0,
        packets: 0,
        bytes: 0,
      }));
    }
  }

  /** @internal */
  interfaceMap(): Map<string, PfInterfaceAddress[]> {
    return parseInterfaceAddresses(this.state.interfaces);
  }

  /** @internal */
  forget(path: string): void {
    this.cache.delete(path);
  }

  private anchorLoad(path: string, anchor: PfctlModelAnchor, fresh = false): PfAnchorLoad {
    const cached = fresh ? undefined : this.cache.get(path);
    if (cached !== undefined) return withTables(cached, anchor);
    const parts: PfKernelRulesets[] = [];
    for (const source of anchor.sources) {
      // The interfaces it was loaded with, and no parse-time checks: what passed stays loaded
      // (a route-to interface gone since stays in the rule: the kernel keeps the name in a kif,
      // pfi_kif_get, and pf_route drops what it sends there).
      const loaded = loadPfConfText(source.text, {
        file: source.file,
        anchorPath: path,
        interfaces: parseInterfaceAddresses(source.interfaces),
      });
      // only loads that passed are stored
      if (loaded.load !== null) {
        parts.push(
          source.optimize === 'basic'
            ? optimizeFilterRuleset(loaded.load.rulesets, {
                noAction: false,
                counter: { next: 0 },
              }).rulesets
            : loaded.load.rulesets,
        );
      }
    }
    const all = concatRulesets(parts);
    const empty = concatRulesets([]);
    const rulesets: PfKernelRulesets = {
      scrub: anchor.flushed.includes('scrub') ? empty.scrub : all.scrub,
      filter: anchor.flushed.includes('filter') ? empty.filter : all.filter,
      nat: anchor.flushed.includes('nat') ? empty.nat : all.nat,
      rdr: anchor.flushed.includes('rdr') ? empty.rdr : all.rdr,
      binat: anchor.flushed.includes('binat') ? empty.binat : all.binat,
      dummynet: anchor.flushed.includes('dummynet') ? empty.dummynet : all.dummynet,
    };
    const load: PfAnchorLoad = { rulesets, tables: new Map() };
    this.cache.set(path, load);
    return withTables(load, anchor);
  }

  private stateTable(): PfStateTable {
    this.state.pools ??= {};
    return { states: this.state.states, nextId: this.state.nextStateId, pools: this.state.pools };
  }

  private count(result: PfEvaluation, bytes: number): void {
    for (const ref of result.evaluated) {
      const c = this.countersOf(ref);
      if (c !== undefined) c.evaluations++;
    }
    for (const ref of [result.rule, result.translation?.rule ?? null]) {
      if (ref === null) continue;
      const c = this.countersOf(ref);
      if (c === undefined) continue;
      c.packets++;
      c.bytes += bytes;
    }
  }

  private countersOf(ref: PfRuleRef): RuleCounters | undefined {
    const anchor = this.state.anchors[ref.anchor];
    if (anchor === undefined) return undefined;
    if (anchor.counters[ref.ruleset]?.length !== this.rules(ref.anchor, ref.ruleset).length) {
      this.resetCounters(ref.anchor);
    }
    return anchor.counters[ref.ruleset]?.[ref.index];
  }
}

function withTables(load: PfAnchorLoad, anchor: PfctlModelAnchor): PfAnchorLoad {
  const tables = new Map<string, PfTable>();
  for (const [name, table] of Object.entries(anchor.tables)) {
    tables.set(name, {
      entries: table.entries.map(parseTableEntry).filter((e) => e !== undefined),
      persist: table.persist,
      constant: table.constant,
    });
  }
  return { rulesets: load.rulesets, tables };
}

function passDisabled(packet: PfPacket): PfEvaluation {
  // pf disabled: nothing is filtered or translated (pfctl(8) -d).
  return {
    verdict: 'pass',
    returned: false,
    decidedBy: 'skip',
    fragment: null,
    rule: null,
    label: null,
    translation: null,
    tag: packet.tag ?? null,
    routeTo: null,
    stateMatched: null,
    stateCreated: null,
    packet,
    evaluated: [],
  };
}

function serialiseTable(table: PfTable): {
  entries: string[];
  persist: boolean;
  constant: boolean;
} {
  return {
    entries: table.entries.map((e) => `${e.negated ? '!' : ''}${formatPrefix(e.prefix)}`),
    persist: table.persist,
    constant: table.constant,
  };
}

function parseTableEntry(text: string): PfTableEntry | undefined {
  const negated = text.startsWith('!');
  const prefix = parsePrefix(negated ? text.slice(1) : text);
  return prefix === undefined ? undefined : { negated, prefix };
}

class PfctlExit extends Error {
  constructor(readonly result: PfctlResult) {
    super(`pfctl exited with ${result.exitCode}`);
  }
}

// getopt(3) string of pfctl (F93 pfctl.c main) plus Apple's -E and -X TOKEN (pfctl(8), macOS).
const OPTIONS_WITH_VALUE = new Set([
  'a',
  'o',
  'D',
  'f',
  'F',
  'i',
  'k',
  'K',
  'p',
  's',
  't',
  'T',
  'x',
  'X',
]);
const FLAG_OPTIONS = new Set([
  'A',
  'd',
  'e',
  'E',
  'g',
  'h',
  'm',
  'n',
  'N',
  'O',
  'q',
  'r',
  'R',
  'v',
  'z',
]);

const ALTQ_NOTICE = 'No ALTQ support in kernel\nALTQ related functions disabled\n';
// macOS pfctl's warning on `-f`, as macOS runs print it in public notes; a public installer
// script notes that "Apple's pfctl emits this main-ruleset warning even for an isolated anchor
// transaction", so the model prints it for `-a` loads too (wording observed; when exactly it is
// printed is unverified).
export const PFCTL_LOAD_WARNING =
  'pfctl: Use of -f option, could result in flushing of rules\n' +
  'present in the main ruleset added by the system at startup.\n' +
  'See /etc/pf.conf for further details.\n';
const NOT_LOADED = 'pfctl: Syntax error in config file: pf rules not loaded\n';
/** F93 pfctl.c pfctl_rules: the order pfctl_load_ruleset is called in (dummynet: Apple's). */
const LOAD_ORDER: readonly PfRulesetName[] = ['scrub', 'nat', 'rdr', 'binat', 'dummynet', 'filter'];

/** `-o` / `set ruleset-optimization`: pfctl reads the first letter (F93 pfctl.c main). */
function optimizerLevel(text: string): 'none' | 'basic' | 'profile' {
  if (text.startsWith('n')) return 'none';
  if (text.startsWith('p') || text.startsWith('o')) return 'profile';
  return 'basic';
}

type Transaction = { anchor: string; rules: number; tables: number }[];

interface LoadedFile {
  readonly anchor: string;
  readonly file: string;
  readonly text: string;
  readonly load: PfAnchorLoad;
  readonly options: readonly PfOption[];
  readonly optimize: 'none' | 'basic';
  /** Tables the optimizer made, in the order it made them (printed under -v). */
  readonly automatic: readonly string[];
}

interface ParsedArgs {
  anchor: string;
  flags: Set<string>;
  verbose: number;
  file: string | null;
  flush: string | null;
  show: string | null;
  kill: string[];
  killSources: string[];
  table: string | null;
  tableCommand: string | null;
  release: string | null;
  /** `-o none|basic|profile` (F93 pfctl.c main: the first letter decides). */
  optimize: string | null;
  operands: string[];
}

/** One pfctl run against the model. */
class Invocation {
  private stdout = '';
  private stderr = '';
  private readonly state: PfctlModelState;

  constructor(
    private readonly model: PfctlModel,
    private readonly argv: readonly string[],
    private readonly options: PfctlModelRunOptions & { pid: number },
  ) {
    this.state = model.state;
  }

  execute(): PfctlResult {
    const args = this.parseArgs();
    const noAction = args.flags.has('n');
    if (args.anchor !== '' && args.anchor.split('/').some((p) => p.startsWith('_'))) {
      // F93 pfctl.c main: reserved names cannot be touched from the command line.
      this.fail("pfctl: anchor names beginning with '_' cannot be modified from the command line");
    }
    // The order of F93 pfctl.c main: -d, -s, -F, -k, -K, -T, -f, then -e. Apple's -X and -E sit
    // with -d and -e (an assumption: Apple's pfctl source is not public, NOTES §0). Under -n
    // pfctl masks -e/-d and drops -s/-F/-x (F93 pfctl.c:2193-2205, NOTES §2).
    if (!noAction) {
      if (args.flags.has('d')) this.disable();
      if (args.release !== null) this.releaseToken(args.release);
      if (args.show !== null) this.show(args);
      if (args.flush !== null) this.flush(args);
      if (args.kill.length > 0) this.killStates(args.kill);
      if (args.killSources.length > 0) {
        // `-K`: source-tracking nodes, which the model does not keep (F93 pfctl_kill_src_nodes).
        this.stderr += `killed 0 src nodes from 1 sources and ${args.killSources.length > 1 ? 1 : 0} destinations\n`;
      }
    }
    if (args.tableCommand !== null) this.tableCommand(args, noAction);
    if (args.file !== null) this.loadFile(args, noAction);
    if (!noAction) {
      if (args.flags.has('e')) this.enable();
      if (args.flags.has('E')) this.enableWithToken();
    }
    return { exitCode: 0, stdout: this.stdout, stderr: this.stderr };
  }

  private fail(message: string, exitCode = 1): never {
    throw new PfctlExit({
      exitCode,
      stdout: this.stdout,
      stderr: `${this.stderr}${message}${message.endsWith('\n') ? '' : '\n'}`,
    });
  }

  private unsupported(what: string): never {
    this.fail(`pfctl-model: ${what} is not modelled`, 2);
  }

  private parseArgs(): ParsedArgs {
    const parsed: ParsedArgs = {
      anchor: '',
      flags: new Set(),
      verbose: 0,
      file: null,
      flush: null,
      show: null,
      kill: [],
      killSources: [],
      table: null,
      tableCommand: null,
      release: null,
      optimize: null,
      operands: [],
    };
    for (let i = 0; i < this.argv.length; i++) {
      const arg = this.argv[i] ?? '';
      if (!arg.startsWith('-') || arg === '-') {
        parsed.operands.push(arg);
        continue;
      }
      for (let j = 1; j < arg.length; j++) {
        const letter = arg[j] ?? '';
        if (OPTIONS_WITH_VALUE.has(letter)) {
          let value = arg.slice(j + 1);
          if (value === '') {
            i++;
            value = this.argv[i] ?? this.fail(`pfctl: option requires an argument -- ${letter}`);
          }
          this.option(parsed, letter, value);
          break;
        }
        if (!FLAG_OPTIONS.has(letter)) this.fail(`pfctl: illegal option -- ${letter}`);
        if (letter === 'v') parsed.verbose++;
        else parsed.flags.add(letter);
      }
    }
    return parsed;
  }

  private option(parsed: ParsedArgs, letter: string, value: string): void {
    switch (letter) {
      case 'a':
        parsed.anchor = value.replace(/^\/+/, '');
        break;
      case 'f':
        parsed.file = value;
        break;
      case 'F':
        parsed.flush = value;
        break;
      case 's':
        parsed.show = value;
        break;
      case 'k':
        parsed.kill.push(value);
        break;
      case 'K':
        parsed.killSources.push(value);
        break;
      case 't':
        parsed.table = value;
        break;
      case 'T':
        parsed.tableCommand = value;
        break;
      case 'X':
        parsed.release = value;
        break;
      case 'o':
        parsed.optimize = value;
        break;
      default:
        this.unsupported(`-${letter}`);
    }
  }

  // ---- enable / disable and references (XNU pf_ioctl.c, NOTES §3) ----

  /** `-e` = DIOCSTART: EEXIST when running; the token-less reference is taken once (1614–1634). */
  private enable(): void {
    if (!this.state.tokenlessReference) this.state.tokenlessReference = true;
    if (this.state.enabled) this.fail('pfctl: pf already enabled');
    this.state.enabled = true;
    this.stderr += 'pf enabled\n';
  }

  /** `-E` = DIOCSTARTREF: starts pf if stopped, adds a reference, returns a token (1636–1656). */
  private enableWithToken(): void {
    const token = this.state.nextToken;
    this.state.nextToken = (BigInt(token) + 7919n).toString();
    this.state.tokens.push({
      token,
      pid: this.options.pid,
      // XNU generate_token records the calling process: pfctl itself, not its parent.
      name: this.options.processName ?? 'pfctl',
      timestamp: this.state.clock,
    });
    this.state.enabled = true;
    // Printed on stderr, as scripts read it with `pfctl -E 2>&1` (wording: public notes).
    this.stderr += `pf enabled\nToken : ${token}\n`;
  }

  /** `-X TOKEN` = DIOCSTOPREF: removes that token; pf stops when no reference is left (1668–1694). */
  private releaseToken(token: string): void {
    const index = this.state.tokens.findIndex((t) => t.token === token);
    if (index < 0) {
      // An unknown token is EINVAL ("token mismatch"); the message wording is unverified.
      this.fail('pfctl: DIOCSTOPREF: Invalid argument');
    }
    this.state.tokens.splice(index, 1);
    if (this.references() === 0 && this.state.enabled) {
      this.state.enabled = false;
      this.stderr += 'pf disabled\n';
    }
  }

  /** `-d` = DIOCSTOP: stops pf, zeroes the count, invalidates every token (1658–1666, 391–403). */
  private disable(): void {
    if (!this.state.enabled) this.fail('pfctl: pf not enabled');
    this.state.enabled = false;
    this.state.tokens = [];
    this.state.tokenlessReference = false;
    this.stderr += 'pf disabled\n';
  }

  private references(): number {
    return this.state.tokens.length + (this.state.tokenlessReference ? 1 : 0);
  }

  // ---- loading (NOTES §2, §4) ----

  private readText(path: string): string {
    if (path === '-') return this.options.stdin ?? '';
    const text = this.state.files[path] ?? this.options.readFile?.(path);
    if (text === undefined) this.fail(`pfctl: ${path}: No such file or directory`);
    return text;
  }

  private loadFile(args: ParsedArgs, noAction: boolean): void {
    const file = args.file ?? '';
    const text = this.readText(file);
    const main = args.anchor === MAIN;
    if (!noAction) {
      // ALTQ is masked out of anchor loads (`loadopt &= …`, F93 pfctl.c:2191).
      this.stderr += main ? `${PFCTL_LOAD_WARNING}\n${ALTQ_NOTICE}` : PFCTL_LOAD_WARNING;
    }
    // F93 pfctl.c main: `-o` overrides the file's `set ruleset-optimization`; the default is
    // basic (`static int optimize = PF_OPTIMIZE_BASIC`). Profile reads the running ruleset's
    // counters to reorder quick rules (block_feedback): not modelled.
    const forced = args.optimize === null ? null : optimizerLevel(args.optimize);
    if (forced === 'profile') this.unsupported('-o profile (ruleset reordering by counters)');

    // One transaction for the whole load: the main ruleset (or the -a anchor), then each
    // `load anchor` of a main-ruleset load (F93 pfctl.c pfctl_rules; pfctl_ruleset_trans
    // 1235-1261 begins the elements of each anchor as it is reached). Under -n nothing is begun
    // and no table is defined (F93 pfctl.c pfctl_rules: `if ((opts & PF_OPT_NOACTION) == 0)`
    // around DIOCXBEGIN; parse.y process_tabledef defines a table only without -n), but every
    // `load anchor` is still parsed (pfctl_load_anchors runs either way), so a duplicated one
    // is parsed twice and passes.
    const transaction: Transaction = [];
    const loads: LoadedFile[] = [];
    const problems: string[] = [];
    // Set inside loadOne: an object, so the check after the loads sees it.
    const seen = { notModelled: false };
    const counter = { next: 0 };

    const loadOne = (
      anchor: string,
      path: string,
      body: string,
    ): readonly { anchor: string; file: string }[] => {
      const shown = path === '-' ? 'stdin' : path;
      if (!noAction) this.begin(anchor, transaction);
      const loaded = loadPfConfText(body, {
        file: shown,
        anchorPath: anchor,
        interfaces: this.model.interfaceMap(),
        interfacesComplete: true,
        readFile: (p) => this.state.files[p] ?? this.options.readFile?.(p),
      });
      if (loaded.load === null) {
        problems.push(formatPfConfProblems(loaded.problems));
        seen.notModelled ||= loaded.problems.some(isNotModelled);
        return [];
      }
      const fromFile = loaded.conf.options.find((o) => o.name === 'ruleset-optimization');
      const level =
        forced ?? (fromFile === undefined ? 'basic' : optimizerLevel(fromFile.value[0] ?? ''));
      if (level === 'profile') this.unsupported('set ruleset-optimization profile');
      let load = loaded.load;
      let automatic: string[] = [];
      if (level === 'basic') {
        const optimized = optimizeFilterRuleset(load.rulesets, { noAction, counter });
        automatic = [...optimized.tables.keys()];
        load = {
          rulesets: optimized.rulesets,
          tables: new Map([...load.tables, ...optimized.tables]),
        };
      }
      if (!noAction) {
        // Tables are defined while parsing, with the transaction's FIRST ticket for the anchor
        // (pfctl_get_ticket, pfctl_parser.c:1731-1740); the kernel answers EBUSY when another
        // begin has moved the anchor's table ticket since (pfr_ina_define, pf_table.c:1677-1679),
        // and pfctl prints "cannot define table NAME: Resource busy" (parse.y:4546-4550).
        const first = transaction.find((t) => t.anchor === anchor);
        if (first?.tables !== this.state.tickets[anchor]?.tables) {
          for (const table of loaded.conf.tables) {
            problems.push(
              `${shown}:${table.line}: cannot define table ${table.name}: Resource busy\n`,
            );
          }
        }
      }
      loads.push({
        anchor,
        file: shown,
        text: body,
        load,
        options: loaded.conf.options,
        optimize: level,
        automatic,
      });
      // `load anchor` is processed only for the main ruleset (pfctl.c:1505-1507): in an anchor
      // file loaded with -a it is silently ignored (NOTES §2).
      return main && anchor === MAIN ? loaded.conf.loadAnchors : [];
    };

    const anchorLines = loadOne(args.anchor, file, text);
    for (const line of anchorLines) {
      const body = this.state.files[line.file] ?? this.options.readFile?.(line.file);
      if (body === undefined) {
        problems.push(`pfctl: ${line.file}: No such file or directory\n`);
        continue;
      }
      loadOne(line.anchor, line.file, body);
    }
    if (problems.length > 0) {
      // The transaction is rolled back (F93 pfctl.c ERRX → DIOCXROLLBACK): nothing changes.
      this.stderr += problems.join('');
      // A file the model cannot judge is not one pfctl would refuse: say so, with exit 2.
      if (seen.notModelled) {
        this.fail(
          'pfctl-model: the file uses what the model does not implement (not modelled, above): nothing loaded',
          2,
        );
      }
      this.fail(NOT_LOADED);
    }
    if (args.verbose > 0) {
      // -v prints each rule as pfctl_load_rule loads it, rulesets in pfctl_rules' order
      // (scrub, nat, rdr, binat, then filter), after the optimizer's tables (print_tabledef).
      for (const { load, automatic } of loads) {
        for (const name of automatic) {
          const table = load.tables.get(name);
          if (table === undefined) continue;
          const entries = table.entries.map(
            (e) => `${e.negated ? '!' : ''}${formatPrefix(e.prefix)}`,
          );
          this.stdout += `table <${name}> const { ${entries.join(', ')} }\n`;
        }
        for (const name of LOAD_ORDER) {
          for (const rule of load.rulesets[name]) this.stdout += `${formatPfRule(rule)}\n`;
        }
      }
    }
    if (noAction) return;

    // DIOCXCOMMIT checks every element's ticket before it commits any (pf_ioctl.c:4303-4331).
    for (const element of transaction) {
      const current = this.state.tickets[element.anchor];
      if (current?.rules !== element.rules || current.tables !== element.tables) {
        this.fail('pfctl: DIOCXCOMMIT: Resource busy');
      }
    }
    for (const load of loads) this.commit(load, main && load.anchor === MAIN);
  }

  /** DIOCXBEGIN for one anchor's rules and tables: both tickets move (pf_ioctl.c:979, pf_table.c:1643). */
  private begin(anchor: string, transaction: Transaction): void {
    const tickets = this.state.tickets[anchor] ?? { rules: 0, tables: 0 };
    tickets.rules++;
    tickets.tables++;
    this.state.tickets[anchor] = tickets;
    transaction.push({ anchor, rules: tickets.rules, tables: tickets.tables });
    const collisions = this.state.collisions[anchor] ?? 0;
    if (collisions > 0) {
      // Another process begins a transaction on this anchor between our begin and our table
      // definitions (NOTES §4: "the same happens when another process … begins a transaction").
      this.state.collisions[anchor] = collisions - 1;
      tickets.rules++;
      tickets.tables++;
    }
  }

  /**
   * Replaces an anchor's rules and tables, as one committed transaction does: every ruleset of
   * the anchor, its tables (a persistent table not redefined survives, pf.conf(5) TABLES), fresh
   * counters. The main ruleset's options apply only from a main load (-a ignores options,
   * F93 pfctl.c:2191).
   */
  private commit(
    { anchor, file, text, load, options, optimize }: LoadedFile,
    isMain: boolean,
  ): void {
    const target = this.model.anchorFor(anchor);
    target.sources = [{ file, text, interfaces: { ...this.state.interfaces }, optimize }];
    target.flushed = [];
    const kept = Object.entries(target.tables).filter(([, t]) => t.persist);
    target.tables = Object.fromEntries(kept);
    for (const [name, table] of load.tables) target.tables[name] = serialiseTable(table);
    // A table a rule names but no file defines exists, empty, as soon as a rule references it.
    for (const name of PF_RULESET_NAMES) {
      for (const rule of load.rulesets[name]) {
        for (const end of [rule.from, rule.to]) {
          if (end.address.kind === 'table' && target.tables[end.address.name] === undefined) {
            target.tables[end.address.name] = { entries: [], persist: false, constant: false };
          }
        }
        if (rule.kind === 'anchor') this.model.anchorFor(rule.path);
      }
    }
    target.pid = this.options.pid;
    this.model.forget(anchor);
    this.model.resetCounters(anchor);
    if (isMain) {
      // Options come from a main-ruleset load only (-a ignores them, F93 pfctl.c:2191).
      this.state.skip = [];
      this.state.statePolicy = 'floating';
      for (const option of options) {
        if (option.name === 'skip') {
          this.state.skip = option.value.filter((w) => !['on', '{', '}', ','].includes(w));
        }
        if (option.name === 'state-policy') {
          this.state.statePolicy = option.value[0] === 'if-bound' ? 'if-bound' : 'floating';
        }
      }
    }
  }

  // ---- -F ----

  /** `-F` (F93 pfctl.c main): with -a only that anchor's rules, nat and tables. */
  private flush(args: ParsedArgs): void {
    const what = args.flush ?? '';
    const anchor = this.state.anchors[args.anchor];
    const clear = (rulesets: readonly PfRulesetName[], message: string): void => {
      if (anchor !== undefined) {
        anchor.flushed = [...new Set([...anchor.flushed, ...rulesets])];
        this.model.forget(args.anchor);
        this.model.resetCounters(args.anchor);
      }
      this.stderr += message;
    };
    const clearTables = (): void => {
      const count = anchor === undefined ? 0 : Object.keys(anchor.tables).length;
      if (anchor !== undefined) anchor.tables = {};
      this.stderr += `${count} tables deleted.\n`;
    };
    const clearStates = (): void => {
      const count = this.state.states.length;
      this.state.states = [];
      this.stderr += `${count} states cleared\n`;
    };
    switch (what[0]) {
      case 'r':
        clear(['scrub', 'filter'], 'rules cleared\n');
        return;
      case 'n':
        clear(['nat', 'rdr', 'binat'], 'nat cleared\n');
        return;
      case 'T':
        clearTables();
        return;
      case 's':
        clearStates();
        return;
      case 'a':
        clear(PF_RULESET_NAMES, 'rules cleared\nnat cleared\n');
        clearTables();
        // Only without -a does `-F all` also clear states (F93 pfctl.c main, `if (!*anchorname)`).
        if (args.anchor === MAIN) clearStates();
        return;
      default:
        this.unsupported(`-F ${what}`);
    }
  }

  // ---- -s ----

  private show(args: ParsedArgs): void {
    const what = args.show ?? '';
    switch (what[0]) {
      case 'r':
        this.showRules(args, ['scrub', 'filter']);
        return;
      case 'n':
        this.showRules(args, ['nat', 'rdr', 'binat']);
        return;
      case 'A':
        this.showAnchors(args);
        return;
      case 'T':
        for (const name of Object.keys(this.state.anchors[args.anchor]?.tables ?? {}).sort()) {
          this.stdout += `${name}\n`;
        }
        return;
      case 'R':
        this.showReferences();
        return;
      case 'I': {
        // F93 pfctl_show_ifaces / print_iface: every kif by name (RB order), `(skip)` with -v.
        const names = [
          ...new Set(['all', ...Object.keys(this.state.interfaces), ...this.state.skip]),
        ];
        for (const name of names.sort((a, b) => (a < b ? -1 : a > b ? 1 : 0))) {
          const skipped = args.verbose > 0 && this.state.skip.includes(name) ? ' (skip)' : '';
          this.stdout += `${name}${skipped}\n`;
        }
        return;
      }
      case 'i':
        this.stdout += `Status: ${this.state.enabled ? 'Enabled' : 'Disabled'} for ${formatUptime(this.state.clock)}           Debug: Urgent\n\n`;
        this.stdout += `State Table                          Total             Rate\n`;
        this.stdout += `  current entries                    ${String(this.state.states.length).padEnd(18)}\n`;
        return;
      case 's':
        for (const state of this.state.states) this.stdout += `${formatState(state)}\n`;
        return;
      default:
        this.unsupported(`-s ${what}`);
    }
  }

  /** `-sr` / `-sn` (F93 pfctl_show_rules; counters as pfctl_print_rule_counters prints them). */
  private showRules(args: ParsedArgs, rulesets: PfRulesetName[]): void {
    const anchor = this.state.anchors[args.anchor];
    if (anchor === undefined && args.anchor !== '') {
      this.fail('pfctl: DIOCGETRULES: Invalid argument');
    }
    for (const ruleset of rulesets) {
      const rules = this.model.rules(args.anchor, ruleset);
      rules.forEach((rule, index) => {
        const numbered = args.verbose > 1 ? `@${index} ` : '';
        this.stdout += `${numbered}${formatPfRule(rule)}\n`;
        if (args.verbose > 0) {
          const c = this.model.counters({ anchor: args.anchor, ruleset, index });
          this.stdout += `  [ Evaluations: ${String(c.evaluations).padEnd(8)}  Packets: ${String(c.packets).padEnd(8)}  Bytes: ${String(c.bytes).padEnd(10)}  States: ${String(c.states).padEnd(6)}]\n`;
          this.stdout += `  [ Inserted: uid 0 pid ${anchor?.pid ?? 0} ]\n`;
        }
      });
    }
  }

  /** `-s Anchors`: the anchor's direct children, `-v` all descendants (F93 pfctl_show_anchors). */
  private showAnchors(args: ParsedArgs): void {
    const paths = Object.keys(this.state.anchors);
    if (
      args.anchor !== MAIN &&
      !paths.some((p) => p === args.anchor || p.startsWith(`${args.anchor}/`))
    ) {
      this.fail('pfctl: DIOCGETRULESETS: Invalid argument');
    }
    const walk = (parent: string): void => {
      for (const child of listChildAnchors(paths, parent)) {
        this.stdout += `  ${child}\n`;
        if (args.verbose > 0) walk(child);
      }
    };
    walk(args.anchor);
  }

  /** `-s References` (DIOCGETSTARTERS, XNU 1696–1704); the column layout is unverified. */
  private showReferences(): void {
    this.stdout += 'TOKENS:\n';
    this.stdout += `${'PID'.padEnd(9)}${'Process Name'.padEnd(28)}${'TOKEN'.padEnd(26)}TIMESTAMP\n`;
    for (const t of this.state.tokens) {
      this.stdout += `${String(t.pid).padEnd(9)}${t.name.padEnd(28)}${t.token.padEnd(26)}${formatUptime(t.timestamp)}\n`;
    }
  }

  // ---- -k ----

  /** `-k src [-k dst]`: kills states from a host or network (pfctl(8); F93 pfctl_kill_states). */
  private killStates(specs: readonly string[]): void {
    const [source, destination] = specs.map((spec) => {
      const prefix = parsePrefix(spec);
      if (prefix === undefined) this.fail(`pfctl: could not parse host specification: ${spec}`);
      return prefix;
    });
    if (source === undefined) return;
    const inside = (family: Family, text: string, prefix: typeof source): boolean => {
      if (prefix.family !== family) return false;
      const value = parseAddress(text)?.value;
      if (value === undefined) return false;
      const end = prefixEnd(prefix);
      return value >= prefix.start && value <= end;
    };
    let killed = 0;
    this.state.states = this.state.states.filter((state) => {
      // A state's source is the connection's initiator: lan for outbound, ext for inbound.
      const from = state.direction === 'out' ? state.lan : state.ext;
      const to = state.direction === 'out' ? state.ext : state.lan;
      const hit =
        inside(state.family, from.address, source) &&
        (destination === undefined || inside(state.family, to.address, destination));
      if (hit) killed++;
      return !hit;
    });
    this.stderr += `killed ${killed} states from 1 sources and ${destination === undefined ? 0 : 1} destinations\n`;
  }

  // ---- -T ----

  private tableCommand(args: ParsedArgs, noAction: boolean): void {
    if (args.table === null) this.fail('pfctl: table command requires -t');
    const name = args.table;
    const anchor = this.state.anchors[args.anchor];
    const table = anchor?.tables[name];
    const command = args.tableCommand ?? '';
    if (command === 'show') {
      if (table === undefined) this.fail('pfctl: Table does not exist.');
      for (const entry of table.entries) {
        const negated = entry.startsWith('!');
        this.stdout += `  ${negated ? '!' : ' '}${negated ? entry.slice(1) : entry}\n`;
      }
      return;
    }
    if (!['add', 'delete', 'replace', 'flush'].includes(command)) this.unsupported(`-T ${command}`);
    const addresses = args.operands.map((text) => {
      const negated = text.startsWith('!');
      const prefix = parsePrefix(negated ? text.slice(1) : text);
      if (prefix === undefined) this.fail(`pfctl: cannot parse ${text}`);
      return `${negated ? '!' : ''}${formatPrefix(prefix)}`;
    });
    if (noAction) return;
    const target =
      table ??
      (command === 'add' || command === 'replace'
        ? { entries: [], persist: false, constant: false }
        : undefined);
    if (target === undefined) this.fail('pfctl: Table does not exist.');
    if (target.constant) this.fail('pfctl: Operation not permitted.');
    const before = new Set(target.entries);
    let entries: string[];
    if (command === 'add')
      entries = [...target.entries, ...addresses.filter((a) => !before.has(a))];
    else if (command === 'delete') entries = target.entries.filter((e) => !addresses.includes(e));
    else if (command === 'replace') entries = [...new Set(addresses)];
    else entries = [];
    const changed =
      command === 'add'
        ? entries.length - target.entries.length
        : command === 'delete' || command === 'flush'
          ? target.entries.length - entries.length
          : addresses.length;
    this.model.anchorFor(args.anchor).tables[name] = { ...target, entries };
    const verb =
      { add: 'added', delete: 'deleted', replace: 'replaced', flush: 'deleted' }[command] ?? '';
    this.stderr += `${changed}/${command === 'flush' ? target.entries.length : addresses.length} addresses ${verb}.\n`;
  }
}

function formatUptime(seconds: number): string {
  const days = Math.floor(seconds / 86400);
  const h = Math.floor((seconds % 86400) / 3600);
  const m = Math.floor((seconds % 3600) / 60);
  const s = seconds % 60;
  const two = (n: number): string => String(n).padStart(2, '0');
  return `${days} days ${two(h)}:${two(m)}:${two(s)}`;
}

/** One state as `pfctl -s states` prints it (OpenBSD 4.5 print_state: `lan (gwy) -> ext`). */
function formatState(state: PfState): string {
  const endpoint = (e: { address: string; port: number }): string =>
    state.protocol === 6 || state.protocol === 17
      ? `${state.family === 6 ? `[${e.address}]` : e.address}:${e.port}`
      : e.address;
  const translated =
    state.lan.address !== state.gwy.address || state.lan.port !== state.gwy.port
      ? ` (${endpoint(state.gwy)})`
      : '';
  const arrow = state.direction === 'out' ? '->' : '<-';
  const status =
    state.protocol === 6
      ? 'ESTABLISHED:ESTABLISHED'
      : state.protocol === 17
        ? 'MULTIPLE:MULTIPLE'
        : '0:0';
  return `${state.boundTo ?? 'all'} ${formatProtocol(state.protocol)} ${endpoint(state.lan)}${translated} ${arrow} ${endpoint(state.ext)}       ${status}`;
}
