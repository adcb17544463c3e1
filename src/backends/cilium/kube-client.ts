import { readFileSync } from 'node:fs';
import { Agent as HttpsAgent } from 'node:https';
import { createRequire } from 'node:module';
import type * as K8s from '@kubernetes/client-node';
import { EgressguardError } from '../../core/index.js';
import type { LabelSelector } from './cilium-manifests.js';

/**
 * The few Kubernetes API calls egressguard makes, through @kubernetes/client-node: read and
 * merge-patch its own Node, list and merge-patch CiliumEgressGatewayPolicies, read a ConfigMap
 * and a DaemonSet (doctor). Each call retries what the API server says is worth retrying (409
 * conflict, 429, 5xx, a connection that failed or timed out) a few times with a short backoff,
 * then fails with an EgressguardError that names the call. deploy/kubernetes/rbac.yaml grants
 * exactly these verbs (tested in deploy-kubernetes.test.ts against KUBE_CALLS).
 */
export interface KubeClient {
  /** The API server's URL, as the credentials name it. */
  readonly server: string;
  readNodeLabels(node: string): Promise<Readonly<Record<string, string>>>;
  /** A CiliumNode's labels: what Cilium's egress gateway selects the gateway by. */
  readCiliumNodeLabels(node: string): Promise<Readonly<Record<string, string>>>;
  /** Sets (a string) or removes (null) labels of a Node with one merge patch. */
  patchNodeLabels(node: string, labels: Readonly<Record<string, string | null>>): Promise<void>;
  listEgressGatewayPolicies(): Promise<readonly EgressGatewayPolicyObject[]>;
  /** Sets annotations of a CiliumEgressGatewayPolicy with one merge patch. */
  annotateEgressGatewayPolicy(
    name: string,
    annotations: Readonly<Record<string, string>>,
  ): Promise<void>;
  readConfigMap(namespace: string, name: string): Promise<Readonly<Record<string, string>>>;
  /** The images of a DaemonSet's containers. */
  readDaemonSetImages(namespace: string, name: string): Promise<readonly string[]>;
  /** Every Node's labels (doctor). */
  listNodeLabels(): Promise<readonly NamedLabels[]>;
  /** Every CiliumNode's labels: what Cilium's egress gateway selects gateways by (doctor). */
  listCiliumNodeLabels(): Promise<readonly NamedLabels[]>;
  /** The pods of every namespace that a label selector (`key=value,…`) selects (doctor). */
  listPods(labelSelector: string): Promise<readonly PodObject[]>;
  /** Every CiliumEndpoint: what Cilium's egress gateway programs pods from (doctor). */
  listCiliumEndpoints(): Promise<readonly CiliumEndpointObject[]>;
}

/** What doctor reads of a Pod. */
export interface PodObject {
  readonly namespace: string;
  readonly name: string;
  readonly labels: Readonly<Record<string, string>>;
  /** status.phase: Pending (its init containers included), Running, Succeeded, Failed. */
  readonly phase: string;
  readonly node: string | undefined;
  readonly hostNetwork: boolean;
  /** The name of its first init container, if any. */
  readonly firstInitContainer: string | undefined;
}

/**
 * What doctor reads of a CiliumEndpoint's status: what Cilium's egress gateway programs a pod from
 * (pkg/egressgateway manager.go addEndpoint, endpoint.go getEndpointMetadata).
 */
export interface CiliumEndpointObject {
  readonly namespace: string;
  readonly name: string;
  /** status.identity: its id and labels ("k8s:egress-class=vpn"); undefined when not yet set. */
  readonly identity: { readonly id: number; readonly labels: readonly string[] } | undefined;
  /** The addresses of status.networking.addressing (IPv4 and IPv6). */
  readonly addresses: readonly string[];
}

export interface NamedLabels {
  readonly name: string;
  readonly labels: Readonly<Record<string, string>>;
}

/** What the resident reads of a CiliumEgressGatewayPolicy. */
export interface EgressGatewayPolicyObject {
  readonly name: string;
  /** Why Cilium refuses the policy (pkg/egressgateway/policy.go ParseCEGP), if it does. */
  readonly refused: string | undefined;
  readonly labels: Readonly<Record<string, string>>;
  /** egressGateway.interface, when set. */
  readonly interface: string | undefined;
  /** spec.selectors: which pods it steers. */
  readonly selectors: readonly {
    readonly podSelector?: LabelSelector;
    readonly namespaceSelector?: LabelSelector;
  }[];
  readonly nodeSelector: {
    readonly matchLabels: Readonly<Record<string, string>>;
    readonly matchExpressions: readonly { readonly key: string }[];
  };
}

/** Every API call the code makes, as RBAC names it: what deploy/kubernetes grants, no more. */
export const KUBE_CALLS = {
  gateway: [
    { apiGroup: '', resource: 'nodes', verbs: ['get', 'patch'] },
    { apiGroup: 'cilium.io', resource: 'ciliumegressgatewaypolicies', verbs: ['list', 'patch'] },
    // Read only: whether its own CiliumNode follows the label (Cilium selects the gateway by it).
    { apiGroup: 'cilium.io', resource: 'ciliumnodes', verbs: ['get'] },
    // Read only: whether Cilium can steer each running pod of the class (a metric and an alert).
    { apiGroup: '', resource: 'pods', verbs: ['list'] },
    { apiGroup: 'cilium.io', resource: 'ciliumendpoints', verbs: ['list'] },
  ],
  doctor: [
    { apiGroup: '', resource: 'configmaps', verbs: ['get'], names: ['cilium-config'] },
    { apiGroup: 'apps', resource: 'daemonsets', verbs: ['get'], names: ['cilium'] },
  ],
  /** doctor's cluster-wide reads: the labels of Nodes and CiliumNodes, the egress policies. */
  doctorCluster: [
    { apiGroup: '', resource: 'nodes', verbs: ['list'] },
    { apiGroup: 'cilium.io', resource: 'ciliumnodes', verbs: ['list'] },
    { apiGroup: 'cilium.io', resource: 'ciliumegressgatewaypolicies', verbs: ['list'] },
    { apiGroup: '', resource: 'pods', verbs: ['list'] },
    { apiGroup: 'cilium.io', resource: 'ciliumendpoints', verbs: ['list'] },
  ],
} as const;

const CILIUM = { group: 'cilium.io', version: 'v2', plural: 'ciliumegressgatewaypolicies' };
const CILIUM_NODES = { group: 'cilium.io', version: 'v2', plural: 'ciliumnodes' };
const CILIUM_ENDPOINTS = { group: 'cilium.io', version: 'v2', plural: 'ciliumendpoints' };
const ATTEMPTS = 5;
const BACKOFF_MS = [50, 100, 200, 400];
const REQUEST_TIMEOUT_MS = 5_000;

/** Where credentials come from: a kubeconfig file, or the pod's service account (in-cluster). */
export interface KubeCredentials {
  readonly kubeconfig: string | undefined;
}

type ClientModule = typeof K8s;
type PromiseMiddleware = NonNullable<
  NonNullable<Parameters<typeof K8s.createConfiguration>[0]>['promiseMiddleware']
>[number];

let loaded: ClientModule | undefined;

/**
 * Loads @kubernetes/client-node on first use only: it is ~2 s of module loading, which no
 * command but the cluster ones should pay. An ES module loaded with require (Node ≥ 20.19), so
 * the CLI bundle keeps it external and needs no dynamic import in its vm.Script.
 */
function clientModule(): ClientModule {
  loaded ??= createRequire(import.meta.url)('@kubernetes/client-node') as ClientModule;
  return loaded;
}

/** A client for the cluster the credentials name. */
export function createKubeClient(credentials: KubeCredentials): KubeClient {
  const k8s = clientModule();
  const config = new k8s.KubeConfig();
  const source = credentials.kubeconfig ?? 'the in-cluster service account';
  try {
    if (credentials.kubeconfig === undefined) {
      if (process.env['KUBERNETES_SERVICE_HOST'] === undefined) {
        throw new Error('KUBERNETES_SERVICE_HOST is not set: this is not a pod');
      }
      config.loadFromCluster();
    } else {
      // Read here, so a missing file is our error and not the library's.
      config.loadFromString(readFileSync(credentials.kubeconfig, 'utf8'));
    }
  } catch (error) {
    throw new EgressguardError(
      'cluster-api',
      `Cannot load Kubernetes credentials from ${source}: ${(error as Error).message}`,
      {
        cause: error,
        hint: 'give --kubeconfig FILE, or run inside a pod with a service account (deploy/kubernetes/)',
      },
    );
  }
  const server = config.getCurrentCluster()?.server;
  if (server === undefined || server === '') {
    throw new EgressguardError(
      'cluster-api',
      `Cannot use the Kubernetes credentials from ${source}: no current cluster with a server`,
      { hint: 'set current-context in the kubeconfig to a context whose cluster has a server' },
    );
  }
  // makeApiClient's configuration, plus one middleware: connections kept alive.
  const configuration = k8s.createConfiguration({
    baseServer: new k8s.ServerConfiguration(server, {}),
    authMethods: { default: config },
    promiseMiddleware: [keepAlive()],
  });
  const core = new k8s.CoreV1Api(configuration);
  const apps = new k8s.AppsV1Api(configuration);
  const custom = new k8s.CustomObjectsApi(configuration);
  const merge = k8s.setHeaderOptions('Content-Type', k8s.PatchStrategy.MergePatch);

  const call = <T>(what: string, request: () => Promise<T>): Promise<T> =>
    withRetries(what, server, request, k8s.ApiException);

  return {
    server,
    async readNodeLabels(node) {
      const object = await call(`read node "${node}"`, () => core.readNode({ name: node }));
      return object.metadata?.labels ?? {};
    },
    async readCiliumNodeLabels(node) {
      const object = (await call(`read CiliumNode "${node}"`, () =>
        custom.getClusterCustomObject({ ...CILIUM_NODES, name: node }),
      )) as { metadata?: { labels?: Record<string, string> } };
      return object.metadata?.labels ?? {};
    },
    async patchNodeLabels(node, labels) {
      await call(`patch the labels of node "${node}"`, () =>
        core.patchNode({ name: node, body: { metadata: { labels } } }, merge),
      );
    },
    async listEgressGatewayPolicies() {
      const list = (await call('list CiliumEgressGatewayPolicies', () =>
        custom.listClusterCustomObject(CILIUM),
      )) as { items?: unknown[] };
      return (list.items ?? []).map(readEgressGatewayPolicy);
    },
    async annotateEgressGatewayPolicy(name, annotations) {
      await call(`annotate CiliumEgressGatewayPolicy "${name}"`, () =>
        custom.patchClusterCustomObject(
          { ...CILIUM, name, body: { metadata: { annotations } } },
          merge,
        ),
      );
    },
    async readConfigMap(namespace, name) {
      const map = await call(`read ConfigMap ${namespace}/${name}`, () =>
        core.readNamespacedConfigMap({ name, namespace }),
      );
      return map.data ?? {};
    },
    async listNodeLabels() {
      const list = await call('list nodes', () => core.listNode());
      return list.items.map((n) => ({
        name: n.metadata?.name ?? '',
        labels: n.metadata?.labels ?? {},
      }));
    },
    async listCiliumNodeLabels() {
      const list = (await call('list CiliumNodes', () =>
        custom.listClusterCustomObject(CILIUM_NODES),
      )) as { items?: { metadata?: { name?: string; labels?: Record<string, string> } }[] };
      return (list.items ?? []).map((n) => ({
        name: n.metadata?.name ?? '',
        labels: n.metadata?.labels ?? {},
      }));
    },
    async listPods(labelSelector) {
      const list = await call(`list pods (${labelSelector})`, () =>
        core.listPodForAllNamespaces({ labelSelector }),
      );
      return list.items.map((p) => ({
        namespace: p.metadata?.namespace ?? '',
        name: p.metadata?.name ?? '',
        labels: p.metadata?.labels ?? {},
        phase: p.status?.phase ?? '',
        node: p.spec?.nodeName,
        hostNetwork: p.spec?.hostNetwork === true,
        firstInitContainer: p.spec?.initContainers?.[0]?.name,
      }));
    },
    async listCiliumEndpoints() {
      const list = (await call('list CiliumEndpoints', () =>
        custom.listCustomObjectForAllNamespaces(CILIUM_ENDPOINTS),
      )) as { items?: unknown[] };
      return (list.items ?? []).map(readCiliumEndpoint);
    },
    async readDaemonSetImages(namespace, name) {
      const set = await call(`read DaemonSet ${namespace}/${name}`, () =>
        apps.readNamespacedDaemonSet({ name, namespace }),
      );
      return (set.spec?.template.spec?.containers ?? []).flatMap((c) =>
        c.image === undefined ? [] : [c.image],
      );
    },
  };
}

/**
 * Reuses connections. The library gives every request a new agent (config.js,
 * applySecurityAuthentication → createAgent), so every call paid a TCP and TLS handshake: on the
 * kill switch's path, the label PATCH after a tunnel went down. This swaps that agent for a
 * keep-alive one with the same TLS options (one per set of options, so rotated credentials get
 * their own); proxy agents are left alone. Idle sockets are unref'd by Node's agent, so they never
 * hold a command's exit.
 */
function keepAlive(): PromiseMiddleware {
  const agents = new Map<string, HttpsAgent>();
  return {
    pre(context) {
      const fresh = context.getAgent();
      if (fresh instanceof HttpsAgent && fresh.constructor === HttpsAgent) {
        const options = fresh.options;
        // Buffers serialise as their bytes, strings as themselves: equal options, equal keys.
        const key = JSON.stringify([
          options.ca,
          options.cert,
          options.key,
          options.pfx,
          options.passphrase,
          options.servername,
          options.rejectUnauthorized,
        ]);
        let agent = agents.get(key);
        if (agent === undefined) {
          agent = new HttpsAgent({ ...options, keepAlive: true, maxSockets: 4 });
          agents.set(key, agent);
        }
        context.setAgent(agent);
      }
      return Promise.resolve(context);
    },
    post(context) {
      return Promise.resolve(context);
    },
  };
}

function readCiliumEndpoint(item: unknown): CiliumEndpointObject {
  const object = item as {
    metadata?: { name?: string; namespace?: string };
    status?: {
      identity?: { id?: number; labels?: string[] };
      networking?: { addressing?: { ipv4?: string; ipv6?: string }[] };
    };
  };
  const identity = object.status?.identity;
  return {
    namespace: object.metadata?.namespace ?? '',
    name: object.metadata?.name ?? '',
    identity:
      identity?.id === undefined ? undefined : { id: identity.id, labels: identity.labels ?? [] },
    addresses: (object.status?.networking?.addressing ?? []).flatMap((a) =>
      [a.ipv4, a.ipv6].filter((x): x is string => x !== undefined && x !== ''),
    ),
  };
}

function readEgressGatewayPolicy(item: unknown): EgressGatewayPolicyObject {
  const object = item as {
    metadata?: { name?: string; labels?: Record<string, string> };
    spec?: {
      selectors?: { podSelector?: LabelSelector; namespaceSelector?: LabelSelector }[];
      egressGateway?: {
        interface?: unknown;
        egressIP?: unknown;
        nodeSelector?: {
          matchLabels?: Record<string, string>;
          matchExpressions?: { key: string }[];
        };
      };
    };
  };
  const selector = object.spec?.egressGateway?.nodeSelector;
  const gateway = object.spec?.egressGateway ?? {};
  const present = (value: unknown): boolean => typeof value === 'string' && value !== '';
  // ParseCEGP: "cannot specify both egress IP and interface"; a selector needs a pod or a
  // namespace selector (EGW doc: nodeSelector "cannot be used alone").
  const refused =
    present(gateway.interface) && present(gateway.egressIP)
      ? 'both interface and egressIP'
      : (object.spec?.selectors ?? []).some(
            (s) => s.podSelector === undefined && s.namespaceSelector === undefined,
          )
        ? 'a selector without podSelector and namespaceSelector'
        : undefined;
  return {
    name: object.metadata?.name ?? '',
    refused,
    labels: object.metadata?.labels ?? {},
    interface:
      typeof gateway.interface === 'string' && gateway.interface !== ''
        ? gateway.interface
        : undefined,
    selectors: (object.spec?.selectors ?? []).map((s) => ({
      ...(s.podSelector === undefined ? {} : { podSelector: s.podSelector }),
      ...(s.namespaceSelector === undefined ? {} : { namespaceSelector: s.namespaceSelector }),
    })),
    nodeSelector: {
      matchLabels: selector?.matchLabels ?? {},
      matchExpressions: selector?.matchExpressions ?? [],
    },
  };
}

/** The HTTP status of a failed call, or undefined when no answer came (connection, timeout). */
function statusOf(error: unknown, apiException: ClientModule['ApiException']): number | undefined {
  return error instanceof apiException ? error.code : undefined;
}

/** Conflicts (a concurrent writer), throttling and server errors pass; 4xx otherwise do not. */
function isRetryable(status: number | undefined): boolean {
  return status === undefined || status === 409 || status === 429 || status >= 500;
}

function messageOf(error: unknown, apiException: ClientModule['ApiException']): string {
  if (error instanceof apiException) {
    try {
      const body = JSON.parse(String(error.body)) as { message?: string };
      if (typeof body.message === 'string') return `HTTP ${error.code}: ${body.message}`;
    } catch {
      // not a Status object: fall through
    }
    return `HTTP ${error.code}`;
  }
  return (error as Error).message;
}

async function withRetries<T>(
  what: string,
  server: string,
  request: () => Promise<T>,
  apiException: ClientModule['ApiException'],
): Promise<T> {
  let last: unknown;
  for (let attempt = 0; attempt < ATTEMPTS; attempt++) {
    if (attempt > 0) await sleep(BACKOFF_MS[attempt - 1] ?? 400);
    try {
      return await withTimeout(request(), REQUEST_TIMEOUT_MS);
    } catch (error) {
      last = error;
      if (!isRetryable(statusOf(error, apiException))) break;
    }
  }
  const status = statusOf(last, apiException);
  throw new EgressguardError(
    'cluster-api',
    `Cannot ${what} on ${server}: ${messageOf(last, apiException)}`,
    {
      cause: last,
      hint:
        status === 401 || status === 403
          ? 'check the credentials and the RBAC grants (deploy/kubernetes/rbac.yaml)'
          : status === 404
            ? 'check the name, and that Cilium and its CRDs are installed'
            : 'check that the API server is reachable; the resident retries at its next check',
    },
  );
}

function withTimeout<T>(promise: Promise<T>, ms: number): Promise<T> {
  let timer: ReturnType<typeof setTimeout> | undefined;
  const timeout = new Promise<never>((_, reject) => {
    timer = setTimeout(() => {
      reject(new Error(`no answer within ${ms} ms`));
    }, ms);
  });
  return Promise.race([promise, timeout]).finally(() => {
    clearTimeout(timer);
  });
}

function sleep(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms));
}
