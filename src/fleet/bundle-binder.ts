import { createHash } from 'node:crypto';
import type { HostFacts } from '../facts/index.js';
import { hasErrors, parsePolicy, type PolicyIssue } from '../policy/index.js';
import { BUNDLE_FORMAT, type HostBundle } from './protocol.js';

/** One host as the binder sees it: what its agent reported. */
export interface BindTarget {
  readonly hostName: string;
  readonly facts: HostFacts | null;
  readonly factsDigest: string | null;
  readonly labels: Readonly<Record<string, string>>;
}

export type BindResult =
  | { readonly ok: true; readonly bundle: HostBundle; readonly hash: string }
  /** The bundle can never be valid on this host (it does not compile for its facts): Stalled. */
  | { readonly ok: false; readonly reason: string; readonly message: string };

export type PrepareResult<P> =
  | {
      readonly ok: true;
      readonly prepared: P;
      readonly digest: string;
      readonly warnings: readonly PolicyIssue[];
    }
  | { readonly ok: false; readonly issues: readonly PolicyIssue[] };

/**
 * How the controller turns a pushed policy into each host's bundle and desired hash. Phase A binds
 * the validated policy document; phase B lowers it once to the host-independent IR and binds and
 * compiles it per host (the same interface, another implementation).
 */
export interface BundleBinder<P = unknown> {
  /** Validates a pushed policy, once per push. */
  preparePolicy(text: string, source: string, pushId: string): PrepareResult<P>;
  /** Binds it to one host; deterministic, so a bundle can be bound again instead of stored. */
  bindHost(prepared: P, target: BindTarget): BindResult;
}

/** The desired hash of a bundle (injected: phase B hashes the compiled host config instead). */
export type HashBundle = (bundle: HostBundle) => string;

/** sha256 over the bundle's canonical JSON and the bundle format: a policy-only change changes it. */
export const hashPolicyBundle: HashBundle = (bundle) =>
  createHash('sha256')
    .update(`${BUNDLE_FORMAT}\n`)
    .update(JSON.stringify([bundle.policy, bundle.factsDigest]))
    .digest('hex');

interface PreparedDocument {
  readonly pushId: string;
  readonly text: string;
  readonly source: string;
}

/** Phase A's binder: the validated policy document plus the facts digest it was bound to. */
export function createPolicyDocumentBinder(hashBundle: HashBundle): BundleBinder<PreparedDocument> {
  return {
    preparePolicy(text, source, pushId) {
      // List files would be read on the controller: the pushed text must stand alone.
      const parsed = parsePolicy(text, `/nonexistent/egressguard-push/${source}`);
      const issues = parsed.issues.map((issue) => ({ ...issue, file: source }));
      if (hasErrors(issues) || parsed.policy === undefined) return { ok: false, issues };
      return {
        ok: true,
        prepared: { pushId, text, source },
        digest: createHash('sha256').update(text).digest('hex'),
        warnings: issues,
      };
    },
    bindHost(prepared, target) {
      const bundle: HostBundle = {
        format: BUNDLE_FORMAT,
        pushId: prepared.pushId,
        policy: prepared.text,
        source: prepared.source,
        factsDigest: target.factsDigest,
      };
      return { ok: true, bundle, hash: hashBundle(bundle) };
    },
  };
}

/** A stable digest of reported facts, so a change of facts re-binds the host's bundle. */
export function digestFacts(facts: unknown): string {
  return createHash('sha256').update(canonicalJson(facts)).digest('hex');
}

function canonicalJson(value: unknown): string {
  if (Array.isArray(value)) return `[${value.map(canonicalJson).join(',')}]`;
  if (value !== null && typeof value === 'object') {
    const entries = Object.keys(value)
      .sort()
      .map((k) => `${JSON.stringify(k)}:${canonicalJson((value as Record<string, unknown>)[k])}`);
    return `{${entries.join(',')}}`;
  }
  return value === undefined ? 'null' : JSON.stringify(value);
}
