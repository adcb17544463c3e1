import {
  artifactOfRole,
  compileWithHash,
  registry as defaultRegistry,
  type Artifact,
  type Backend,
  type BackendOptions,
  type BackendRegistry,
} from '../backends/index.js';
import { VERSION } from '../core/index.js';
import {
  gatherFacts,
  gatherInterfaces,
  keepAbsentTunnels,
  labelsFile,
  readHostFacts,
  readHostLabels,
  refreshTunnels,
  type HostFacts,
} from '../facts/index.js';
import {
  bindHost,
  classesNotOnHost,
  findMissingIngress,
  lowerPolicy,
  type HostIR,
  type MissingIngress,
  type PolicyIR,
} from '../ir/index.js';
import type { Policy } from '../policy/index.js';
import type { HostTarget } from './host-target.js';
import { requirePolicy } from './load-inputs.js';

/** A policy made ready for one host: lowered, bound to its facts, compiled and hashed. */
export interface Prepared {
  readonly policy: Policy;
  /** The host-independent IR (what a controller holds for a fleet). */
  readonly independent: PolicyIR;
  readonly facts: HostFacts;
  readonly ir: HostIR;
  /** The backend the facts chose (or `--target`). */
  readonly backend: Backend;
  readonly artifacts: readonly Artifact[];
  /** The class lockdown the backend compiled, kept for `restore` when the state is lost. */
  readonly lockdown: string | undefined;
  readonly hash: string;
  /** What the backend says a person should know of these artifacts (also given to `warn`). */
  readonly notes: readonly string[];
  /** Ingress interfaces of its classes that the facts do not have (a typo, or not created yet). */
  readonly missingIngress: readonly MissingIngress[];
}

export interface PrepareInput {
  /** A policy file, or a validated policy. */
  readonly policy: string | Policy;
  /** Facts: a file, or facts already read; absent: read from the live target. */
  readonly facts?: string | HostFacts | undefined;
  /**
   * With facts given: the tunnels found by `match` are read from the live target instead
   * (refreshTunnels), the rest from the facts. What the re-converge runs with: a reviewed file
   * cannot follow a utun renumbered on every VPN reconnect.
   */
  readonly liveTunnels?: boolean;
  /** Called with a warning a person should see (a class this host's labels leave out). */
  readonly warn?: (message: string) => void;
  /**
   * The facts of the last prepare on this host (a resident's): a declared tunnel deleted since
   * is bound as it was then (keepAbsentTunnels), so an outage changes nothing that is enforced.
   */
  readonly previous?: HostFacts;
}

/** Policy + facts → IR → the backend's stamped artifacts and the host config hash. */
export async function preparePolicy(target: HostTarget, input: PrepareInput): Promise<Prepared> {
  // The live listings are processes: let them run while this process validates the policy.
  const gathering =
    input.facts === undefined
      ? gatherFacts(target.runner, { labels: readHostLabels(), tools: false })
      : undefined;
  gathering?.catch(() => undefined); // awaited below; never an unhandled rejection meanwhile
  const policy =
    typeof input.policy === 'string' ? requirePolicy(input.policy).policy : input.policy;
  const given =
    gathering !== undefined
      ? await gathering
      : typeof input.facts === 'string'
        ? readHostFacts(input.facts)
        : (input.facts as HostFacts);
  // Only `ifconfig` (or `ip addr`) is trusted live: one parser, and a misread tunnel is an absent
  // one, whose class is dropped (fail closed). The uplink and routes stay as reviewed.
  const read =
    gathering === undefined &&
    input.liveTunnels === true &&
    Object.keys(policy.tunnelMatches).length > 0
      ? refreshTunnels(
          given,
          await gatherInterfaces(target.runner, { os: given.os }),
          policy.tunnelMatches,
        )
      : given;
  const facts = keepAbsentTunnels(read, input.previous, policy.tunnels);
  return prepareForFacts(target, {
    policy,
    facts,
    ...(input.warn === undefined ? {} : { warn: input.warn }),
  });
}

/** The pure part of preparePolicy: no facts to read. */
export function prepareForFacts(
  target: Pick<HostTarget, 'backendName' | 'registry' | 'options'>,
  input: {
    readonly policy: Policy;
    readonly facts: HostFacts;
    readonly warn?: (message: string) => void;
  },
): Prepared {
  const { policy, facts } = input;
  const independent = lowerPolicy(policy);
  const ir = bindHost(independent, facts);
  // A class limited to other hosts is left out on purpose; say so, or its absence looks like a bug.
  for (const skipped of classesNotOnHost(independent, facts)) {
    const wanted = Object.entries(skipped.labels)
      .map(([k, v]) => `${k}=${v}`)
      .join(', ');
    input.warn?.(
      `class "${skipped.name}" is not enforced on this host: it needs labels ${wanted} (set them in ${labelsFile()})`,
    );
  }
  // Facts are given, so the backend is the one asked for, else the one of their OS.
  const backend =
    target.backendName === undefined
      ? target.registry.forFacts(facts)
      : target.registry.get(target.backendName);
  const { artifacts, hash } = compileWithHash(backend, {
    ir,
    options: target.options,
    versions: { compiler: VERSION, agent: VERSION },
  });
  // What was compiled short of what the policy says in full (a class whose tunnel is absent,
  // compiled kill-switch-only): said, or the artifacts look like a bug.
  const notes = backend.createCompiler().notes?.(ir, { options: target.options }) ?? [];
  for (const note of notes) input.warn?.(note);
  return {
    policy,
    independent,
    facts,
    ir,
    backend,
    artifacts,
    lockdown: artifactOfRole(backend, artifacts, 'lockdown')?.content,
    hash,
    notes,
    missingIngress: findMissingIngress(
      ir,
      facts.interfaces.map((i) => i.name),
    ),
  };
}

/**
 * Compiles a policy for a host of these facts with the backend asked for, or the one of their OS
 * (`compile`): the stamped artifacts and the host config hash. Pure: no host is touched.
 */
export function compilePolicy(
  policy: Policy,
  facts: HostFacts,
  options: {
    readonly backend?: string | undefined;
    readonly options?: BackendOptions;
    readonly registry?: BackendRegistry;
    readonly warn?: (message: string) => void;
  } = {},
): Prepared {
  return prepareForFacts(
    {
      backendName: options.backend,
      registry: options.registry ?? defaultRegistry,
      options: options.options ?? {},
    },
    { policy, facts, ...(options.warn === undefined ? {} : { warn: options.warn }) },
  );
}
