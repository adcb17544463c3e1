import { createHash } from 'node:crypto';
import type { BackendRegistry } from '../backends/index.js';
import type { HostFacts } from '../facts/index.js';
import { lowerPolicy, type PolicyIR } from '../ir/index.js';
import { hasErrors, parsePolicy, type PolicyIssue } from '../policy/index.js';
import { bindingFactsOf, compileBundle, digestBindingFacts } from './compile-bundle.js';
import { decodePolicyIr, encodePolicyIr } from './ir-codec.js';
import {
  BUNDLE_FORMAT,
  POLICY_DOCUMENT_FORMAT,
  type HostBundle,
  type HostIrBundle,
  type PolicyDocumentBundle,
} from './protocol.js';

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

/** A push as the binder gets it: the policy text and the backend options pushed with it. */
export interface PushInput {
  readonly text: string;
  readonly source: string;
  readonly pushId: string;
  readonly options: Readonly<Record<string, string>>;
}

/**
 * How the controller turns a pushed policy into each host's bundle and desired hash:
 * `createHostIrBinder` lowers it once to the host-independent IR and compiles it per host's facts
 * (the server's binder); `createPolicyDocumentBinder` binds the document itself, for protocol
 * tests and benchmarks with the recording engine.
 */
export interface BundleBinder<P = unknown> {
  /** Validates a pushed policy, once per push. */
  preparePolicy(push: PushInput): PrepareResult<P>;
  /** Binds it to one host; deterministic, so a bundle can be bound again instead of stored. */
  bindHost(prepared: P, target: BindTarget): BindResult;
}

/** The desired hash of a bundle for a host of these facts (what the recording engine reports). */
export type HashBundle = (bundle: HostBundle, facts: HostFacts) => string;

/** A policy-document bundle's hash: sha256 over the document and the facts digest it was bound to. */
export const hashPolicyBundle: HashBundle = (bundle) => {
  if (bundle.format !== POLICY_DOCUMENT_FORMAT) {
    throw new Error(
      `hashPolicyBundle takes ${POLICY_DOCUMENT_FORMAT} bundles, not ${bundle.format}`,
    );
  }
  return createHash('sha256')
    .update(`${POLICY_DOCUMENT_FORMAT}\n`)
    .update(JSON.stringify([bundle.policy, bundle.factsDigest]))
    .digest('hex');
};

interface PreparedDocument {
  readonly pushId: string;
  readonly text: string;
  readonly source: string;
}

/**
 * Binds the validated policy document plus the facts digest: no compile, for the recording engine
 * (protocol tests and benchmarks that say so). The server's binder is `createHostIrBinder`.
 */
export function createPolicyDocumentBinder(
  hashBundle: HashBundle = hashPolicyBundle,
): BundleBinder<PreparedDocument> {
  return {
    preparePolicy({ text, source, pushId }) {
      const { parsed, issues } = parsePushedPolicy(text, source);
      if (hasErrors(issues) || parsed.policy === undefined) return { ok: false, issues };
      return {
        ok: true,
        prepared: { pushId, text, source },
        digest: createHash('sha256').update(text).digest('hex'),
        warnings: issues,
      };
    },
    bindHost(prepared, target) {
      const bundle: PolicyDocumentBundle = {
        format: POLICY_DOCUMENT_FORMAT,
        pushId: prepared.pushId,
        policy: prepared.text,
        source: prepared.source,
        factsDigest: target.factsDigest,
      };
      return {
        ok: true,
        bundle,
        hash: hashBundle(bundle, target.facts ?? ({} as HostFacts)),
      };
    },
  };
}

interface PreparedIr {
  readonly pushId: string;
  readonly source: string;
  readonly ir: PolicyIR;
  readonly encoded: unknown;
  readonly options: Readonly<Record<string, string>>;
}

/**
 * The server's binder: lowers a push once to the host-independent IR, then binds and compiles it
 * for each host's reported facts to know its desired hash, with the compile cached by the binding
 * facts' digest (hosts alike, as most of a fleet is, cost one compile per push). The bundle the
 * agent gets is the IR and the options, not the artifacts: it compiles them itself.
 */
export function createHostIrBinder(
  options: { readonly registry?: BackendRegistry; readonly cacheSize?: number } = {},
): BundleBinder<PreparedIr> {
  const cacheSize = options.cacheSize ?? 10_000;
  const compiled = new Map<string, { hash: string; factsDigest: string }>();
  return {
    preparePolicy({ text, source, pushId, options: pushed }) {
      const { parsed, issues } = parsePushedPolicy(text, source);
      if (hasErrors(issues) || parsed.policy === undefined) return { ok: false, issues };
      const encoded = encodePolicyIr(lowerPolicy(parsed.policy));
      // Compiled from the IR as the agent decodes it, so both compute the same hash.
      const decoded = decodePolicyIr(encoded);
      if (!decoded.ok) throw new Error(`Cannot encode the IR of "${source}": ${decoded.message}`);
      return {
        ok: true,
        prepared: { pushId, source, ir: decoded.ir, encoded, options: { ...pushed } },
        digest: createHash('sha256')
          .update(text)
          .update(JSON.stringify(Object.entries(pushed).sort()))
          .digest('hex'),
        warnings: issues,
      };
    },
    bindHost(prepared, target) {
      if (target.facts === null) {
        return {
          ok: false,
          reason: 'NoFacts',
          message: `host "${target.hostName}" has not reported its facts yet`,
        };
      }
      // The labels the controller holds (a bootstrap token's merged with the host's own) choose
      // the classes, on the controller and on the agent alike: the bundle carries them.
      const labels = { ...target.labels };
      const factsDigest = digestBindingFacts(bindingFactsOf({ labels }, target.facts));
      const key = `${prepared.pushId}\n${factsDigest}`;
      let known = compiled.get(key);
      if (known === undefined) {
        const result = compileBundle(
          { ir: prepared.encoded, options: prepared.options, labels },
          target.facts,
          {
            ir: prepared.ir,
            ...(options.registry === undefined ? {} : { registry: options.registry }),
          },
        );
        if (!result.ok) {
          return { ok: false, reason: 'BundleInvalidForHost', message: result.message };
        }
        known = { hash: result.compiled.hash, factsDigest };
        if (compiled.size >= cacheSize) compiled.clear();
        compiled.set(key, known);
      }
      const bundle: HostIrBundle = {
        format: BUNDLE_FORMAT,
        pushId: prepared.pushId,
        source: prepared.source,
        ir: prepared.encoded,
        options: prepared.options,
        factsDigest: known.factsDigest,
        labels,
      };
      return { ok: true, bundle, hash: known.hash };
    },
  };
}

/**
 * Validates pushed policy text. The controller never opens a path a client sent it: a `files:`
 * list is an error (`fleet push` puts the lists' prefixes into the policy before it sends it).
 */
function parsePushedPolicy(text: string, source: string) {
  const parsed = parsePolicy(text, source, { readListFiles: false });
  return { parsed, issues: parsed.issues.map((issue) => ({ ...issue, file: source })) };
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
