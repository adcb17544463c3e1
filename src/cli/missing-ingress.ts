import { EgressguardError } from '../core/index.js';
import type { Prepared } from '../host/index.js';

/**
 * Ingress interfaces a class names that the host lacks: `apply` refuses them unless told they are
 * expected (`--allow-missing-ingress`), since a typo (docker1 for docker0) filters nothing and
 * lets the workloads behind the real interface leave unfiltered; `plan` and `run` warn.
 */
export function checkMissingIngress(
  prepared: Pick<Prepared, 'missingIngress' | 'facts'>,
  options: { readonly allowed: boolean; readonly warn: (message: string) => void },
): void {
  if (prepared.missingIngress.length === 0) return;
  const which = prepared.missingIngress
    .map((m) => `class "${m.class}" names ingress "${m.interface}"${m.suggestion}`)
    .join('; ');
  const what = `${which}, which host "${prepared.facts.hostname}" does not have: such a class filters nothing until the interface appears, and workloads behind another interface leave unfiltered`;
  if (!options.allowed) {
    throw new EgressguardError('usage', `Cannot apply: ${what}`, {
      hint: 'fix the name in the policy; if the interface is created later (a bridge made when the first workload starts), pass --allow-missing-ingress: it is filtered from the moment it appears',
    });
  }
  options.warn(what);
}
