import type { PolicyRule, PortRange, Protocol } from './policy.js';

/** Rules that an earlier rule matches completely (first match wins, so they never decide). */
export function findShadowedRules(rules: readonly PolicyRule[]): { index: number; by: string }[] {
  const shadowed: { index: number; by: string }[] = [];
  rules.forEach((rule, j) => {
    const earlier = rules.slice(0, j).find((candidate) => covers(candidate, rule));
    if (earlier !== undefined) shadowed.push({ index: j, by: earlier.id });
  });
  return shadowed;
}

function covers(a: PolicyRule, b: PolicyRule): boolean {
  return (
    coversDestination(a, b) &&
    coversList<Protocol>(a.protocols, b.protocols, (x, y) => x === y) &&
    coversPorts(a.ports, b.ports)
  );
}

function coversDestination(a: PolicyRule, b: PolicyRule): boolean {
  const da = a.destination;
  const db = b.destination;
  if (da.kind === 'any') return true;
  if (da.kind === 'self') return db.kind === 'self';
  if (db.kind !== 'addresses') return false;
  // An empty destination matches nothing: it is not shadowed, it is dead (warned elsewhere).
  return !db.set.isEmpty() && da.set.covers(db.set);
}

function coversList<T>(
  a: readonly T[] | null,
  b: readonly T[] | null,
  same: (x: T, y: T) => boolean,
): boolean {
  if (a === null) return true;
  if (b === null) return false;
  return b.every((y) => a.some((x) => same(x, y)));
}

function coversPorts(a: readonly PortRange[] | null, b: readonly PortRange[] | null): boolean {
  return coversList(a, b, (x, y) => x.from <= y.from && y.to <= x.to);
}
