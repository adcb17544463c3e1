import { createHash } from 'node:crypto';
import {
  artifactOfRole,
  compileWithHash,
  registry as defaultRegistry,
  type Artifact,
  type Backend,
  type BackendOptions,
  type BackendRegistry,
} from '../backends/index.js';
import { isEgressguardError, VERSION } from '../core/index.js';
import type { HostFacts } from '../facts/index.js';
import { bindHost, matchesInterface, type HostIR, type PolicyIR } from '../ir/index.js';
import { decodePolicyIr } from './ir-codec.js';
import type { HostIrBundle } from './protocol.js';

/** A host-IR bundle compiled for one host's facts: what the agent applies, and its hash. */
export interface CompiledBundle {
  readonly policyName: string;
  readonly backend: Backend;
  readonly options: BackendOptions;
  readonly ir: HostIR;
  /** How the policy finds its tunnels by `match`: the generation keeps them (boundTunnels). */
  readonly tunnelMatches: PolicyIR['tunnelMatches'];
  readonly artifacts: readonly Artifact[];
  readonly lockdown: string | undefined;
  readonly hash: string;
}

export type CompileBundleResult =
  | { readonly ok: true; readonly compiled: CompiledBundle }
  /** The bundle can never be valid for these facts: the host is Stalled with this message. */
  | { readonly ok: false; readonly message: string };

/**
 * The digest a host-IR bundle is bound to: the facts that binding and compiling read, without the
 * host's name (which only messages use). Hosts alike share one compile and one bundle.
 */
export function digestBindingFacts(facts: HostFacts): string {
  return createHash('sha256')
    .update(canonicalJson({ ...facts, hostname: '' }))
    .digest('hex');
}

/**
 * The facts a bundle binds to on a host: the host's own, with the labels the controller holds for
 * it when the bundle carries them (a bootstrap token's labels reach the host only this way). A
 * controller could push any policy anyway: labels choose among its classes, nothing more.
 */
export function bindingFactsOf(bundle: Pick<HostIrBundle, 'labels'>, facts: HostFacts): HostFacts {
  return bundle.labels === undefined ? facts : { ...facts, labels: { ...bundle.labels } };
}

/**
 * Why a push may not carry these backend options, or undefined: an option no backend of this build
 * has, or one only a host sets (a tool root runs, a file root writes: a controller must not choose
 * them). Refused when pushed, before any host sees them (agents refuse them too).
 */
export function findPushOptionProblem(
  options: Readonly<Record<string, string>>,
  registry: BackendRegistry = defaultRegistry,
): string | undefined {
  const declared = new Map(registry.options().map(({ option }) => [option.key, option]));
  for (const key of Object.keys(options).sort()) {
    const option = declared.get(key);
    if (option === undefined) {
      return `Cannot push backend option "${key}": no backend has it (known: ${[...declared.keys()].sort().join(', ')})`;
    }
    if (option.hostOnly === true) {
      return `Cannot push backend option "${key}" (${option.flag.split(' ')[0] ?? key}): only a host sets it (a tool root runs or a file root writes); give it to the agent on that host instead`;
    }
  }
  return undefined;
}

/**
 * Binds the bundle's host-independent IR to these facts and compiles it with the backend the facts
 * choose, with the push's backend options; the controller does it to know each host's desired hash,
 * the agent to apply (its own compiler, its own facts). Deterministic: both get the same hash.
 */
export function compileBundle(
  bundle: Pick<HostIrBundle, 'ir' | 'options' | 'labels'>,
  hostFacts: HostFacts,
  options: { readonly registry?: BackendRegistry; readonly ir?: PolicyIR } = {},
): CompileBundleResult {
  const facts = bindingFactsOf(bundle, hostFacts);
  let independent = options.ir;
  if (independent === undefined) {
    const decoded = decodePolicyIr(bundle.ir);
    if (!decoded.ok) return decoded;
    independent = decoded.ir;
  }
  try {
    const ir = bindHost(independent, facts);
    const unfit = findMissingInterface(independent, ir, facts);
    if (unfit !== undefined) return { ok: false, message: unfit };
    const backend = (options.registry ?? defaultRegistry).forFacts(facts);
    const { artifacts, hash } = compileWithHash(backend, {
      ir,
      options: bundle.options,
      versions: { compiler: VERSION, agent: VERSION },
    });
    return {
      ok: true,
      compiled: {
        policyName: independent.name,
        backend,
        options: bundle.options,
        ir,
        tunnelMatches: independent.tunnelMatches,
        artifacts,
        lockdown: artifactOfRole(backend, artifacts, 'lockdown')?.content,
        hash,
      },
    };
  } catch (error) {
    // Facts the policy cannot hold on, an OS without a backend, an option out of range: all of
    // them are this host's bundle never being valid, not a failure a retry could fix.
    if (isEgressguardError(error)) {
      return {
        ok: false,
        message: error.hint === undefined ? error.message : `${error.message} (${error.hint})`,
      };
    }
    throw error;
  }
}

/**
 * An interface the bound policy names exactly that the host does not have: a named uplink, or a
 * class ingress that is not a prefix (veth*). Its class would never match, so the workloads
 * behind the real interface would leave unfiltered: the bundle cannot be valid on this host until
 * its facts change. Tunnels are exempt: they come and go, and the kill switch covers their absence.
 */
function findMissingInterface(
  independent: PolicyIR,
  ir: HostIR,
  facts: HostFacts,
): string | undefined {
  const present = (name: string): boolean => facts.interfaces.some((i) => i.name === name);
  if (independent.uplink.kind === 'named' && !present(independent.uplink.interface)) {
    return `Cannot bind policy "${independent.name}" to host "${facts.hostname}": its uplink "${independent.uplink.interface}" is not an interface of this host`;
  }
  for (const cls of ir.classes) {
    if (cls.selector.kind !== 'ingress') continue;
    for (const pattern of cls.selector.interfaces) {
      if (pattern.endsWith('*')) continue;
      if (!facts.interfaces.some((i) => matchesInterface(pattern, i.name))) {
        return `Cannot carry class "${cls.name}" on host "${facts.hostname}": its ingress interface "${pattern}" is not an interface of this host (it has ${facts.interfaces.map((i) => `"${i.name}"`).join(', ')})`;
      }
    }
  }
  return undefined;
}

function canonicalJson(value: unknown): string {
  if (Array.isArray(value)) return `[${value.map(canonicalJson).join(',')}]`;
  if (value !== null && typeof value === 'object') {
    // An absent optional field and one set to undefined are the same facts (JSON drops the latter).
    const record = value as Record<string, unknown>;
    const entries = Object.keys(value)
      .filter((k) => record[k] !== undefined)
      .sort()
      .map((k) => `${JSON.stringify(k)}:${canonicalJson(record[k])}`);
    return `{${entries.join(',')}}`;
  }
  return value === undefined ? 'null' : JSON.stringify(value);
}
