import { hostname } from 'node:os';
import { EgressguardError, isEgressguardError } from '../../core/index.js';
import type { HostFacts } from '../../facts/index.js';
import type { PolicyIR } from '../../ir/index.js';
import type { ClusterDuty, ClusterSupport } from '../backend.js';
import { clusterChecklist, diagnoseCluster, ours } from './cluster-doctor.js';
import type { TunnelExitProbe } from './gateway-connection.js';
import { backstopPolicyName, egressGatewayPolicyName, ROLE_LABEL } from './cilium-compiler.js';
import { createKubeClient } from './kube-client.js';
import { podListSelector } from './unsteered-pods.js';

/**
 * What a gateway node keeps on the cluster: for each Kubernetes class with a kill switch, the
 * node label its egress gateway policy selects (the IR's pod kill switch names it), while the
 * class's tunnel is up on this node.
 */
export function gatewayDuties(policy: PolicyIR): ClusterDuty[] {
  return policy.podClasses.flatMap((c) => {
    if (c.via.kind !== 'tunnel' || c.killSwitch === null) return [];
    const label = c.killSwitch.nodeLabel;
    const what = `node label ${label.key}=${label.value}`;
    // The steering and the backstop policy the compile writes for the class.
    const objects = [egressGatewayPolicyName(policy, c), backstopPolicyName(policy, c)];
    return [{ id: c.name, tunnel: c.via.interface, nodeLabel: label, what, objects }];
  });
}

/**
 * The node's name in the cluster: --node, else NODE_NAME (the DaemonSet sets it from
 * spec.nodeName), else the host name (what k3s and kubeadm register a node as by default).
 */
function nodeName(given: string | undefined): string {
  const name = given ?? process.env['NODE_NAME'] ?? hostname();
  if (!/^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$/.test(name) || name.length > 253) {
    throw new EgressguardError('usage', `Cannot use "${name}" as a Kubernetes node name`, {
      hint: 'give --node NAME as `kubectl get nodes` lists it (lowercase letters, digits, - and .)',
    });
  }
  return name;
}

/**
 * What the resident asks to see each tunnel's exit: the facts' echo service and exit addresses,
 * asked from the tunnel's first IPv4 address (its policy routing sends that into the tunnel).
 */
function exitProbes(facts: HostFacts | undefined): Record<string, TunnelExitProbe> {
  const out: Record<string, TunnelExitProbe> = {};
  for (const [tunnel, exit] of Object.entries(facts?.cluster?.tunnelExits ?? {})) {
    const address = facts?.interfaces
      .find((i) => i.name === tunnel)
      ?.addresses.map((a) => a.split('/')[0] as string)
      .find((a) => !a.includes(':'));
    out[tunnel] = { echoUrl: exit.echoUrl, addresses: exit.addresses, source: address };
  }
  return out;
}

/** The Cilium backend's cluster side: the gateway label resident and the cluster checklist. */
export const ciliumClusterSupport: ClusterSupport = {
  description:
    'keeps the egress gateway label on this node only while its tunnel is up, and re-applies the CiliumEgressGatewayPolicy when it returns',
  duties: gatewayDuties,
  async connect(input) {
    const node = nodeName(input.node);
    const client = createKubeClient({ kubeconfig: input.credentials });
    // Fail at start, not at the first tunnel event: the node must exist and be readable.
    await client.readNodeLabels(node);
    // prom-client is loaded by the resident only, not by every command that lists backends.
    const { createGatewayConnection } = await import('./gateway-connection.js');
    return createGatewayConnection({ client, node, exits: exitProbes(input.facts) });
  },
  async diagnose(input) {
    if (input.credentials === undefined) return clusterChecklist();
    const client = createKubeClient({ kubeconfig: input.credentials });
    const read = async <T>(what: () => Promise<T>): Promise<{ data: T } | { error: string }> => {
      try {
        return { data: await what() };
      } catch (error) {
        if (!isEgressguardError(error)) throw error;
        return { error: error.message };
      }
    };
    const [config, images, nodes, ciliumNodes, egressPolicies] = await Promise.all([
      read(() => client.readConfigMap('kube-system', 'cilium-config')),
      read(() => client.readDaemonSetImages('kube-system', 'cilium')),
      read(() => client.listNodeLabels()),
      read(() => client.listCiliumNodeLabels()),
      read(() => client.listEgressGatewayPolicies()),
    ]);
    // The pods of egressguard's steering policies, and every CiliumEndpoint: whether Cilium can
    // steer each running pod of a class.
    const selectors =
      'data' in egressPolicies
        ? [
            ...new Set(
              ours(egressPolicies.data)
                .filter((p) => p.labels[ROLE_LABEL] === 'steering')
                .flatMap((p) => podListSelector(p) ?? []),
            ),
          ]
        : [];
    const [pods, endpoints] =
      selectors.length === 0
        ? [undefined, undefined]
        : await Promise.all([
            read(async () => (await Promise.all(selectors.map((s) => client.listPods(s)))).flat()),
            read(() => client.listCiliumEndpoints()),
          ]);
    return diagnoseCluster({
      config,
      images,
      nodes,
      ciliumNodes,
      egressPolicies,
      ...(pods === undefined ? {} : { pods }),
      ...(endpoints === undefined ? {} : { endpoints }),
    });
  },
};
