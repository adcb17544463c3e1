import type { HostFacts } from '../facts/index.js';
import {
  POLICY_DOCUMENT_FORMAT,
  compileBundle,
  bindingFactsOf,
  digestBindingFacts,
  hashPolicyBundle,
  type HashBundle,
  type HostBundle,
} from '../fleet/index.js';
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
  /**
   * Makes applies wait, as a slow host's would, until the returned function is called: the apply
   * in progress and every later one until then. The agent stays inside its apply meanwhile.
   */
  holdApplies(): () => void;
  /** Replaces the live state, as someone editing the host's firewall would. */
  setLiveHash(hash: string | null): void;
  setFacts(facts: HostFacts): void;
}

/** What the markers are looked for in: the policy document, or the IR and the pushed options. */
function textOf(bundle: HostBundle): string {
  return bundle.format === POLICY_DOCUMENT_FORMAT
    ? bundle.policy
    : JSON.stringify([bundle.ir, bundle.options]);
}

/**
 * Records bundles instead of applying them: the agent's protocol runs for real (over HTTP, with
 * backoff, drift and reports) while nothing on the host changes. Used by the scale benchmark and
 * the protocol tests; `createFirewallEngine` is the one that applies.
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
  let held: Promise<void> | undefined;
  const settle = (prepared: RecordedGeneration): ApplyOutcome => {
    const failing =
      failure === undefined ||
      (failure.onlyContaining !== undefined &&
        !textOf(prepared.bundle).includes(failure.onlyContaining))
        ? undefined
        : failure.message;
    applies.push({ hash: prepared.hash, ok: failing === undefined });
    if (failing !== undefined) return { ok: false, message: failing };
    live = prepared.hash;
    return { ok: true, hash: prepared.hash };
  };
  return {
    applies,
    readFacts: () => Promise.resolve(facts),
    prepare: (bundle) => {
      if (marker !== undefined && textOf(bundle).includes(marker.text)) {
        return Promise.resolve({ ok: false, message: marker.message });
      }
      return Promise.resolve({
        ok: true,
        prepared: { hash: options.hashBundle(bundle, facts), bundle },
      });
    },
    apply: async (prepared): Promise<ApplyOutcome> => {
      // Another hold may start while this apply waits for the one before it.
      while (held !== undefined) await held;
      return settle(prepared);
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
    holdApplies: () => {
      let release = (): void => undefined;
      const hold = new Promise<void>((resolve) => {
        release = () => {
          if (held === hold) held = undefined;
          resolve();
        };
      });
      held = hold;
      return release;
    },
    setLiveHash: (hash) => {
      live = hash;
    },
    setFacts: (next) => {
      facts = next;
    },
  };
}

/**
 * The hash a recording engine reports for a bundle: a policy document's own hash, or a host-IR
 * bundle compiled for the facts as the firewall engine would, once per push, options and binding
 * facts (a benchmark's thousand agents alike share one compile). A bundle that does not compile
 * gets a hash no controller sent, so the agent reports it as not matching.
 */
export function createBundleHasher(): HashBundle {
  const cache = new Map<string, string>();
  return (bundle, facts) => {
    if (bundle.format === POLICY_DOCUMENT_FORMAT) return hashPolicyBundle(bundle, facts);
    const key = JSON.stringify([
      bundle.pushId,
      bundle.options,
      digestBindingFacts(bindingFactsOf(bundle, facts)),
    ]);
    let hash = cache.get(key);
    if (hash === undefined) {
      const result = compileBundle(bundle, facts);
      hash = result.ok ? result.compiled.hash : '0'.repeat(64);
      if (cache.size >= 1_000) cache.clear();
      cache.set(key, hash);
    }
    return hash;
  };
}
