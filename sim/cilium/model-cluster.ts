import type { HostFacts } from '../../src/facts/index.js';
import type { HostIR } from '../../src/ir/index.js';
import type { ModelNode, ModelService } from './cilium-model.js';
import type { ModelNodeNetwork, ModelRoute, ModelRule } from './node-routing-model.js';

/*
 * The pieces of a MODEL cluster for the k3s examples, shared by the tests that run compiled
 * manifests through the model of Cilium (the differential and the chainsaw mutation test): the
 * gateway node as its facts and the compiled steering make it, a worker, and the cluster's DNS and
 * API services. Test support: nothing in the product imports it.
 */

export const WORKER_IP = '192.168.1.22';

export interface Steering {
  rules: { family: 4 | 6; from: string; table: number; priority: number }[];
  routes: {
    family: 4 | 6;
    table: number;
    type: string;
    destination: string;
    device?: string;
    metric: number;
  }[];
}

/** The gateway node as the model sees it: the facts' devices and routes plus our steering. */
export function gatewayNetwork(
  facts: HostFacts,
  steering: Steering | undefined,
  tunnels: readonly string[],
  state: 'up' | 'down',
): ModelNodeNetwork {
  const devices = facts.interfaces
    // Tunnel down = deleted: its device, addresses and routes are gone.
    .filter((i) => state === 'up' || !tunnels.includes(i.name))
    .map((i) => ({ name: i.name, up: i.up, addresses: [...i.addresses] }));
  const main: ModelRoute[] = facts.routes.map((r) => ({
    to:
      r.destination === 'default'
        ? r.gateway?.includes(':') === true
          ? '::/0'
          : '0.0.0.0/0'
        : r.destination,
    dev: r.interface,
  }));
  const tables: Record<string, ModelRoute[]> = { main };
  // Routes sorted by metric: the model takes the first of equal prefixes, the kernel the lowest metric.
  // `throw` routes are left out: they only matter for excepted destinations, which the egress
  // gateway does not steer.
  for (const route of [...(steering?.routes ?? [])].sort((a, b) => a.metric - b.metric)) {
    if (route.type === 'throw') continue;
    const list = (tables[String(route.table)] ??= []);
    list.push(
      route.type === 'unicast'
        ? { to: route.destination, dev: route.device ?? '' }
        : { to: route.destination, type: route.type as 'blackhole' },
    );
  }
  const rules: ModelRule[] = (steering?.rules ?? []).map((r) => ({
    priority: r.priority,
    from: r.from,
    table: String(r.table),
  }));
  return { devices, tables, rules };
}

export function workerNode(): ModelNode {
  return {
    name: 'k3s-worker-1',
    labels: { 'kubernetes.io/hostname': 'k3s-worker-1' },
    internalIPs: [WORKER_IP],
    network: {
      devices: [{ name: 'eth0', up: true, addresses: [`${WORKER_IP}/24`] }],
      tables: {
        main: [
          { to: '192.168.1.0/24', dev: 'eth0' },
          { to: '0.0.0.0/0', dev: 'eth0' },
        ],
      },
    },
  };
}

// k3s's cluster DNS: CoreDNS behind the ClusterIP 10.43.0.10.
export const DNS_POD = {
  name: 'coredns',
  namespace: 'kube-system',
  labels: { 'k8s-app': 'kube-dns' },
  ips: ['10.42.0.5'],
};
export const DNS_SERVICE: ModelService = {
  name: 'kube-dns',
  namespace: 'kube-system',
  clusterIPs: ['10.43.0.10'],
  ports: [
    { protocol: 'udp', port: 53, targetPort: 53 },
    { protocol: 'tcp', port: 53, targetPort: 53 },
  ],
  backends: DNS_POD.ips,
};
// The API server runs on the gateway node (a k3s server): its service's backend is a node.
export const API_SERVICE = (gatewayIp: string): ModelService => ({
  name: 'kubernetes',
  namespace: 'default',
  clusterIPs: ['10.43.0.1'],
  ports: [{ protocol: 'tcp', port: 443, targetPort: 6443 }],
  backends: [gatewayIp],
});

export function gatewayLabels(ir: HostIR): Record<string, string> {
  const labels: Record<string, string> = {};
  for (const c of ir.podClasses) {
    if (c.killSwitch !== null) labels[c.killSwitch.nodeLabel.key] = c.killSwitch.nodeLabel.value;
  }
  return labels;
}
