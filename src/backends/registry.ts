import { EgressguardError } from '../core/index.js';
import type { HostFacts } from '../facts/index.js';
import type { Backend } from './backend.js';

/** The backends this build knows, by name. */
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
        hint: `use one of: ${[...this.backends.keys()].join(', ')}`,
      });
    }
    return backend;
  }

  /** The backend that enforces on a host of these facts. */
  forFacts(facts: HostFacts): Backend {
    const name = this.byOs.get(facts.os);
    if (name === undefined) {
      throw new EgressguardError('unsupported', `No backend enforces on ${facts.os} in this build`);
    }
    return this.get(name);
  }

  names(): string[] {
    return [...this.backends.keys()];
  }
}
