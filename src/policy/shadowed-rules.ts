import { AddressSet } from '../core/index.js';
import type { PolicyRule, PortRange, Protocol } from './policy.js';

/**
 * Rules that earlier rules match completely (first match wins, so they never decide), with the
 * ids of the earlier rules that do: one rule when one suffices, else every earlier rule whose
 * protocols and ports cover it and whose destinations together cover its destination.
 */
export function findShadowedRules(
  rules: readonly PolicyRule[],
): { index: number; by: readonly string[] }[] {
  const shadowed: { index: number; by: readonly string[] }[] = [];
  rules.forEach((rule, j) => {
    if (isEmptyDestination(rule)) return;
    const earlier = rules.slice(0, j).filter((a) => coversTraffic(a, rule));
    const single = earlier.find((a) => coversDestination(a, rule));
    if (single !== undefined) {
      shadowed.push({ index: j, by: [single.id] });
      return;
    }
    const target = rule.destination;
    if (target.kind !== 'addresses') return;
    const contributing = earlier.filter(
      (a) =>
        a.destination.kind === 'addresses' && !a.destination.set.intersect(target.set).isEmpty(),
    );
    const union = contributing.reduce(
      (set, a) => (a.destination.kind === 'addresses' ? set.union(a.destination.set) : set),
      AddressSet.EMPTY,
    );
    if (contributing.length > 1 && union.covers(target.set)) {
      shadowed.push({ index: j, by: contributing.map((a) => a.id) });
    }
  });
  return shadowed;
}

// An empty destination matches nothing: it is not shadowed, it is dead (warned where emptied).
function isEmptyDestination(rule: PolicyRule): boolean {
  return rule.destination.kind === 'addresses' && rule.destination.set.isEmpty();
}

/** Whether `a` matches every protocol and port that `b` does (destinations aside). */
function coversTraffic(a: PolicyRule, b: PolicyRule): boolean {
  return coversProtocols(a.protocols, b.protocols) && coversPorts(a.ports, b.ports);
}

function coversDestination(a: PolicyRule, b: PolicyRule): boolean {
  const da = a.destination;
  const db = b.destination;
  if (da.kind === 'any') return true;
  // "self" is the host's addresses, known only from facts: only "self" and "any" cover it.
  if (da.kind === 'self') return db.kind === 'self';
  if (db.kind !== 'addresses') return false;
  return da.set.covers(db.set);
}

function coversProtocols(a: readonly Protocol[] | null, b: readonly Protocol[] | null): boolean {
  if (a === null) return true;
  if (b === null) return false;
  return b.every((p) => a.includes(p));
}

function coversPorts(a: readonly PortRange[] | null, b: readonly PortRange[] | null): boolean {
  if (a === null) return true;
  if (b === null) return false;
  const merged = mergePortRanges(a);
  return b.every((y) => merged.some((x) => x.from <= y.from && y.to <= x.to));
}

/** Sorted, with overlapping and adjacent ranges joined (80-89 and 90-99 cover 85-95). */
function mergePortRanges(ranges: readonly PortRange[]): PortRange[] {
  const sorted = [...ranges].sort((x, y) => x.from - y.from);
  const out: { from: number; to: number }[] = [];
  for (const range of sorted) {
    const last = out.at(-1);
    if (last !== undefined && range.from <= last.to + 1) last.to = Math.max(last.to, range.to);
    else out.push({ from: range.from, to: range.to });
  }
  return out;
}
