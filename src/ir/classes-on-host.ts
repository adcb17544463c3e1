import type { HostFacts } from '../facts/index.js';
import type { Policy, PolicyClass } from '../policy/index.js';

/** Whether a class applies on this host: every label it asks for is in the host's facts. */
export function isClassOnHost(cls: PolicyClass, facts: HostFacts): boolean {
  return Object.entries(cls.labels).every(([k, v]) => facts.labels[k] === v);
}

/** Classes this host does not carry because its labels do not match (lowering leaves them out). */
export function classesNotOnHost(
  policy: Policy,
  facts: HostFacts,
): { name: string; labels: Readonly<Record<string, string>> }[] {
  return policy.classes
    .filter((c) => !isClassOnHost(c, facts))
    .map((c) => ({ name: c.name, labels: c.labels }));
}
