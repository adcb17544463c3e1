import type { HostFacts } from '../facts/index.js';
import type { PolicyIR } from '../ir/index.js';
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
}

/** Pure: IR + facts → artifacts. No clock, filesystem, process or network. */
export interface Compiler {
  compile(ir: PolicyIR, facts: HostFacts, options?: CompileOptions): readonly Artifact[];
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

/** Effects: puts artifacts on a host (or namespace) and removes them. */
export interface Applier {
  apply(artifacts: readonly Artifact[]): Promise<void>;
  remove(): Promise<void>;
}

/** Reads live state back: per-rule counters by policy rule id, and whether our state is there. */
export interface Inspector {
  isPresent(): Promise<boolean>;
  readCounters(): Promise<ReadonlyMap<string, { packets: number; bytes: number }>>;
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
}
