import type { StepTimer } from '../core/index.js';
import type { HostIR } from '../ir/index.js';
import type { Runner } from '../runner/index.js';

/** One file a backend writes (a ruleset, route specs, a unit, an anchor). */
export interface Artifact {
  readonly name: string;
  readonly content: string;
}

export interface CompileOptions {
  /** The owned table or anchor name. */
  readonly tableName?: string;
  /** The host config hash to stamp, or the blank stamp while hashing. */
  readonly stamp?: string;
  /**
   * Policy routing of tunnel classes: the first owned routing table id and `ip rule` priority
   * (each steered tunnel takes the next). Absent: the backend's defaults.
   */
  readonly steering?: {
    readonly table?: number | undefined;
    readonly priority?: number | undefined;
  };
}

/** Pure: the IR bound to a host → artifacts. No clock, filesystem, process or network. */
export interface Compiler {
  compile(ir: HostIR, options?: CompileOptions): readonly Artifact[];
}

/** What a backend can enforce; shared code asks these, never the backend's name. */
export interface Capabilities {
  /** Steers tunnel classes with policy routing (owned table, rules, blackhole). */
  readonly supportsSteering: boolean;
  readonly supportsKillSwitch: boolean;
  readonly supportsAudit: boolean;
  readonly supportsMssClamp: boolean;
  readonly supportsHostClasses: boolean;
  /** Per-rule counters can be read back, so live verdicts map to rule ids. */
  readonly supportsRuleCounters: boolean;
  /** The enforcer runs on this machine, so differential tests use the real thing. */
  readonly runsHere: boolean;
}

export interface PlanResult {
  /** One line per change: `+`/`-`/`~` and what. Empty when live already matches. */
  readonly changes: readonly string[];
  /** Problems that would make the apply fail (a rejected ruleset, a collision). */
  readonly problems: readonly string[];
}

export interface ApplyResult {
  /** Parts that wait for something absent (a route via a tunnel that is down). */
  readonly deferred: readonly string[];
}

/** Effects: puts artifacts on a host (or namespace) and removes them. */
export interface Applier {
  plan(artifacts: readonly Artifact[]): Promise<PlanResult>;
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

/** What is live now, as the inspector reads it back. */
export interface LiveState {
  readonly present: boolean;
  /** The host config hash stamped in live state. */
  readonly hash: string | null;
  /** Structural fingerprint (no counters, no handles). */
  readonly fingerprint: string | null;
  readonly counters: readonly LiveCounter[];
  /** Desired parts that are not live (routes, rules), given the expected artifacts. */
  readonly missing: readonly string[];
  /** Live parts we own that are not desired. */
  readonly unexpected: readonly string[];
  readonly collisions: readonly string[];
  readonly tunnels: readonly { readonly name: string; readonly state: 'up' | 'down' | 'absent' }[];
}

/** Reads live state back. */
export interface Inspector {
  read(expected: readonly Artifact[] | undefined): Promise<LiveState>;
}

/** Something changed that may undo an apply. */
export type WatchEvent =
  | { readonly kind: 'link'; readonly name: string; readonly detail: string }
  | { readonly kind: 'ruleset'; readonly detail: string }
  /** The main table's default route or a connected prefix changed: the host's facts did. */
  | { readonly kind: 'route'; readonly detail: string }
  | { readonly kind: 'tick' };

/** A live feed of events for the resident mode. */
export interface Watcher {
  events(): AsyncIterable<WatchEvent>;
  stop(): Promise<void>;
}

export interface BackendContext {
  readonly runner: Runner;
  readonly tableName?: string;
}

/** A backend: a factory of collaborators (Kysely's Dialect). */
export interface Backend {
  readonly name: string;
  /** The layer name explain shows for this backend's filtering. */
  readonly layer: string;
  readonly capabilities: Capabilities;
  createCompiler(): Compiler;
  createApplier(context: BackendContext): Applier;
  createInspector(context: BackendContext): Inspector;
  /** Present when the backend can watch live state (the resident mode `run`). */
  createWatcher?(context: BackendContext): Watcher;
}
