import type { HostFacts } from '../facts/index.js';
import type { ResidentPass } from '../apply/index.js';
import type { HostBundle } from '../fleet/index.js';

/** A generation ready to apply: checked and compiled for this host, nothing touched yet. */
export interface PreparedGeneration {
  /** The host config hash this generation will have once live. */
  readonly hash: string;
}

export type PrepareOutcome<P extends PreparedGeneration> =
  | { readonly ok: true; readonly prepared: P }
  /** The bundle can never be valid on this host (it does not compile for these facts). */
  | { readonly ok: false; readonly message: string };

export type ApplyOutcome =
  | { readonly ok: true; readonly hash: string }
  /** This attempt failed; another may succeed (the agent retries with backoff). */
  | { readonly ok: false; readonly message: string };

/** What the agent reads back from the host after an apply, and on every round. */
export interface LiveStatus {
  /** The hash of what is live (read back and fingerprinted); null when nothing of ours is. */
  readonly hash: string | null;
  readonly counters: Readonly<Record<string, number>>;
  readonly tunnels: readonly { readonly name: string; readonly up: boolean }[];
}

/**
 * Everything the agent needs from a host. The agent owns the protocol (enroll, poll, report,
 * retry with backoff); the engine owns the host. Phase B implements it over the library layer
 * (policy → IR → bind facts → compile → plan/apply/status through the backend the facts choose);
 * `createRecordingEngine` records instead, for benchmarks and protocol tests.
 */
export interface HostEngine<P extends PreparedGeneration = PreparedGeneration> {
  /** This host's facts, resolved again on every call (uplinks change). */
  readFacts(): Promise<HostFacts>;
  /** Checks and compiles a bundle for these facts without changing the host. */
  prepare(bundle: HostBundle, facts: HostFacts): Promise<PrepareOutcome<P>>;
  /** Applies a prepared generation through the safe-apply contract and reads it back. */
  apply(prepared: P): Promise<ApplyOutcome>;
  /** Reads the live state back. */
  readStatus(): Promise<LiveStatus>;
  /**
   * Watches the host between polls (the resident mode's watchers) and repairs drift from the last
   * applied generation as it happens, until `signal` aborts; absent, or resolving at once, when
   * the host's backend cannot watch (drift is then caught at each round).
   */
  watch?(input: {
    readonly signal: AbortSignal;
    /** Told at the end of every reconcile the watchers started, with what it repaired. */
    readonly onPass: (pass: ResidentPass) => void;
    readonly log: (line: string) => void;
  }): Promise<void>;
}
