import {
  registry as defaultRegistry,
  type Backend,
  type BackendOptions,
  type BackendRegistry,
} from '../backends/index.js';
import { hostOs, type HostFacts } from '../facts/index.js';
import { FILES, readGeneration } from '../apply/index.js';
import { createRunner, type Runner } from '../runner/index.js';
import { StateDir } from '../state/index.js';

/** A host, or a network namespace of one, that egressguard acts on. */
export interface HostTarget {
  readonly netns: string | undefined;
  readonly runner: Runner;
  readonly state: StateDir;
  /** The backends' options as given (`--table`, `--route-table`…); each reads its own keys. */
  readonly options: BackendOptions;
  readonly registry: BackendRegistry;
  /** A backend asked for by name (`--target`); undefined: the host's facts choose. */
  readonly backendName: string | undefined;
}

export interface HostTargetInput {
  readonly netns?: string | undefined;
  /** The state directory root (default: $EGRESSGUARD_STATE_DIR or /var/lib/egressguard). */
  readonly stateDir?: string | undefined;
  readonly options?: BackendOptions;
  readonly backend?: string | undefined;
  /** Refuse changes outside a named namespace (default: EGRESSGUARD_ROOTNS_GUARD=1). */
  readonly guard?: boolean;
  readonly registry?: BackendRegistry;
}

/**
 * The target of a command: its runner (which knows every registered backend's tools, for the
 * root-namespace guard), its state directory, and the backend options given.
 */
export function createHostTarget(input: HostTargetInput = {}): HostTarget {
  const registry = input.registry ?? defaultRegistry;
  return {
    netns: input.netns,
    runner: createRunner({
      netns: input.netns,
      classifiers: registry.classifiers(),
      ...(input.guard === undefined ? {} : { guard: input.guard }),
    }),
    state: new StateDir({ root: input.stateDir, netns: input.netns }),
    options: input.options ?? {},
    registry,
    backendName: input.backend,
  };
}

/**
 * The backend that acts on a target: the one asked for by name; else the one of these facts;
 * else the one that recorded the applied generation (status, remove, restore); else the one for
 * this machine's OS.
 */
export function backendOf(target: HostTarget, facts?: Pick<HostFacts, 'os' | 'hostname'>): Backend {
  if (target.backendName !== undefined) return target.registry.get(target.backendName);
  if (facts !== undefined) return target.registry.forFacts(facts);
  let recorded: string | undefined;
  try {
    recorded = readGeneration(target.state, FILES.applied)?.backend;
  } catch {
    recorded = undefined; // corrupt state: status reports it; the host's own backend reads it
  }
  if (recorded !== undefined) return target.registry.get(recorded);
  return target.registry.forFacts({ os: hostOs(), hostname: 'this host' });
}

/** What the apply layer's functions take for a target and its backend. */
export function hostContext(
  target: HostTarget,
  backend: Backend,
): { backend: Backend; runner: Runner; state: StateDir; options: BackendOptions } {
  return { backend, runner: target.runner, state: target.state, options: target.options };
}
