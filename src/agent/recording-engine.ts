import type { HostFacts } from '../facts/index.js';
import type { HashBundle, HostBundle } from '../fleet/index.js';
import type { ApplyOutcome, HostEngine, LiveStatus, PreparedGeneration } from './host-engine.js';

interface RecordedGeneration extends PreparedGeneration {
  readonly bundle: HostBundle;
}

/** A recording engine: what it was asked to do, and switches that make it fail like a host. */
export interface RecordingEngine extends HostEngine<RecordedGeneration> {
  /** Every apply, in order, with its outcome. */
  readonly applies: { readonly hash: string; readonly ok: boolean }[];
  /**
   * Makes applies fail with this message (undefined: succeed again), all of them or only those of
   * bundles whose policy contains `onlyContaining` (a host problem that a policy change fixes).
   */
  failApplies(message: string | undefined, onlyContaining?: string): void;
  /** Makes bundles whose policy contains `marker` invalid on this host (a compile failure). */
  rejectBundlesContaining(marker: string | undefined, message?: string): void;
  /** Replaces the live state, as someone editing the host's firewall would. */
  setLiveHash(hash: string | null): void;
  setFacts(facts: HostFacts): void;
}

/**
 * Records bundles instead of applying them: the agent's protocol runs for real (over HTTP, with
 * backoff, drift and reports) while nothing on the host changes. Used by the scale benchmark and
 * the protocol tests; the firewall engine arrives in phase B.
 */
export function createRecordingEngine(options: {
  facts: HostFacts;
  hashBundle: HashBundle;
  tunnels?: readonly { name: string; up: boolean }[];
}): RecordingEngine {
  let facts = options.facts;
  let live: string | null = null;
  let failure: { message: string; onlyContaining: string | undefined } | undefined;
  let marker: { text: string; message: string } | undefined;
  const applies: { hash: string; ok: boolean }[] = [];
  return {
    applies,
    readFacts: () => Promise.resolve(facts),
    prepare: (bundle) => {
      if (marker !== undefined && bundle.policy.includes(marker.text)) {
        return Promise.resolve({ ok: false, message: marker.message });
      }
      return Promise.resolve({ ok: true, prepared: { hash: options.hashBundle(bundle), bundle } });
    },
    apply: (prepared): Promise<ApplyOutcome> => {
      const failing =
        failure === undefined ||
        (failure.onlyContaining !== undefined &&
          !prepared.bundle.policy.includes(failure.onlyContaining))
          ? undefined
          : failure.message;
      applies.push({ hash: prepared.hash, ok: failing === undefined });
      if (failing !== undefined) return Promise.resolve({ ok: false, message: failing });
      live = prepared.hash;
      return Promise.resolve({ ok: true, hash: prepared.hash });
    },
    readStatus: (): Promise<LiveStatus> =>
      Promise.resolve({
        hash: live,
        counters: { applies: applies.length },
        tunnels: options.tunnels ?? [],
      }),
    failApplies: (message, onlyContaining) => {
      failure = message === undefined ? undefined : { message, onlyContaining };
    },
    rejectBundlesContaining: (
      text,
      message = `the policy names "${text ?? ''}", which this host lacks`,
    ) => {
      marker = text === undefined ? undefined : { text, message };
    },
    setLiveHash: (hash) => {
      live = hash;
    },
    setFacts: (next) => {
      facts = next;
    },
  };
}
