import type { StepTimer } from '../core/index.js';
import type { HostFacts } from '../facts/index.js';
import type { EvaluationState, HostIR, Packet, PolicyIR } from '../ir/index.js';
import type { Policy } from '../policy/index.js';
import type { CommandClass, Runner } from '../runner/index.js';

/**
 * The seam every backend plugs into (Kysely's Dialect): a factory of collaborators, and what
 * commands need to know of it, as data. Shared code asks the backend, never tests its name.
 * Adding a backend is a folder under src/backends/ and one line in the registry
 * (docs/architecture.md).
 */
export interface Backend {
  /** Stable name: `--target`, golden files (`expected.<name>.<artifact>`), generations. */
  readonly name: string;
  /** The layer explain and prove name for this backend's filtering (its firewall's name). */
  readonly layer: string;
  /**
   * The layer that picks a tunnel class's exit, when not policy routing beside the firewall
   * (pf's `route-to` is a filter rule: `pf`). Absent: `routing`.
   */
  readonly routingLayer?: string;
  readonly capabilities: Capabilities;
  /** The options it takes (its owned table, routing ids, anchor), each with its flag. */
  readonly options: readonly BackendOption[];
  /** What each artifact it compiles is for, by artifact name. */
  readonly artifactRoles: Readonly<Record<string, ArtifactRole>>;
  /** The firewall state it owns on a host with these options, in words. */
  describeScope(options: BackendOptions): string;
  /**
   * Whether a command line of one of its tools only reads state (the root-namespace guard lets
   * reads through); undefined when the command is not one of its tools.
   */
  readonly classifyCommand?: (argv: readonly string[], input?: string) => CommandClass | undefined;
  /** Versions of its tools on the host (recorded in facts and evidence). */
  readonly readVersions?: (runner: Runner) => Promise<Readonly<Record<string, string>>>;
  /**
   * The host's interfaces, read live with its OS's tools: where boot looks for a tunnel found by
   * `match` before it loads a generation bound to an interface that may have moved: for a
   * firewall that cannot load rules naming an absent interface, on an OS that renumbers tunnels
   * (macOS utuns). Without it boot loads the generation as recorded (one that loads with its
   * tunnel absent, whose resident mode re-binds from live facts as soon as it starts).
   */
  readonly readInterfaces?: (runner: Runner) => Promise<HostFacts['interfaces']>;
  createCompiler(): Compiler;
  createApplier(context: BackendContext): Applier;
  createInspector(context: BackendContext): Inspector;
  /** Present when the backend can watch live state (the resident mode `run`). */
  createWatcher?(context: BackendContext): Watcher;
  readonly doctor?: DoctorSupport;
  readonly drops?: DropsSupport;
  readonly units?: UnitsSupport;
  /**
   * Present when the backend keeps the confirm-or-revert timer with its OS's own service manager
   * (a one-shot LaunchDaemon); absent: the apply layer's timer (systemd-run, or a process).
   */
  readonly confirmTimer?: ConfirmTimerSupport;
  readonly prove?: ProveSupport;
  readonly selftest?: SelftestSupport;
  /** Present when the backend keeps state on a cluster from one of its nodes (`run --k8s`). */
  readonly cluster?: ClusterSupport;
  readonly suites?: SuiteSupport;
}

/**
 * A test suite generated from a policy's requirements and probes, for an environment egressguard
 * cannot run itself (a cluster): `prove POLICY --emit FORMAT DIR`.
 */
export interface SuiteSupport {
  /** The formats it writes (`chainsaw`). */
  readonly formats: readonly string[];
  /** The options it takes, each with its flag. */
  readonly options: readonly BackendOption[];
  /** Pure: the suite's files; throws a `usage` error with every problem of the input. */
  emit(input: {
    readonly format: string;
    readonly policy: Policy;
    readonly ir: HostIR;
    /** The facts of the host the suite centres on (the gateway node). */
    readonly facts: HostFacts;
    readonly options: BackendOptions;
  }): { readonly files: readonly Artifact[]; readonly notes: readonly string[] };
}

/** One file a backend writes (a ruleset, route specs, a unit, an anchor). */
export interface Artifact {
  readonly name: string;
  readonly content: string;
}

/**
 * What an artifact is for: `firewall` (what packets meet), `routing` (policy routing specs),
 * `lockdown` (loaded by `restore` when the state is lost: every class dropped), `other`.
 */
export type ArtifactRole = 'firewall' | 'routing' | 'lockdown' | 'other';

/** An option a backend declares; commands offer it as `flag`, with `default` when absent. */
export interface BackendOption {
  /** The key in BackendOptions (`table`, `routeTable`). */
  readonly key: string;
  /** The command-line flag, commander style (`--table <name>`). */
  readonly flag: string;
  readonly description: string;
  readonly default?: string;
  /**
   * Set only on the host itself: a tool's path, a file root writes, how pf.conf is edited. A
   * fleet push may not set it (a compromised controller must not choose what root runs or writes).
   */
  readonly hostOnly?: boolean;
}

/** The values of a backend's options, by key; absent: the declared default. */
export type BackendOptions = Readonly<Record<string, string | undefined>>;

export interface CompileOptions {
  /** The host config hash to stamp, or the blank stamp while hashing. */
  readonly stamp?: string;
  readonly options?: BackendOptions;
}

/** Pure: the IR bound to a host → artifacts. No clock, filesystem, process or network. */
export interface Compiler {
  compile(ir: HostIR, options?: CompileOptions): readonly Artifact[];
  /**
   * What a person should know of what `compile` emits for this IR, each a sentence for a
   * warning (a class compiled kill-switch-only while its tunnel is absent); pure like compile.
   */
  notes?(ir: HostIR, options?: CompileOptions): readonly string[];
}

/**
 * What shared code must know of a backend and cannot learn from its collaborators; it asks these,
 * never the backend's name. Only what something reads belongs here (an architecture test checks).
 */
export interface Capabilities {
  /** The enforcer runs on this machine, so differential tests use the real thing. */
  readonly runsHere: boolean;
  /** Enforces Kubernetes classes (pods); `explain` names its layer for them. */
  readonly supportsPodClasses?: boolean;
  /** What `explain` says of a pod packet about where it is enforced, when supportsPodClasses. */
  readonly podLayerNotes?: readonly string[];
}

export interface BackendContext {
  readonly runner: Runner;
  readonly options: BackendOptions;
}

export interface PlanResult {
  /** One line per change: `+`/`-`/`~` and what. Empty when live already matches. */
  readonly changes: readonly string[];
  /** Problems that would make the apply fail (a rejected ruleset, a collision). */
  readonly problems: readonly string[];
  /**
   * The firewall's change by policy rule id and address set, when the backend knows what is live
   * in that detail (the generation it recorded is the one live); the lines of `changes` say it too.
   */
  readonly firewall?: FirewallDiff;
}

/** How the firewall's rules and address sets change, by policy id: what `plan` shows. */
export interface FirewallDiff {
  /** Rule ids (policy ids, implicit rules' ids such as `vpn/kill-switch`) added, removed, changed. */
  readonly rules: {
    readonly added: readonly string[];
    readonly removed: readonly string[];
    /** The same id with another match, verdict or place in its chain. */
    readonly changed: readonly string[];
  };
  /** Address sets whose elements change, each named by what it is for. */
  readonly sets: readonly SetElementsDiff[];
}

export interface SetElementsDiff {
  /** What the set is for, as the firewall labels it (`class vpn sources`, `rule deny-blocked`). */
  readonly set: string;
  readonly family: 'ipv4' | 'ipv6';
  readonly added: number;
  readonly removed: number;
  /** A few of each (at most 3), in the firewall's order. */
  readonly sampleAdded: readonly string[];
  readonly sampleRemoved: readonly string[];
}

export interface PlanOptions {
  /**
   * The artifacts of the generation recorded as applied: what is live when the live stamp
   * carries its hash, so the backend can compare rule by rule. Absent: none recorded.
   */
  readonly applied?: readonly Artifact[];
}

export interface ApplyResult {
  /** Parts that wait for something absent (a route via a tunnel that is down). */
  readonly deferred: readonly LiveProblem[];
}

/** Effects: puts artifacts on a host (or namespace) and removes them. */
export interface Applier {
  plan(artifacts: readonly Artifact[], options?: PlanOptions): Promise<PlanResult>;
  /**
   * Applies atomically where the backend can. When a later step fails after the firewall
   * commit, re-applies `previous` and throws a `partially-applied` error.
   */
  apply(
    artifacts: readonly Artifact[],
    options: {
      readonly previous: readonly Artifact[] | undefined;
      /** The firewall state is known intact: only converge routing. */
      readonly routingOnly?: boolean;
      /** Rewrite state the read-back cannot see (set elements) even where it looks current. */
      readonly force?: boolean;
      /** Times the apply's steps (read live, stage, swap, routing) into the caller's timer. */
      readonly timer?: StepTimer;
    },
  ): Promise<ApplyResult>;
  /** Removes only what we own: routing first, then the firewall state. */
  remove(): Promise<{ readonly removed: readonly string[] }>;
  /** Loads the class lockdown (drop everything of every class) kept for a lost state. */
  lockdown(content: string): Promise<void>;
}

export interface LiveCounter {
  /** The policy id the counter belongs to (rule, default, kill switch, …). */
  readonly id: string;
  readonly packets: number;
  readonly bytes: number;
}

/** A part of live state that differs from what was applied, as data. */
export interface LiveProblem {
  /** What it is, in the backend's words (`route 0.0.0.0/0 dev tun0 table 7350`). */
  readonly what: string;
  /**
   * The tunnel it waits for, when it cannot be put right until that tunnel is back (a route
   * through a tunnel that is down or absent); null when it can be put right now.
   */
  readonly waitingFor: string | null;
  /** The tunnel a missing route goes through, up or not (a gateway is not routable without it). */
  readonly through?: string;
  /**
   * What it waits for when that is not a tunnel (`the next boot`: a pf.conf stanza is read
   * then), with `waitingFor` null; nothing can put it right before.
   */
  readonly until?: string;
}

/** What is live now, as the inspector reads it back. */
export interface LiveState {
  readonly present: boolean;
  /** The host config hash stamped in live state. */
  readonly hash: string | null;
  /** Structural fingerprint (no counters, no handles). */
  readonly fingerprint: string | null;
  readonly counters: readonly LiveCounter[];
  /** Desired parts that are not live (routes, rules), given the expected artifacts. */
  readonly missing: readonly LiveProblem[];
  /** Live parts we own that are not desired. */
  readonly unexpected: readonly LiveProblem[];
  readonly collisions: readonly string[];
  readonly tunnels: readonly LiveTunnel[];
}

/**
 * A tunnel as an apply bound it: the interface its classes were compiled for, and how the policy
 * finds it. Recorded with the generation: boot re-resolves a tunnel found by `match` before it
 * loads the generation, and the inspector reports whether the tunnel is still there.
 */
export interface BoundTunnel {
  /** The policy's name for it. */
  readonly declared: string;
  /** The interface the generation names (one no interface had, while the tunnel was absent). */
  readonly interface: string;
  /** Whether the interface existed when it was bound (absent: nothing compiled routes into it). */
  readonly present: boolean;
  /** Its own address or point-to-point peer (`match`); null: found by its name. */
  readonly match: { readonly address: string | null; readonly peer: string | null } | null;
}

/** A tunnel the live state sends classes into, as the host has it now. */
export interface LiveTunnel {
  /** The interface the live state names. */
  readonly name: string;
  readonly state: 'up' | 'down' | 'absent';
  /** The policy's name for it, when the backend was told (BoundTunnel). */
  readonly declared?: string;
  /** Its addresses and point-to-point peer now, when the backend reads them. */
  readonly addresses?: readonly string[];
  readonly peer?: string;
  /**
   * For a tunnel found by `match`: the interface that matches now (null: none). When it is not
   * `name`, the tunnel moved (a renumbered utun): the live state still names where it was.
   */
  readonly matchesNow?: string | null;
}

/** Reads live state back. */
export interface Inspector {
  read(
    expected: readonly Artifact[] | undefined,
    context?: {
      /** The tunnels the expected artifacts were bound to, as the generation recorded them. */
      readonly tunnels?: readonly BoundTunnel[];
    },
  ): Promise<LiveState>;
}

/** Something changed that may undo an apply. */
export type WatchEvent =
  | {
      readonly kind: 'link';
      readonly name: string;
      readonly detail: string;
      /** The link's state as the event shows it: up (with carrier), down, or absent (deleted). */
      readonly state?: 'up' | 'down' | 'absent';
    }
  | { readonly kind: 'ruleset'; readonly detail: string }
  /** The main table's default route or a connected prefix changed: the host's facts did. */
  | { readonly kind: 'route'; readonly detail: string }
  | { readonly kind: 'tick' };

/** A live feed of events for the resident mode. */
export interface Watcher {
  events(): AsyncIterable<WatchEvent>;
  stop(): Promise<void>;
}

export type DoctorSeverity = 'error' | 'warning' | 'info';

/** One thing doctor noticed: problems as data, with what to do about them. */
export interface DoctorFinding {
  readonly severity: DoctorSeverity;
  /** Which part of the host it is about (an id of the report's `areas`). */
  readonly area: string;
  /** Stable, kebab-case: scripts match on it. */
  readonly code: string;
  readonly message: string;
  readonly hint: string;
}

/** A doctor report: findings grouped by area, tables of what was seen, and a summary. */
export interface DoctorReport {
  readonly findings: readonly DoctorFinding[];
  /** The areas, in the order human output lists them. */
  readonly areas: readonly { readonly id: string; readonly title: string }[];
  /** What was seen, as tables for human output (another firewall's chains on our hooks). */
  readonly tables: readonly {
    readonly title: string;
    readonly header: readonly string[];
    readonly rows: readonly (readonly string[])[];
  }[];
  readonly summary: { readonly errors: number; readonly warnings: number; readonly infos: number };
}

/** `doctor`: what on the host can undo, bypass or collide with what the backend enforces. */
export interface DoctorSupport {
  /** What it reads, for `--help`. */
  readonly description: string;
  diagnose(input: {
    readonly runner: Runner;
    readonly options: BackendOptions;
    /** The host's facts, read live. */
    readonly facts: HostFacts;
    /** The policy, when one was given. */
    readonly policy: PolicyIR | undefined;
    /** The policy bound to this host, when one was given and binds. */
    readonly ir: HostIR | undefined;
    /** Why the policy could not be bound to this host (no uplink, say). */
    readonly bindProblem: string | undefined;
    /** False in a namespace: host-wide services (systemd-networkd) are not checked there. */
    readonly wholeHost: boolean;
  }): Promise<DoctorReport & Readonly<Record<string, unknown>>>;
}

/** A packet the backend dropped or audited, mapped back to the policy, as `drops` prints it. */
export interface DropRecord {
  /** ISO 8601, from the capture. */
  readonly time: string;
  readonly action: 'drop' | 'audit';
  readonly rule: string;
  /** The class the rule belongs to; null when neither the rule id nor the policy says. */
  readonly class: string | null;
  readonly hook: string | null;
  readonly in: string | null;
  readonly out: string | null;
  readonly family: 4 | 6 | null;
  readonly src: string | null;
  readonly dst: string | null;
  /** tcp, udp, icmp, icmpv6, sctp, … or the protocol number. */
  readonly protocol: string | null;
  /** Destination port (tcp, udp, sctp, udplite). */
  readonly port: number | null;
  readonly sourcePort: number | null;
  /** ICMP or ICMPv6 type and code. */
  readonly icmp: { readonly type: number; readonly code: number } | null;
}

/** A running capture of drop records. */
export interface DropStream {
  readonly records: AsyncIterable<DropRecord>;
  /** Where it reads from, in words (`nflog group 2`). */
  readonly source: string;
  stop(): Promise<void>;
  /**
   * After the records ran out or stop(): resolves once the capture ended, and throws with the
   * reason when it ended by itself with a failure (it could not read the log).
   */
  finished(): Promise<void>;
}

/** `drops`: the audited and dropped packets, live. */
export interface DropsSupport {
  readonly options: readonly BackendOption[];
  open(input: {
    readonly runner: Runner;
    readonly options: BackendOptions;
    /** Maps rule ids to classes when given. */
    readonly policy: PolicyIR | undefined;
  }): Promise<DropStream>;
}

/** Service definitions a host needs for boot restore and the resident mode. */
export interface UnitsSupport {
  /** What they are, for `--help` (systemd units, LaunchDaemons). */
  readonly description: string;
  render(input: {
    /** Absolute path of the node binary. */
    readonly node: string;
    /** Absolute path of bin/egressguard.js. */
    readonly bin: string;
    readonly stateDir: string;
    /** The policy `run` keeps converged; without it only the boot-time restore is rendered. */
    readonly policy?: string;
  }): Artifact[];
}

/** A revert timer a backend scheduled: what `cancel` needs to stop it, as data. */
export interface ScheduledTimer {
  /** Its name in the service manager (a LaunchDaemon's label). */
  readonly id: string;
  /** The definition file it wrote for it (a plist), if any. */
  readonly file?: string;
}

/**
 * The out-of-process confirm-or-revert timer, kept by the OS's service manager: it runs
 * `command` once, `seconds` after `schedule` (or, when the host slept through that, as soon as it
 * wakes), unless `cancel` ran first. A lost SSH session
 * kills the CLI, which is exactly when the revert must still happen.
 */
export interface ConfirmTimerSupport {
  /** What it is, in words (`a one-shot LaunchDaemon`). */
  readonly description: string;
  schedule(input: {
    readonly runner: Runner;
    readonly options: BackendOptions;
    /** A directory of the state directory the backend may keep the timer's files in. */
    readonly dir: string;
    readonly generation: number;
    readonly seconds: number;
    /** When the revert is due (ISO 8601): `seconds` from now, as the pending file records it. */
    readonly deadline: string;
    /** argv that reverts the generation (`egressguard restore --unconfirmed N …`). */
    readonly command: readonly string[];
    /** Timers still pending (a superseded confirmation put back if this apply fails): keep them. */
    readonly keep: readonly ScheduledTimer[];
  }): Promise<ScheduledTimer>;
  /** Stops the timer and forgets it; a timer that is gone already is not an error. */
  cancel(input: {
    readonly runner: Runner;
    readonly options: BackendOptions;
    readonly timer: ScheduledTimer;
  }): Promise<void>;
}

/** The lab a proof runs in, as far as a backend's harness needs it. */
export interface LabAccess {
  runner(node: string): Runner;
  ns(node: string): string;
  /** Runs `cleanup` when the lab is torn down (also on failure); returns an undo. */
  defer(cleanup: () => Promise<unknown>): () => void;
  /** Sends nonce'd raw packets from a node (the lab's packet sender). */
  send(
    node: string,
    batch: { readonly nonce: string; readonly packets: readonly LabPacket[] },
  ): Promise<unknown>;
  createNonce(): string;
}

/** A raw packet the lab sender builds (see src/prove/lab/send-packets.ts). */
export interface LabPacket {
  readonly kind: 'tcp' | 'udp' | 'dns' | 'icmp' | 'gre' | 'esp' | 'sctp' | 'ip';
  readonly dst: string;
  readonly src?: string;
  readonly sport?: number;
  readonly dport?: number;
  readonly protocol?: number;
  readonly count?: number;
  readonly fragment?: 'all' | 'non-first';
  readonly link?: string;
  readonly icmpType?: number;
}

/** A packet and the state to judge it in, for differential tests. */
export interface TestPacket {
  readonly packet: Packet;
  readonly state: EvaluationState;
}

/** What a backend's enforcer did with one packet: the verdict and the rule id that decided. */
export interface Observed {
  readonly verdict: 'allow' | 'deny';
  /** The policy id that decided (rule, default, anti-spoofing, kill switch), null if unmanaged. */
  readonly decidedBy: string | null;
}

/** Runs packets through a backend's real enforcer (the kernel) or its faithful model (pf). */
export interface ConformanceHarness {
  readonly name: string;
  observe(packets: readonly TestPacket[]): Promise<readonly Observed[]>;
}

/** What `prove` needs of a backend to measure it in a lab. */
export interface ProveSupport {
  /** The layers it enforces with, as proofs name them (policy routing, then the filter). */
  readonly layers: readonly string[];
  /** Fault points of its apply, in the order an apply reaches them (kill points). */
  readonly killPoints: readonly string[];
  /** Takes one layer out of live state, so that the others are proven alone. */
  removeLayer(
    context: BackendContext,
    layer: string,
    artifacts: readonly Artifact[],
  ): Promise<void>;
}

/** One check of a self-test, and the model assumption it confirms when it passes. */
export interface SelftestCheck {
  readonly name: string;
  readonly ok: boolean;
  readonly detail: string;
  /** The assumption of the backend's model this check confirms on the real tool, if any. */
  readonly assumption: string | null;
  /**
   * Why the check cannot tell on this machine (set with `ok` false): what it would observe
   * depends on something else here (a skipped interface, a firewall tool that follows another
   * grammar), so it neither confirms nor refutes its assumption, and fails nothing.
   */
  readonly cannotTell?: string;
}

/**
 * `selftest`: the backend's own checks against the real enforcer of this machine, for backends
 * tested here only against a model (pf): which of the model's assumptions hold.
 */
export interface SelftestSupport {
  readonly description: string;
  run(context: BackendContext): Promise<readonly SelftestCheck[]>;
}

/**
 * What a node keeps true on its cluster while a tunnel it carries is up (`run --k8s`), and the
 * cluster's own checklist (`doctor --k8s`). The resident reads the tunnel from the host's
 * backend and calls `converge` on every change; how the cluster is told is the backend's.
 */
export interface ClusterSupport {
  /** What it keeps, for `--help`. */
  readonly description: string;
  /** One duty per tunnel the cluster steers through a node, from the policy. */
  duties(policy: PolicyIR): readonly ClusterDuty[];
  connect(input: {
    /** A kubeconfig-style credentials file; absent: the pod's in-cluster credentials. */
    readonly credentials: string | undefined;
    /** The cluster's name for this node; absent: the backend's default (env, hostname). */
    readonly node: string | undefined;
    /** This node's facts: its tunnels' addresses and, for a cluster, how to see a tunnel's exit. */
    readonly facts?: HostFacts;
  }): Promise<ClusterConnection>;
  /** What must hold on the cluster; read through its API when credentials are given. */
  diagnose(input: { readonly credentials: string | undefined }): Promise<DoctorReport>;
}

/** One thing a node keeps on its cluster for one tunnel. */
export interface ClusterDuty {
  /** Stable id (the class it is for). */
  readonly id: string;
  readonly tunnel: string;
  /** The node label kept while the tunnel is up (the IR's pod kill switch names it). */
  readonly nodeLabel: { readonly key: string; readonly value: string };
  /** What is kept, in words (`node label egressguard.dev/gateway-vpn=up`). */
  readonly what: string;
  /** The cluster objects the duty relies on, by name, whose presence the node reports. */
  readonly objects?: readonly string[];
}

/** What one converge did on the cluster. */
export interface ClusterChange {
  /** The node's mark (its label) was added or removed. */
  readonly changed: boolean;
  /** The node carries the mark now. */
  readonly marked: boolean;
  /** The cluster objects it re-applied (the egress policies that select the mark). */
  readonly reapplied: readonly string[];
}

/** A node's connection to its cluster. */
export interface ClusterConnection {
  readonly node: string;
  /** The API server, as the credentials name it. */
  readonly server: string;
  /**
   * Makes the cluster reflect whether the duty's tunnel is up and routable: marks the node when
   * it is (re-applying what selects the mark when the mark comes back, and on the first call),
   * unmarks it when not. Idempotent; retries conflicts and server errors, then throws.
   */
  converge(duty: ClusterDuty, up: boolean): Promise<ClusterChange>;
  /** Its metrics in Prometheus text format. */
  metrics(): Promise<{ readonly contentType: string; readonly text: string }>;
  close(): Promise<void>;
}
