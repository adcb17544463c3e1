import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseAllDocuments } from 'yaml';
import { REAPPLIED_ANNOTATION } from '../../../src/backends/cilium/cilium-manifests.js';
import { gatewayLabel } from '../../../src/backends/cilium/gateway-label.js';
import type { JsonValue } from '../../../src/backends/cilium/json-patch.js';
import {
  startKubeApiModel,
  type AccessRule,
  type KubeApiModel,
  type ModelResource,
  type ModelUser,
  type Verb,
} from '../../../sim/cilium/kube-api-model.js';
import { vpnEgressGatewayPolicy } from '../../../sim/cilium/test-manifests.js';

/**
 * A cluster for the gateway resident: the MODEL of the Kubernetes API server
 * (src/backends/cilium/kube-api-model.ts; no cluster runs here) over HTTPS on loopback, with the
 * gateway node "k3s-gw-1" (the example's facts), the egress gateway policy egressguard compiles for class vpn (its
 * nodeSelector on gatewayLabel('vpn')) and another team's policy that selects another label.
 * The resident's user has exactly the grants of deploy/kubernetes/rbac.yaml, so a call the
 * manifests do not allow fails here as it would on a cluster.
 */
export const NODE = 'k3s-gw-1';
/** The name `compile --target cilium` gives k3s-vpn-egress's egress gateway policy. */
export const OWN_POLICY = 'egressguard-k3s-vpn-egress-vpn';
export const OTHER_POLICY = 'other-team-egress';
export const VPN_LABEL = gatewayLabel('vpn');

const RBAC = fileURLToPath(new URL('../../../deploy/kubernetes/rbac.yaml', import.meta.url));
const TLS = fileURLToPath(
  new URL('../../../src/backends/cilium/testdata/kube-api-tls/', import.meta.url),
);

interface RbacRule {
  apiGroups: string[];
  resources: string[];
  resourceNames?: string[];
  verbs: string[];
}

/** The rules of a role in deploy/kubernetes/rbac.yaml. */
export function rbacRules(kind: 'ClusterRole' | 'Role', name: string): RbacRule[] {
  const documents = parseAllDocuments(readFileSync(RBAC, 'utf8')).map(
    (d) => d.toJS() as { kind?: string; metadata?: { name?: string }; rules?: RbacRule[] },
  );
  const role = documents.find((d) => d.kind === kind && d.metadata?.name === name);
  if (role?.rules === undefined) throw new Error(`No ${kind} "${name}" in ${RBAC}`);
  return role.rules;
}

/** The gateway service account as the model knows users: the ClusterRole's rules, as written. */
export function gatewayUser(): ModelUser {
  const rules: AccessRule[] = rbacRules('ClusterRole', 'egressguard-gateway').flatMap((rule) =>
    rule.resources.map((resource) => ({
      verbs: rule.verbs as Verb[],
      resource: resource as ModelResource,
      ...(rule.resourceNames === undefined ? {} : { resourceNames: rule.resourceNames }),
    })),
  );
  return {
    name: 'system:serviceaccount:egressguard:egressguard-gateway',
    token: 'gw-token',
    rules,
  };
}

export interface GatewayCluster {
  readonly model: KubeApiModel;
  /** A kubeconfig file for the gateway user. */
  readonly kubeconfig: string;
  dispose(): Promise<void>;
}

export async function startGatewayCluster(
  options: { readonly labels?: Readonly<Record<string, string>> } = {},
): Promise<GatewayCluster> {
  const read = (file: string): string => readFileSync(join(TLS, file), 'utf8');
  const own = {
    ...vpnEgressGatewayPolicy({
      egressGateway: {
        nodeSelector: { matchLabels: { [VPN_LABEL.key]: VPN_LABEL.value } },
        interface: 'tun0',
      },
    }),
    metadata: { name: OWN_POLICY },
  };
  const other = {
    ...vpnEgressGatewayPolicy({
      egressGateway: {
        nodeSelector: { matchLabels: { 'other-team/gateway': 'yes' } },
        interface: 'eth1',
      },
    }),
    metadata: { name: OTHER_POLICY },
  };
  const model = await startKubeApiModel({
    users: [gatewayUser()],
    nodes: [
      {
        name: NODE,
        internalIP: '192.168.1.10',
        ...(options.labels === undefined ? {} : { labels: options.labels }),
      },
      { name: 'worker-1', internalIP: '192.168.1.11' },
    ],
    egressGatewayPolicies: [own as unknown as JsonValue, other as unknown as JsonValue],
    tls: { key: read('server.key'), cert: read('server.crt'), ca: read('ca.crt') },
  });
  const dir = mkdtempSync(join(tmpdir(), 'egtest-gateway-cluster-'));
  const kubeconfig = join(dir, 'gateway.kubeconfig');
  writeFileSync(kubeconfig, model.kubeconfig(gatewayUser().name), { mode: 0o600 });
  return {
    model,
    kubeconfig,
    async dispose() {
      await model.close();
      rmSync(dir, { recursive: true, force: true });
    },
  };
}

/** The gateway node's labels as the model stores them now. */
export function nodeLabels(model: KubeApiModel, node = NODE): Record<string, string> {
  const object = model.node(node) as { metadata?: { labels?: Record<string, string> } } | undefined;
  return object?.metadata?.labels ?? {};
}

/** Whether the node carries the vpn gateway label. */
export function hasGatewayLabel(model: KubeApiModel): boolean {
  return nodeLabels(model)[VPN_LABEL.key] === VPN_LABEL.value;
}

/** A policy's re-applied annotation and resourceVersion. */
export function policyStamp(
  model: KubeApiModel,
  name: string,
): { readonly reapplied: string | undefined; readonly resourceVersion: string } {
  const object = model.egressGatewayPolicy(name) as {
    metadata: { annotations?: Record<string, string>; resourceVersion: string };
  };
  return {
    reapplied: object.metadata.annotations?.[REAPPLIED_ANNOTATION],
    resourceVersion: object.metadata.resourceVersion,
  };
}
