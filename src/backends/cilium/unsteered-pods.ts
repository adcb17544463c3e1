import type { LabelSelector } from './cilium-manifests.js';
import type { CiliumEndpointObject, EgressGatewayPolicyObject, PodObject } from './kube-client.js';
import { matchesLabelSelector } from './label-selector.js';
import { GATE_CONTAINER } from './tunnel-gate.js';

/*
 * Which running pods of a tunnel class Cilium's egress gateway cannot have an entry for, judged
 * from what the API server shows of them. The egress gateway programs a pod from its
 * CiliumEndpoint: none, one without an identity, or one without an address gives no entry
 * (pkg/egressgateway manager.go addEndpoint, endpoint.go getEndpointMetadata), and a policy
 * steers the endpoints whose identity labels its selectors match (policy.go, the selectors become
 * endpoint selectors on the identity's labels). A pod's identity keeps only the labels Cilium's
 * label filter lets through (the agent's `labels` option; "Limiting Identity-Relevant Labels" in
 * Cilium's docs): a class label it filters out selects the pod for Kubernetes but never for the
 * egress gateway. A pod of the class with no entry leaves unsteered by its own node. Not visible
 * from the API server: the agent's own lookup of a new identity (retried with backoff), which the
 * tunnel gate holds the pod through.
 */

export const UNSTEERED_REASONS = [
  'host-network',
  'no-cilium-endpoint',
  'no-identity',
  'no-address',
  'identity-lacks-class-labels',
  'no-tunnel-gate',
] as const;

export type UnsteeredReason = (typeof UNSTEERED_REASONS)[number];

export interface UnsteeredPod {
  readonly namespace: string;
  readonly name: string;
  readonly node: string | undefined;
  /** The steering policy that selects the pod by its Kubernetes labels. */
  readonly policy: string;
  readonly reason: UnsteeredReason;
}

// Cilium's label for a pod's namespace, and the prefix of its namespace's labels on the identity
// (k8sConst.PodNamespaceLabel, PodNamespaceMetaLabels; policy.go turns a namespaceSelector's keys
// into these). A namespace carries kubernetes.io/metadata.name from the API server (1.22+).
const NAMESPACE_LABEL = 'io.kubernetes.pod.namespace';
const NAMESPACE_META_PREFIX = 'io.cilium.k8s.namespace.labels.';
const NAMESPACE_NAME_LABEL = 'kubernetes.io/metadata.name';

/** Selector keys may carry a label source ("k8s:app", "any:app"). */
function withoutSource(selector: LabelSelector, prefix = ''): LabelSelector {
  const key = (k: string) => prefix + k.replace(/^(k8s|any):/, '');
  return {
    matchLabels: Object.fromEntries(
      Object.entries(selector.matchLabels ?? {}).map(([k, v]) => [key(k), v]),
    ),
    matchExpressions: (selector.matchExpressions ?? []).map((e) => ({ ...e, key: key(e.key) })),
  };
}

/** Whether any selector of the policy matches these labels (a pod's own, or its identity's). */
function selects(
  policy: EgressGatewayPolicyObject,
  labels: Readonly<Record<string, string>>,
): boolean {
  return policy.selectors.some(
    (s) =>
      (s.podSelector !== undefined || s.namespaceSelector !== undefined) &&
      (s.podSelector === undefined || matchesLabelSelector(withoutSource(s.podSelector), labels)) &&
      (s.namespaceSelector === undefined ||
        matchesLabelSelector(withoutSource(s.namespaceSelector, NAMESPACE_META_PREFIX), labels)),
  );
}

/** A pod's Kubernetes labels as its identity would carry them, none filtered out. */
function podLabels(pod: PodObject): Record<string, string> {
  return {
    ...pod.labels,
    [NAMESPACE_LABEL]: pod.namespace,
    [`${NAMESPACE_META_PREFIX}${NAMESPACE_NAME_LABEL}`]: pod.namespace,
  };
}

/** An identity's labels ("k8s:key=value") as a map; labels of other sources keep their source. */
function identityLabels(labels: readonly string[]): Record<string, string> {
  const out: Record<string, string> = {};
  for (const text of labels) {
    const at = text.indexOf('=');
    const key = at < 0 ? text : text.slice(0, at);
    out[key.startsWith('k8s:') ? key.slice(4) : key] = at < 0 ? '' : text.slice(at + 1);
  }
  return out;
}

/**
 * The running pods of the given steering policies' classes that Cilium cannot steer, or that
 * started without the tunnel gate (never held until steered). Pending pods are left out: their
 * workload has not started, and the gate holds them.
 */
export function findUnsteeredPods(input: {
  readonly steering: readonly EgressGatewayPolicyObject[];
  readonly pods: readonly PodObject[];
  readonly endpoints: readonly CiliumEndpointObject[];
}): UnsteeredPod[] {
  const endpoints = new Map(input.endpoints.map((e) => [`${e.namespace}/${e.name}`, e]));
  const out: UnsteeredPod[] = [];
  for (const pod of input.pods) {
    if (pod.phase !== 'Running') continue;
    const policy = input.steering.find((p) => selects(p, podLabels(pod)));
    if (policy === undefined) continue;
    const endpoint = endpoints.get(`${pod.namespace}/${pod.name}`);
    const reason: UnsteeredReason | undefined = pod.hostNetwork
      ? 'host-network'
      : endpoint === undefined
        ? 'no-cilium-endpoint'
        : endpoint.identity === undefined
          ? 'no-identity'
          : endpoint.addresses.length === 0
            ? 'no-address'
            : !selects(policy, identityLabels(endpoint.identity.labels))
              ? 'identity-lacks-class-labels'
              : pod.firstInitContainer !== GATE_CONTAINER
                ? 'no-tunnel-gate'
                : undefined;
    if (reason === undefined) continue;
    out.push({
      namespace: pod.namespace,
      name: pod.name,
      node: pod.node,
      policy: policy.name,
      reason,
    });
  }
  return out.sort((a, b) => `${a.namespace}/${a.name}`.localeCompare(`${b.namespace}/${b.name}`));
}

/** The label selector (`key=value,…`) that lists a steering policy's pods: its matchLabels. */
export function podListSelector(policy: EgressGatewayPolicyObject): string | undefined {
  const labels = policy.selectors.map((s) => withoutSource(s.podSelector ?? {}).matchLabels ?? {});
  // One list per policy: the pod labels every selector requires (a selector without any lists
  // all); Cilium's own keys (the namespace) are no pod labels.
  const first = labels[0];
  if (first === undefined) return undefined;
  const common = Object.entries(first).filter(
    ([k, v]) => !k.startsWith('io.kubernetes.pod.') && labels.every((l) => l[k] === v),
  );
  return common.map(([k, v]) => `${k}=${v}`).join(',');
}
