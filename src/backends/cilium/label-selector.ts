import type { LabelSelector, LabelSelectorRequirement } from './cilium-manifests.js';

/**
 * Kubernetes label-selector semantics (kubernetes.io/docs/concepts/overview/working-with-objects/
 * labels/, "Label selectors"; LabelSelector in the API reference): matchLabels and every
 * matchExpressions requirement are ANDed; an empty selector selects everything; `NotIn` also
 * selects objects without the key, `DoesNotExist` only those.
 */
export function matchesLabelSelector(
  selector: LabelSelector,
  labels: Readonly<Record<string, string>>,
): boolean {
  for (const [key, value] of Object.entries(selector.matchLabels ?? {})) {
    if (labels[key] !== value) return false;
  }
  return (selector.matchExpressions ?? []).every((r) => matchesRequirement(r, labels));
}

function matchesRequirement(
  requirement: LabelSelectorRequirement,
  labels: Readonly<Record<string, string>>,
): boolean {
  const has = Object.hasOwn(labels, requirement.key);
  const value = labels[requirement.key];
  const values = requirement.values ?? [];
  switch (requirement.operator) {
    case 'In':
      return has && values.includes(value as string);
    case 'NotIn':
      return !has || !values.includes(value as string);
    case 'Exists':
      return has;
    case 'DoesNotExist':
      return !has;
  }
}

/** Whether a selector names a key (in matchLabels or matchExpressions). */
export function selectorHasKey(selector: LabelSelector, test: (key: string) => boolean): boolean {
  return (
    Object.keys(selector.matchLabels ?? {}).some(test) ||
    (selector.matchExpressions ?? []).some((r) => test(r.key))
  );
}

/** The selector with every key rewritten (Cilium's `k8s:` source prefixes, namespace labels). */
export function mapSelectorKeys(
  selector: LabelSelector,
  rename: (key: string) => string,
): LabelSelector {
  const out: {
    matchLabels?: Record<string, string>;
    matchExpressions?: LabelSelectorRequirement[];
  } = {};
  if (selector.matchLabels !== undefined) {
    out.matchLabels = Object.fromEntries(
      Object.entries(selector.matchLabels).map(([k, v]) => [rename(k), v]),
    );
  }
  if (selector.matchExpressions !== undefined) {
    out.matchExpressions = selector.matchExpressions.map((r) => ({ ...r, key: rename(r.key) }));
  }
  return out;
}
