import { EgressguardError } from '../core/index.js';
import type { HostFacts } from '../facts/index.js';
import type { CommandClassifier } from '../runner/index.js';
import type { Backend, BackendOption, ClusterSupport } from './backend.js';
import { ciliumBackend } from './cilium/index.js';
import { nftablesBackend } from './nftables/index.js';
import { pfBackend } from './pf/index.js';

/** The backends a build knows, by name, and which one enforces on each OS. */
export class BackendRegistry {
  private readonly backends = new Map<string, Backend>();
  private readonly byOs = new Map<HostFacts['os'], string>();

  register(backend: Backend, options: { defaultFor?: HostFacts['os'] } = {}): this {
    this.backends.set(backend.name, backend);
    if (options.defaultFor !== undefined) this.byOs.set(options.defaultFor, backend.name);
    return this;
  }

  get(name: string): Backend {
    const backend = this.backends.get(name);
    if (backend === undefined) {
      throw new EgressguardError('usage', `Unknown backend "${name}"`, {
        hint: `use one of: ${this.names().join(', ')}`,
      });
    }
    return backend;
  }

  /** The backend that enforces on a host of these facts. */
  forFacts(facts: Pick<HostFacts, 'os' | 'hostname'>): Backend {
    const name = this.byOs.get(facts.os);
    if (name === undefined) {
      throw new EgressguardError(
        'unsupported',
        `No backend enforces on ${facts.os} in this build (host "${facts.hostname}")`,
        { hint: `the backends are: ${this.names().join(', ')}` },
      );
    }
    return this.get(name);
  }

  /** The OS a backend is the firewall of (`defaultFor`), if any: the host facts it reads. */
  osOf(backend: Backend): HostFacts['os'] | undefined {
    for (const [os, name] of this.byOs) if (name === backend.name) return os;
    return undefined;
  }

  names(): string[] {
    return [...this.backends.keys()];
  }

  all(): Backend[] {
    return [...this.backends.values()];
  }

  /** The cluster side of a node (`run --k8s`, `doctor --k8s`), from the backend that has one. */
  cluster(): ClusterSupport {
    const support = this.all().find((b) => b.cluster !== undefined)?.cluster;
    if (support === undefined) {
      throw new EgressguardError('unsupported', 'No backend of this build works with a cluster', {
        hint: `the backends are: ${this.names().join(', ')}`,
      });
    }
    return support;
  }

  /** How each backend's own tools read or change state, for the root-namespace guard. */
  classifiers(): CommandClassifier[] {
    return this.all().flatMap((b) => (b.classifyCommand === undefined ? [] : [b.classifyCommand]));
  }

  /** Every option any backend declares, once per key, with the backends that take it. */
  options(): { readonly option: BackendOption; readonly backends: readonly string[] }[] {
    const byKey = new Map<string, { option: BackendOption; backends: string[] }>();
    for (const backend of this.all()) {
      for (const option of backend.options) {
        const known = byKey.get(option.key);
        if (known === undefined) byKey.set(option.key, { option, backends: [backend.name] });
        else known.backends.push(backend.name);
      }
    }
    return [...byKey.values()];
  }
}

/** The backends of this build. Adding a backend is a folder under src/backends/ and one line here. */
export const registry = new BackendRegistry()
  .register(nftablesBackend, { defaultFor: 'linux' })
  .register(pfBackend, { defaultFor: 'darwin' })
  .register(ciliumBackend);
