import type { JsonValue } from '../../src/backends/cilium/json-patch.js';

// Pods and CiliumEndpoints as the API server returns them, in namespace "apps" on the worker,
// for the tests of what doctor and the resident judge of a class's pods (unsteered-pods.ts).

/** A Pod as the API server returns it: the fields doctor reads. */
export function testPod(
  name: string,
  labels: Record<string, string>,
  options: { phase?: string; hostNetwork?: boolean; gate?: boolean } = {},
): JsonValue {
  return {
    apiVersion: 'v1',
    kind: 'Pod',
    metadata: { name, namespace: 'apps', labels },
    spec: {
      nodeName: 'k3s-worker-1',
      ...(options.hostNetwork === true ? { hostNetwork: true } : {}),
      ...(options.gate === false ? {} : { initContainers: [{ name: 'egressguard-tunnel-gate' }] }),
      containers: [{ name: 'app' }],
    },
    status: { phase: options.phase ?? 'Running' },
  };
}

/**
 * A CiliumEndpoint as the agent writes it (status.identity.labels as "source:key=value", and the
 * namespace's labels under io.cilium.k8s.namespace.labels: pkg/k8s/apis/cilium.io/v2 types).
 */
export function testCiliumEndpoint(
  name: string,
  options: { labels?: string[] | null; address?: boolean } = {},
): JsonValue {
  return {
    apiVersion: 'cilium.io/v2',
    kind: 'CiliumEndpoint',
    metadata: { name, namespace: 'apps' },
    status: {
      ...(options.labels === null
        ? {}
        : {
            identity: {
              id: 41234,
              labels: options.labels ?? [
                'k8s:egress-class=vpn',
                'k8s:io.cilium.k8s.namespace.labels.kubernetes.io/metadata.name=apps',
                'k8s:io.kubernetes.pod.namespace=apps',
              ],
            },
          }),
      networking: {
        node: '192.168.1.22',
        addressing: options.address === false ? [] : [{ ipv4: '10.42.1.17' }],
      },
    },
  };
}
