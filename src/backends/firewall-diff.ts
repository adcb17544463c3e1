import type { FirewallDiff } from './backend.js';

/** The lines `plan` prints for a firewall diff: a rule per line, a set's elements in brief. */
export function describeFirewallDiff(diff: FirewallDiff): string[] {
  const lines = [
    ...diff.rules.added.map((id) => `+ rule "${id}"`),
    ...diff.rules.removed.map((id) => `- rule "${id}"`),
    ...diff.rules.changed.map((id) => `~ rule "${id}"`),
  ];
  for (const set of diff.sets) {
    const sample = [
      ...set.sampleAdded.map((e) => `+${e}`),
      ...set.sampleRemoved.map((e) => `-${e}`),
    ];
    const more = set.added + set.removed - sample.length;
    lines.push(
      `~ set "${set.set}" (${set.family}): ${set.added.toLocaleString('en-US')} added, ${set.removed.toLocaleString('en-US')} removed: ${sample.join(' ')}${more > 0 ? ` … and ${more.toLocaleString('en-US')} more` : ''}`,
    );
  }
  return lines;
}
