import { didYouMean } from '../policy/index.js';
import type { HostIR } from './nodes.js';

/** An ingress interface of a class that the host does not have. */
export interface MissingIngress {
  readonly class: string;
  readonly interface: string;
  /** ` (did you mean "docker0"?)`, or '' when no interface of the host is close. */
  readonly suggestion: string;
}

/**
 * The ingress interfaces named exactly (not a prefix like veth*, which matches nothing until its
 * first workload starts) of the classes a host carries, that none of its interfaces has. A typo
 * (docker1 for docker0) filters nothing, and the workloads behind the real interface leave
 * unfiltered; an interface created later (a bridge made after boot) is filtered once it appears,
 * since the firewall matches the name.
 */
export function findMissingIngress(
  ir: Pick<HostIR, 'classes'>,
  interfaces: readonly string[],
): MissingIngress[] {
  const present = new Set(interfaces);
  return ir.classes.flatMap((c) =>
    c.selector.kind !== 'ingress'
      ? []
      : c.selector.interfaces
          .filter((name) => !name.endsWith('*') && !present.has(name))
          .map((name) => ({
            class: c.name,
            interface: name,
            suggestion: didYouMean(name, interfaces),
          })),
  );
}
