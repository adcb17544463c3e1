import { randomUUID } from 'node:crypto';
import {
  type IncomingMessage,
  type Server,
  type ServerResponse,
  createServer as createHttpServer,
} from 'node:http';
import { createServer as createHttpsServer } from 'node:https';
import type { AddressInfo } from 'node:net';
import { stringify } from 'yaml';
import {
  JsonPatchError,
  type JsonValue,
  applyJsonPatch,
  applyMergePatch,
  jsonEqual,
} from '../../src/backends/cilium/json-patch.js';
import { type LabelSelectorRequirement } from '../../src/backends/cilium/cilium-manifests.js';
import { matchesLabelSelector } from '../../src/backends/cilium/label-selector.js';

/*
 * A MODEL of the Kubernetes API server, for the endpoints egressguard's gateway resident uses:
 * Nodes (read, list, patch labels) and the cluster-scoped CiliumEgressGatewayPolicy custom
 * objects (get, list, create, replace, patch, delete). No cluster can run here; this one runs as a
 * real HTTP(S) server on loopback so a real client library talks to it through a kubeconfig.
 *
 * Sources, cited at each behaviour: "api-concepts" is kubernetes.io/docs/reference/using-api/
 * api-concepts/; "controlling-access" is kubernetes.io/docs/concepts/security/controlling-access/;
 * "authorization" is kubernetes.io/docs/reference/access-authn-authz/authorization/; "labels" is
 * kubernetes.io/docs/concepts/overview/working-with-objects/labels/; "api-conventions" is
 * kubernetes/community contributors/devel/sig-architecture/api-conventions.md; "kubectl-patch" is
 * kubernetes.io/docs/tasks/manage-kubernetes-objects/update-api-object-kubectl-patch/.
 *
 * Not modelled (answered with a clear error, never silently): watch, server-side apply, other
 * resources, writes to namespaced objects (doctor's ConfigMap, DaemonSet, Pods and
 * CiliumEndpoints are read-only), Node create/replace/delete, field selectors, pagination. Custom
 * objects are stored as sent: the real server prunes them against the CRD schema, which
 * validateManifests checks before anything is sent.
 */

export type Verb = 'get' | 'list' | 'create' | 'update' | 'patch' | 'delete';

export type ModelResource = 'nodes' | 'ciliumegressgatewaypolicies' | ReadOnlyResource;

/** The resources the model stores and writes. */
type StoredResource = 'nodes' | 'ciliumegressgatewaypolicies';

/**
 * Objects the model only reads out (doctor --k8s): namespaced ConfigMaps and DaemonSets for `get`,
 * cluster-scoped CiliumNodes for `get` and `list`, and Pods and CiliumEndpoints for a `list` over
 * all namespaces (api-concepts, "Resource URIs": /api/v1/pods lists every namespace's).
 */
type ReadOnlyResource = 'configmaps' | 'daemonsets' | 'ciliumnodes' | ListedResource;

/** Namespaced objects served only as a list over all namespaces. */
type ListedResource = 'pods' | 'ciliumendpoints';

/** An RBAC-like grant: verbs on a resource, optionally only on named objects. */
export interface AccessRule {
  readonly verbs: readonly Verb[];
  readonly resource: ModelResource;
  /** RBAC resourceNames: limits get/update/patch/delete to these names (not list/create). */
  readonly resourceNames?: readonly string[];
  /** A Role's namespace: the rule holds in that namespace only (namespaced resources). */
  readonly namespace?: string;
}

export interface ModelUser {
  readonly name: string;
  /** The bearer token that authenticates this user. */
  readonly token: string;
  readonly rules: readonly AccessRule[];
}

export interface ModelNodeSeed {
  readonly name: string;
  readonly labels?: Readonly<Record<string, string>>;
  readonly internalIP?: string;
}

export interface KubeApiModelOptions {
  readonly users: readonly ModelUser[];
  readonly nodes?: readonly ModelNodeSeed[];
  readonly egressGatewayPolicies?: readonly JsonValue[];
  /** ConfigMaps served read-only (get). */
  readonly configMaps?: readonly {
    readonly namespace: string;
    readonly name: string;
    readonly data: Readonly<Record<string, string>>;
  }[];
  /**
   * CiliumNodes served read-only (get, list), as stale or broken agents left them; absent: one
   * per node carrying the Node's current labels, as a running agent keeps them
   * (pkg/nodediscovery mutateNodeResource).
   */
  readonly ciliumNodes?: readonly {
    readonly name: string;
    readonly labels: Readonly<Record<string, string>>;
  }[];
  /** Pods and CiliumEndpoints served read-only (a list over all namespaces), as given. */
  readonly pods?: readonly JsonValue[];
  readonly ciliumEndpoints?: readonly JsonValue[];
  /** DaemonSets served read-only (get), with one container per image. */
  readonly daemonSets?: readonly {
    readonly namespace: string;
    readonly name: string;
    readonly images: readonly string[];
  }[];
  /** Serve HTTPS with this key pair; `ca` is what kubeconfigs trust. Plain HTTP without it. */
  readonly tls?: { readonly key: string; readonly cert: string; readonly ca: string };
}

/** One request as the model saw it, in arrival order. */
export interface RecordedRequest {
  readonly method: string;
  readonly path: string;
  readonly query: Readonly<Record<string, string>>;
  readonly contentType: string | undefined;
  /** The authenticated user, if any. */
  readonly user: string | undefined;
  readonly verb: Verb | undefined;
  readonly status: number;
  readonly body: JsonValue | undefined;
}

export interface KubeApiModel {
  /** Base URL, e.g. https://127.0.0.1:40123. */
  readonly url: string;
  readonly requests: readonly RecordedRequest[];
  /** The TCP connections clients have opened so far. */
  readonly connections: number;
  node(name: string): JsonValue | undefined;
  egressGatewayPolicy(name: string): JsonValue | undefined;
  /** A label change made by someone else (an operator, another controller): bumps resourceVersion. */
  setNodeLabels(name: string, labels: Readonly<Record<string, string>>): void;
  /** The next `count` requests fail with this status (after authentication), e.g. 500 or 503. */
  failNext(count: number, code: number, reason: string): void;
  /** A kubeconfig (YAML) that points a client at this server as the given user. */
  kubeconfig(user: string): string;
  close(): Promise<void>;
}

const CILIUM_GROUP = 'cilium.io';
const CEGP_KIND = 'CiliumEgressGatewayPolicy';
const CEGP_PLURAL = 'ciliumegressgatewaypolicies';

type JsonObject = { [key: string]: JsonValue };

function isObject(value: JsonValue | undefined): value is JsonObject {
  return (
    value !== null && value !== undefined && typeof value === 'object' && !Array.isArray(value)
  );
}

/** An API error answered as a Status object (api-conventions, "Response Status Kind"). */
class ApiError extends Error {
  constructor(
    readonly code: number,
    readonly reason: string,
    message: string,
    readonly details: JsonObject = {},
  ) {
    super(message);
  }
}

function status(error: ApiError): JsonObject {
  return {
    kind: 'Status',
    apiVersion: 'v1',
    metadata: {},
    status: 'Failure',
    message: error.message,
    reason: error.reason,
    details: error.details,
    code: error.code,
  };
}

/** "nodes" or "ciliumegressgatewaypolicies.cilium.io", as the API server names resources in errors. */
function qualified(resource: ModelResource): string {
  switch (resource) {
    case 'nodes':
    case 'configmaps':
    case 'pods':
      return resource;
    case 'daemonsets':
      return 'daemonsets.apps';
    case CEGP_PLURAL:
    case 'ciliumnodes':
    case 'ciliumendpoints':
      return `${resource}.${CILIUM_GROUP}`;
  }
}

function groupOf(resource: ModelResource): string {
  return resource === CEGP_PLURAL || resource === 'ciliumnodes' || resource === 'ciliumendpoints'
    ? CILIUM_GROUP
    : resource === 'daemonsets'
      ? 'apps'
      : '';
}

function details(resource: ModelResource, name: string | undefined): JsonObject {
  return {
    ...(name === undefined ? {} : { name }),
    ...(groupOf(resource) === '' ? {} : { group: groupOf(resource) }),
    kind: resource,
  };
}

const notFound = (resource: ModelResource, name: string) =>
  new ApiError(
    404,
    'NotFound',
    `${qualified(resource)} "${name}" not found`,
    details(resource, name),
  );

// api-concepts, "Updates to existing resources": a PUT with a stale resourceVersion gets 409.
const conflict = (resource: ModelResource, name: string) =>
  new ApiError(
    409,
    'Conflict',
    `Operation cannot be fulfilled on ${qualified(resource)} "${name}": the object has been modified; please apply your changes to the latest version and try again`,
    details(resource, name),
  );

function invalid(resource: ModelResource, name: string, causes: string[]): ApiError {
  const kind = resource === 'nodes' ? 'Node' : `${CEGP_KIND}.${CILIUM_GROUP}`;
  return new ApiError(
    422,
    'Invalid',
    `${kind} "${name}" is invalid: ${causes.join(', ')}`,
    details(resource, name),
  );
}

const LABEL_NAME = /^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$/;
const DNS_SUBDOMAIN = /^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$/;

/** labels, "Syntax and character set": [prefix/]name, name ≤ 63, value ≤ 63 and may be empty. */
function labelProblems(labels: JsonValue | undefined): string[] {
  if (labels === undefined) return [];
  if (!isObject(labels)) return ['metadata.labels: Invalid value: must be a map of strings'];
  const problems: string[] = [];
  for (const [key, value] of Object.entries(labels)) {
    const slash = key.lastIndexOf('/');
    const prefix = slash === -1 ? undefined : key.slice(0, slash);
    const name = slash === -1 ? key : key.slice(slash + 1);
    if (
      (prefix !== undefined && (prefix.length > 253 || !DNS_SUBDOMAIN.test(prefix))) ||
      name.length > 63 ||
      !LABEL_NAME.test(name)
    ) {
      problems.push(
        `metadata.labels: Invalid value: "${key}": name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character`,
      );
    }
    if (
      typeof value !== 'string' ||
      value.length > 63 ||
      (value !== '' && !LABEL_NAME.test(value))
    ) {
      problems.push(
        `metadata.labels: Invalid value: ${JSON.stringify(value)}: a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character`,
      );
    }
  }
  return problems;
}

/** labels, "Label selectors": equality (=, ==, !=) and set-based (in, notin, exists, !exists). */
function parseLabelSelector(text: string): {
  matchLabels: Record<string, string>;
  matchExpressions: LabelSelectorRequirement[];
} {
  const matchLabels: Record<string, string> = {};
  const matchExpressions: LabelSelectorRequirement[] = [];
  // Split on commas outside parentheses.
  const parts: string[] = [];
  let depth = 0;
  let current = '';
  for (const c of text) {
    if (c === '(') depth++;
    if (c === ')') depth--;
    if (c === ',' && depth === 0) {
      parts.push(current);
      current = '';
    } else current += c;
  }
  if (current.trim() !== '') parts.push(current);
  for (const raw of parts) {
    const part = raw.trim();
    let m: RegExpExecArray | null;
    if ((m = /^(\S+?)\s+(in|notin)\s+\(([^)]*)\)$/.exec(part)) !== null) {
      const values = (m[3] as string)
        .split(',')
        .map((v) => v.trim())
        .filter((v) => v !== '');
      matchExpressions.push({
        key: m[1] as string,
        operator: m[2] === 'in' ? 'In' : 'NotIn',
        values,
      });
    } else if ((m = /^(\S+?)\s*!=\s*(\S*)$/.exec(part)) !== null) {
      matchExpressions.push({ key: m[1] as string, operator: 'NotIn', values: [m[2] as string] });
    } else if ((m = /^(\S+?)\s*==?\s*(\S*)$/.exec(part)) !== null) {
      matchLabels[m[1] as string] = m[2] as string;
    } else if ((m = /^!(\S+)$/.exec(part)) !== null) {
      matchExpressions.push({ key: m[1] as string, operator: 'DoesNotExist' });
    } else if (/^\S+$/.test(part)) {
      matchExpressions.push({ key: part, operator: 'Exists' });
    } else {
      throw new ApiError(400, 'BadRequest', `unable to parse requirement: "${part}"`);
    }
  }
  return { matchLabels, matchExpressions };
}

function labelsOf(object: JsonValue): Record<string, string> {
  const meta = isObject(object) ? object['metadata'] : undefined;
  const labels = isObject(meta) ? meta['labels'] : undefined;
  return isObject(labels)
    ? Object.fromEntries(
        Object.entries(labels).filter((e): e is [string, string] => typeof e[1] === 'string'),
      )
    : {};
}

function nameOf(object: JsonValue): string {
  const name = metadataOf(object)['name'];
  return typeof name === 'string' ? name : '';
}

function metadataOf(object: JsonValue): JsonObject {
  if (!isObject(object) || !isObject(object['metadata']))
    throw new Error('Stored object without metadata');
  return object['metadata'];
}

interface Route {
  readonly resource: ModelResource;
  readonly name: string | undefined;
  readonly namespace?: string;
}

/** Maps a path to a resource; undefined for anything the model does not serve. */
function route(path: string): Route | undefined {
  const node = /^\/api\/v1\/nodes(?:\/([^/]+))?\/?$/.exec(path);
  if (node !== null) return { resource: 'nodes', name: node[1] };
  const cegp = new RegExp(`^/apis/${CILIUM_GROUP}/v2/${CEGP_PLURAL}(?:/([^/]+))?/?$`).exec(path);
  if (cegp !== null) return { resource: CEGP_PLURAL, name: cegp[1] };
  const ciliumNode = new RegExp(`^/apis/${CILIUM_GROUP}/v2/ciliumnodes(?:/([^/]+))?/?$`).exec(path);
  if (ciliumNode !== null) return { resource: 'ciliumnodes', name: ciliumNode[1] };
  if (/^\/api\/v1\/pods\/?$/.test(path)) return { resource: 'pods', name: undefined };
  if (new RegExp(`^/apis/${CILIUM_GROUP}/v2/ciliumendpoints/?$`).test(path)) {
    return { resource: 'ciliumendpoints', name: undefined };
  }
  // api-concepts, "Resource URIs": /api/v1/namespaces/{ns}/{resource}/{name} for core, and
  // /apis/{group}/{version}/namespaces/{ns}/{resource}/{name} for groups.
  const namespaced =
    /^\/(?:api\/v1|apis\/apps\/v1)\/namespaces\/([^/]+)\/(configmaps|daemonsets)(?:\/([^/]+))?\/?$/.exec(
      path,
    );
  if (namespaced !== null) {
    const resource = namespaced[2] as ReadOnlyResource;
    const core = path.startsWith('/api/v1/');
    if (core !== (resource === 'configmaps')) return undefined;
    return { resource, name: namespaced[3], namespace: namespaced[1] as string };
  }
  return undefined;
}

// authorization, "Determine the Request Verb".
function verbOf(method: string, named: boolean): Verb | undefined {
  switch (method) {
    case 'GET':
      return named ? 'get' : 'list';
    case 'POST':
      return named ? undefined : 'create';
    case 'PUT':
      return named ? 'update' : undefined;
    case 'PATCH':
      return named ? 'patch' : undefined;
    case 'DELETE':
      return named ? 'delete' : undefined;
    default:
      return undefined;
  }
}

function isAllowed(user: ModelUser, verb: Verb, target: Route): boolean {
  const { resource, name } = target;
  return user.rules.some(
    (rule) =>
      rule.resource === resource &&
      // A Role's rules hold in its namespace only (RBAC, "Role and ClusterRole").
      (rule.namespace === undefined || rule.namespace === target.namespace) &&
      rule.verbs.includes(verb) &&
      // authorization/RBAC: resourceNames cannot restrict list or create.
      (rule.resourceNames === undefined ||
        (name !== undefined && rule.resourceNames.includes(name))),
  );
}

async function readBody(request: IncomingMessage): Promise<string> {
  const chunks: Buffer[] = [];
  for await (const chunk of request) chunks.push(chunk as Buffer);
  return Buffer.concat(chunks).toString('utf8');
}

/** Starts the model on 127.0.0.1 on a free port. */
export async function startKubeApiModel(options: KubeApiModelOptions): Promise<KubeApiModel> {
  let revision = 1;
  const nextVersion = () => String(++revision);
  const stores: Record<StoredResource, Map<string, JsonValue>> = {
    nodes: new Map(),
    ciliumegressgatewaypolicies: new Map(),
  };
  // Read-only namespaced objects, by "resource namespace/name".
  const readOnly = new Map<string, JsonValue>();
  for (const map of options.configMaps ?? []) {
    readOnly.set(`configmaps ${map.namespace}/${map.name}`, {
      apiVersion: 'v1',
      kind: 'ConfigMap',
      metadata: { name: map.name, namespace: map.namespace, resourceVersion: String(++revision) },
      data: { ...map.data },
    });
  }
  for (const set of options.daemonSets ?? []) {
    readOnly.set(`daemonsets ${set.namespace}/${set.name}`, {
      apiVersion: 'apps/v1',
      kind: 'DaemonSet',
      metadata: { name: set.name, namespace: set.namespace, resourceVersion: String(++revision) },
      spec: {
        selector: { matchLabels: { 'k8s-app': set.name } },
        template: {
          metadata: { labels: { 'k8s-app': set.name } },
          spec: { containers: set.images.map((image, i) => ({ name: `c${i}`, image })) },
        },
      },
    });
  }
  const setCiliumNode = (name: string, labels: Readonly<Record<string, string>>): void => {
    readOnly.set(`ciliumnodes /${name}`, {
      apiVersion: `${CILIUM_GROUP}/v2`,
      kind: 'CiliumNode',
      metadata: { name, labels: { ...labels }, resourceVersion: String(++revision) },
      spec: {},
    });
  };
  for (const node of options.ciliumNodes ?? []) setCiliumNode(node.name, node.labels);
  // Without seeded CiliumNodes, each node's agent runs: its CiliumNode carries the Node's labels
  // as they are when read (local_node_sync.go; pkg/nodediscovery mutateNodeResource).
  const syncCiliumNodes = (): void => {
    if (options.ciliumNodes !== undefined) return;
    for (const [name, node] of stores.nodes) {
      const current = readOnly.get(`ciliumnodes /${name}`);
      if (current === undefined || !jsonEqual(labelsOf(current), labelsOf(node))) {
        setCiliumNode(name, labelsOf(node));
      }
    }
  };
  const listed: Record<ListedResource, readonly JsonValue[] | undefined> = {
    pods: options.pods,
    ciliumendpoints: options.ciliumEndpoints,
  };
  for (const [resource, objects] of Object.entries(listed)) {
    for (const object of objects ?? []) {
      const namespace = metadataOf(object)['namespace'];
      if (typeof namespace !== 'string') throw new Error(`Seed ${resource} need a namespace`);
      readOnly.set(`${resource} ${namespace}/${nameOf(object)}`, object);
    }
  }
  const serveReadOnly = (
    verb: Verb,
    target: Route,
    url: URL,
  ): { code: number; body: JsonValue } => {
    const { resource } = target;
    if (resource === 'ciliumnodes') syncCiliumNodes();
    if (
      verb === 'list' &&
      (resource === 'ciliumnodes' || resource === 'pods' || resource === 'ciliumendpoints')
    ) {
      const selectorText = url.searchParams.get('labelSelector');
      const selector = selectorText === null ? {} : parseLabelSelector(selectorText);
      const kinds = { ciliumnodes: 'CiliumNode', pods: 'Pod', ciliumendpoints: 'CiliumEndpoint' };
      return {
        code: 200,
        body: {
          apiVersion: resource === 'pods' ? 'v1' : `${CILIUM_GROUP}/v2`,
          kind: `${kinds[resource]}List`,
          metadata: { resourceVersion: String(revision) },
          items: [...readOnly.entries()]
            .filter(([key]) => key.startsWith(`${resource} `))
            .map(([, object]) => object)
            .filter((object) => matchesLabelSelector(selector, labelsOf(object))),
        },
      };
    }
    if (verb !== 'get' || target.name === undefined) {
      throw new ApiError(
        405,
        'MethodNotAllowed',
        `the API model serves ${qualified(target.resource)} for get only`,
      );
    }
    const object = readOnly.get(`${target.resource} ${target.namespace ?? ''}/${target.name}`);
    if (object === undefined) throw notFound(target.resource, target.name);
    return { code: 200, body: object };
  };
  const requests: RecordedRequest[] = [];
  let failures: { count: number; code: number; reason: string } | undefined;

  const stamp = (object: JsonObject, name: string): JsonObject => ({
    ...object,
    metadata: {
      ...(isObject(object['metadata']) ? object['metadata'] : {}),
      name,
      uid: randomUUID(),
      resourceVersion: nextVersion(),
      creationTimestamp: new Date().toISOString().replace(/\.\d{3}Z$/, 'Z'),
      ...(object['kind'] === CEGP_KIND ? { generation: 1 } : {}),
    },
  });

  for (const seed of options.nodes ?? []) {
    const node: JsonObject = {
      apiVersion: 'v1',
      kind: 'Node',
      metadata: {
        name: seed.name,
        labels: { 'kubernetes.io/hostname': seed.name, ...seed.labels },
      },
      spec: {},
      status: {
        addresses: [
          ...(seed.internalIP === undefined
            ? []
            : [{ type: 'InternalIP', address: seed.internalIP }]),
          { type: 'Hostname', address: seed.name },
        ],
      },
    };
    stores.nodes.set(seed.name, stamp(node, seed.name));
  }
  for (const policy of options.egressGatewayPolicies ?? []) {
    if (!isObject(policy)) throw new Error('Seed egress gateway policies must be objects');
    const name = nameOf(policy);
    stores.ciliumegressgatewaypolicies.set(name, stamp(policy, name));
  }

  /** Stores an updated object, bumping resourceVersion (and generation on a spec change) unless nothing changed. */
  const store = (
    resource: StoredResource,
    name: string,
    before: JsonValue,
    after: JsonObject,
    dryRun: boolean,
  ): JsonValue => {
    const beforeMeta = metadataOf(before);
    const afterMeta: JsonObject = isObject(after['metadata']) ? { ...after['metadata'] } : {};
    // Server-owned fields are kept from the stored object, not taken from the client.
    for (const key of ['uid', 'creationTimestamp', 'generation', 'resourceVersion']) {
      const value = beforeMeta[key];
      if (value === undefined) Reflect.deleteProperty(afterMeta, key);
      else afterMeta[key] = value;
    }
    const candidate: JsonObject = { ...after, metadata: afterMeta };
    // An update that changes nothing is not written, so resourceVersion stays (the storage
    // layer skips unchanged objects in GuaranteedUpdate).
    if (jsonEqual(candidate, before)) return before;
    if (
      resource === CEGP_PLURAL &&
      isObject(before) &&
      !jsonEqual(candidate['spec'] ?? null, before['spec'] ?? null)
    ) {
      afterMeta['generation'] = Number(beforeMeta['generation'] ?? 1) + 1;
    }
    afterMeta['resourceVersion'] = dryRun ? (beforeMeta['resourceVersion'] ?? null) : nextVersion();
    if (!dryRun) stores[resource].set(name, candidate);
    return candidate;
  };

  const handle = async (
    request: IncomingMessage,
    contentType: string | undefined,
  ): Promise<{
    code: number;
    body: JsonValue;
    user?: string;
    verb?: Verb;
    received?: JsonValue;
  }> => {
    const url = new URL(request.url ?? '/', 'http://model');
    const method = request.method ?? 'GET';
    const text = await readBody(request);
    const context: { user?: string; verb?: Verb; received?: JsonValue } = {};
    let malformed = false;
    if (text !== '') {
      try {
        context.received = JSON.parse(text) as JsonValue;
      } catch {
        malformed = true;
      }
    }
    const received = context.received;
    try {
      // controlling-access, "Authentication": "If the request cannot be authenticated, it is
      // rejected with HTTP status code 401".
      const header = request.headers.authorization ?? '';
      const token = /^Bearer (\S+)$/.exec(header)?.[1];
      const user = options.users.find((u) => u.token === token);
      if (user === undefined) throw new ApiError(401, 'Unauthorized', 'Unauthorized');
      context.user = user.name;
      const target = route(url.pathname);
      if (target === undefined) {
        throw new ApiError(404, 'NotFound', 'the server could not find the requested resource');
      }
      if (url.searchParams.has('watch')) {
        throw new ApiError(405, 'MethodNotAllowed', 'the API model does not implement watch');
      }
      const verb = verbOf(method, target.name !== undefined);
      if (verb === undefined) {
        throw new ApiError(
          405,
          'MethodNotAllowed',
          `the server does not allow this method on the requested resource`,
        );
      }
      context.verb = verb;
      // authorization: a request no authorizer allows is denied with 403; RBAC's message names
      // the user, verb, resource and group. Checked before the object is looked up.
      if (!isAllowed(user, verb, target)) {
        const group = groupOf(target.resource);
        const subject =
          target.name === undefined
            ? qualified(target.resource)
            : `${qualified(target.resource)} "${target.name}"`;
        throw new ApiError(
          403,
          'Forbidden',
          `${subject} is forbidden: User "${user.name}" cannot ${verb} resource "${target.resource}" in API group "${group}" ${target.namespace === undefined ? 'at the cluster scope' : `in the namespace "${target.namespace}"`}`,
          details(target.resource, target.name),
        );
      }
      // The body is decoded after authentication and authorization, as the API server does.
      if (malformed) {
        throw new ApiError(
          400,
          'BadRequest',
          'the request body is not valid JSON (the API model takes JSON only)',
        );
      }
      if (failures !== undefined && failures.count > 0) {
        failures.count--;
        throw new ApiError(failures.code, failures.reason, `injected failure (${failures.reason})`);
      }
      if (target.resource !== 'nodes' && target.resource !== CEGP_PLURAL) {
        return { ...context, ...serveReadOnly(verb, target, url) };
      }
      const dryRun = url.searchParams.get('dryRun') === 'All';
      return { ...context, ...serve({ verb, target, url, received, dryRun, contentType }) };
    } catch (error) {
      if (error instanceof ApiError) return { ...context, code: error.code, body: status(error) };
      throw error;
    }
  };

  const serve = (request: {
    verb: Verb;
    target: Route;
    url: URL;
    received: JsonValue | undefined;
    dryRun: boolean;
    contentType: string | undefined;
  }): { code: number; body: JsonValue } => {
    const { verb, target, url, received, dryRun, contentType } = request;
    const resource = target.resource as StoredResource;
    const items = stores[resource];
    if (verb === 'list') {
      const selectorText = url.searchParams.get('labelSelector');
      const selector = selectorText === null ? {} : parseLabelSelector(selectorText);
      const listed = [...items.values()]
        .filter((object) => matchesLabelSelector(selector, labelsOf(object)))
        .sort((a, b) => nameOf(a).localeCompare(nameOf(b)));
      return {
        code: 200,
        body: {
          apiVersion: resource === 'nodes' ? 'v1' : `${CILIUM_GROUP}/v2`,
          kind: resource === 'nodes' ? 'NodeList' : `${CEGP_KIND}List`,
          metadata: { resourceVersion: String(revision) },
          items: listed,
        },
      };
    }
    if (verb === 'create') {
      if (resource === 'nodes') {
        throw new ApiError(
          405,
          'MethodNotAllowed',
          'the API model does not implement creating nodes',
        );
      }
      if (!isObject(received))
        throw new ApiError(400, 'BadRequest', 'the request body must be an object');
      const name = isObject(received['metadata']) ? received['metadata']['name'] : undefined;
      if (typeof name !== 'string' || name === '') {
        throw invalid(resource, '', [
          'metadata.name: Required value: name or generateName is required',
        ]);
      }
      if (items.has(name)) {
        throw new ApiError(
          409,
          'AlreadyExists',
          `${qualified(resource)} "${name}" already exists`,
          details(resource, name),
        );
      }
      const created = stamp(received, name);
      if (!dryRun) items.set(name, created);
      return { code: 201, body: created };
    }
    const name = target.name as string;
    const current = items.get(name);
    if (current === undefined) throw notFound(resource, name);
    switch (verb) {
      case 'get':
        return { code: 200, body: current };
      case 'delete':
        if (!dryRun) items.delete(name);
        return {
          code: 200,
          body: {
            kind: 'Status',
            apiVersion: 'v1',
            metadata: {},
            status: 'Success',
            details: { ...details(resource, name), uid: metadataOf(current)['uid'] ?? null },
          },
        };
      case 'update': {
        if (resource === 'nodes') {
          throw new ApiError(
            405,
            'MethodNotAllowed',
            'the API model does not implement replacing nodes; patch them',
          );
        }
        if (!isObject(received) || !isObject(received['metadata'])) {
          throw new ApiError(400, 'BadRequest', 'the request body must be an object with metadata');
        }
        if (received['metadata']['name'] !== name) {
          throw new ApiError(
            400,
            'BadRequest',
            `the name of the object (${nameOf(received)}) does not match the name on the URL (${name})`,
          );
        }
        const version = received['metadata']['resourceVersion'];
        // Custom resources allow no unconditional update (apiextensions-apiserver,
        // customresource strategy AllowUnconditionalUpdate is false).
        if (version === undefined || version === '') {
          throw invalid(resource, name, [
            'metadata.resourceVersion: Invalid value: 0x0: must be specified for an update',
          ]);
        }
        if (version !== metadataOf(current)['resourceVersion']) throw conflict(resource, name);
        return { code: 200, body: store(resource, name, current, received, dryRun) };
      }
      case 'patch': {
        const patched = applyPatch(resource, name, current, received, contentType);
        const wanted =
          isObject(patched) && isObject(patched['metadata'])
            ? patched['metadata']['resourceVersion']
            : undefined;
        // api-concepts: a patch may be made conditional on resourceVersion; a stale one gets 409.
        if (
          wanted !== undefined &&
          wanted !== null &&
          wanted !== metadataOf(current)['resourceVersion']
        ) {
          throw conflict(resource, name);
        }
        if (!isObject(patched) || metadataOf(patched)['name'] !== name) {
          throw invalid(resource, name, ['metadata.name: Invalid value: field is immutable']);
        }
        const problems = resource === 'nodes' ? labelProblems(metadataOf(patched)['labels']) : [];
        if (problems.length > 0) throw invalid(resource, name, problems);
        return { code: 200, body: store(resource, name, current, patched, dryRun) };
      }
    }
  };

  const server: Server =
    options.tls === undefined
      ? createHttpServer()
      : createHttpsServer({ key: options.tls.key, cert: options.tls.cert });
  server.on('request', (request: IncomingMessage, response: ServerResponse) => {
    const url = new URL(request.url ?? '/', 'http://model');
    const contentType = request.headers['content-type']?.split(';')[0]?.trim();
    void (async () => {
      let result: Awaited<ReturnType<typeof handle>>;
      try {
        result = await handle(request, contentType);
      } catch (error) {
        result = {
          code: 500,
          body: status(
            new ApiError(
              500,
              'InternalError',
              `the API model failed: ${error instanceof Error ? error.message : String(error)}`,
            ),
          ),
        };
      }
      requests.push({
        method: request.method ?? 'GET',
        path: url.pathname,
        query: Object.fromEntries(url.searchParams),
        contentType,
        user: result.user,
        verb: result.verb,
        status: result.code,
        body: result.received,
      });
      const payload = JSON.stringify(result.body);
      response.writeHead(result.code, {
        'content-type': 'application/json',
        'content-length': Buffer.byteLength(payload),
      });
      response.end(payload);
    })();
  });

  // Connections clients opened (TCP, TLS included): a client that keeps them alive opens few.
  let connections = 0;
  server.on('connection', () => {
    connections++;
  });

  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(0, '127.0.0.1', () => {
      resolve();
    });
  });
  const { port } = server.address() as AddressInfo;
  const base = `${options.tls === undefined ? 'http' : 'https'}://127.0.0.1:${port}`;

  return {
    url: base,
    requests,
    get connections() {
      return connections;
    },
    node: (name) => stores.nodes.get(name),
    egressGatewayPolicy: (name) => stores.ciliumegressgatewaypolicies.get(name),
    setNodeLabels(name, labels) {
      const current = stores.nodes.get(name);
      if (current === undefined || !isObject(current))
        throw new Error(`No node "${name}" in the API model`);
      store(
        'nodes',
        name,
        current,
        { ...current, metadata: { ...metadataOf(current), labels: { ...labels } } },
        false,
      );
    },
    failNext(count, code, reason) {
      failures = { count, code, reason };
    },
    kubeconfig(userName) {
      const user = options.users.find((u) => u.name === userName);
      if (user === undefined) throw new Error(`No user "${userName}" in the API model`);
      const cluster: JsonObject = { server: base };
      if (options.tls !== undefined) {
        cluster['certificate-authority-data'] = Buffer.from(options.tls.ca).toString('base64');
      }
      return stringify({
        apiVersion: 'v1',
        kind: 'Config',
        clusters: [{ name: 'api-model', cluster }],
        users: [{ name: userName, user: { token: user.token } }],
        contexts: [{ name: 'api-model', context: { cluster: 'api-model', user: userName } }],
        'current-context': 'api-model',
      });
    },
    close: () =>
      new Promise<void>((resolve, reject) => {
        server.closeAllConnections();
        server.close((error) => {
          if (error === undefined) resolve();
          else reject(error);
        });
      }),
  };
}

/** The model implements strategic merge patch for maps only (labels, annotations): no lists, no directives. */
function assertMapOnlyStrategicPatch(patch: JsonValue, path: string): void {
  if (Array.isArray(patch)) {
    throw new ApiError(
      422,
      'Invalid',
      `the API model implements strategic merge patch for maps only, not the list at "${path || '/'}"`,
    );
  }
  if (!isObject(patch)) return;
  for (const [key, value] of Object.entries(patch)) {
    if (key.startsWith('$')) {
      throw new ApiError(
        422,
        'Invalid',
        `the API model does not implement the strategic merge directive "${key}"`,
      );
    }
    assertMapOnlyStrategicPatch(value, `${path}/${key}`);
  }
}

/** Applies a PATCH body by its content type (api-concepts, "Patch"; the model's subset). */
function applyPatch(
  resource: ModelResource,
  name: string,
  current: JsonValue,
  patch: JsonValue | undefined,
  type: string | undefined,
): JsonValue {
  if (patch === undefined) throw new ApiError(400, 'BadRequest', 'a patch needs a body');
  try {
    switch (type) {
      case 'application/json-patch+json':
        return applyJsonPatch(current, patch);
      case 'application/merge-patch+json':
        return applyMergePatch(current, patch);
      case 'application/strategic-merge-patch+json':
        // kubectl-patch: "Strategic merge patch is not supported for custom resources"; the
        // server answers 415 with the media types it does take.
        if (resource !== 'nodes') break;
        assertMapOnlyStrategicPatch(patch, '');
        return applyMergePatch(current, patch);
      default:
        break;
    }
  } catch (error) {
    if (error instanceof JsonPatchError) {
      throw new ApiError(
        error.status,
        error.status === 400 ? 'BadRequest' : 'Invalid',
        error.message,
        details(resource, name),
      );
    }
    throw error;
  }
  const accepted =
    resource === 'nodes'
      ? 'application/json-patch+json, application/merge-patch+json, application/strategic-merge-patch+json'
      : 'application/json-patch+json, application/merge-patch+json';
  throw new ApiError(
    415,
    'UnsupportedMediaType',
    `the body of the request was in an unknown format - accepted media types include: ${accepted} (the API model does not implement server-side apply)`,
  );
}
