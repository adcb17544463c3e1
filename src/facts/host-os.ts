import type { HostFacts } from './host-facts.js';

/** The OS this process runs on, as facts name it (what chooses the backend without facts). */
export function hostOs(): HostFacts['os'] {
  return process.platform === 'darwin' ? 'darwin' : 'linux';
}
