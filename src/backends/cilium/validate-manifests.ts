import { AddressSet, parsePrefix } from '../../core/index.js';
import { CILIUM_API_VERSION } from './cilium-manifests.js';
import { getSchemaValidator, isCiliumKind } from './cilium-schemas.js';
import {
  type CiliumVersion,
  DEFAULT_CILIUM_VERSION,
  SUPPORTED_CILIUM_VERSIONS,
  isSupportedCiliumVersion,
  parseCiliumVersion,
  supportsIpv6EgressGateway,
} from './cilium-version.js';
import { describeAjvError } from './kubernetes-ajv.js';

/** Every problem validateManifests reports, by stable code. */
export type ManifestProblemCode =
  /** The Cilium release asked for is not one the pinned schemas cover. */
  | 'unsupported-cilium-version'
  /** Not an object, or a kind/apiVersion that is none of the pinned CRDs. */
  | 'unknown-kind'
  /** Fails the pinned CRD JSON Schema. */
  | 'schema'
  /** A namespaced policy without metadata.namespace. */
  | 'missing-namespace'
  /** Two objects of one kind with one name (and namespace). */
  | 'duplicate-name'
  /** egressGateway sets both interface and egressIP: Cilium ignores the whole policy. */
  | 'interface-and-egress-ip'
  /** An excludedCIDRs entry outside destinationCIDRs: it has no effect. */
  | 'excluded-outside-destinations'
  /** egressIP of one family with destinations of the other (or of both). */
  | 'egress-ip-family'
  /** IPv6 egress gateway on a release without it. */
  | 'ipv6-egress-gateway-unsupported'
  /** No selectors at all: the policy steers nothing. */
  | 'no-selectors'
  /** A selector without podSelector and namespaceSelector: Cilium rejects the policy. */
  | 'empty-selector'
  /** A selector whose pod and namespace selectors are both empty: every pod in the cluster. */
  | 'selects-all-pods'
  /** An empty gateway nodeSelector: every node qualifies, so no node label can fail closed. */
  | 'empty-node-selector'
  /** A toCIDRSet `except` outside its `cidr`. */
  | 'except-outside-cidr';

/** A problem in a generated manifest, as data: which object, where in it, and what is wrong. */
export interface ManifestProblem {
  readonly code: ManifestProblemCode;
  /** Index of the object in the input. */
  readonly index: number;
  /** "Kind/name" or "Kind/namespace/name", as far as the object says. */
  readonly object: string;
  /** Dotted path in the object, e.g. spec.egressGateway.interface ('' for the whole object). */
  readonly path: string;
  readonly message: string;
}

export interface ValidateManifestsOptions {
  /** The target Cilium release ("1.18", "1.18.2"); default DEFAULT_CILIUM_VERSION. */
  readonly ciliumVersion?: string;
}

type Obj = Readonly<Record<string, unknown>>;

function isObject(value: unknown): value is Obj {
  return value !== null && typeof value === 'object' && !Array.isArray(value);
}

function describeObject(value: unknown, index: number): string {
  if (!isObject(value)) return `object #${index + 1}`;
  const kind = typeof value['kind'] === 'string' ? value['kind'] : '?';
  const meta = isObject(value['metadata']) ? value['metadata'] : {};
  const name = typeof meta['name'] === 'string' ? meta['name'] : '?';
  return typeof meta['namespace'] === 'string'
    ? `${kind}/${meta['namespace']}/${name}`
    : `${kind}/${name}`;
}

function strings(value: unknown): string[] {
  return Array.isArray(value) ? value.filter((v): v is string => typeof v === 'string') : [];
}

function isEmptySelector(value: unknown): boolean {
  if (!isObject(value)) return true;
  const labels = isObject(value['matchLabels']) ? Object.keys(value['matchLabels']) : [];
  const expressions = Array.isArray(value['matchExpressions']) ? value['matchExpressions'] : [];
  return labels.length === 0 && expressions.length === 0;
}

/**
 * Validates generated Cilium manifests against the pinned CRD schemas (schema/cilium/) and the
 * rules no schema expresses. Returns every problem found; an empty list means valid.
 */
export function validateManifests(
  objects: readonly unknown[],
  options: ValidateManifestsOptions = {},
): ManifestProblem[] {
  const versionText = options.ciliumVersion ?? DEFAULT_CILIUM_VERSION;
  const version = parseCiliumVersion(versionText);
  if (version === undefined || !isSupportedCiliumVersion(version)) {
    return [
      {
        code: 'unsupported-cilium-version',
        index: -1,
        object: '',
        path: '',
        message: `Cannot validate for Cilium "${versionText}": the pinned schemas cover ${SUPPORTED_CILIUM_VERSIONS.join(' and ')}; pass one of those`,
      },
    ];
  }
  const problems: ManifestProblem[] = [];
  const seen = new Map<string, number>();
  objects.forEach((value, index) => {
    const object = describeObject(value, index);
    const report = (code: ManifestProblemCode, path: string, message: string): void => {
      problems.push({ code, index, object, path, message });
    };
    if (
      !isObject(value) ||
      !isCiliumKind(value['kind']) ||
      value['apiVersion'] !== CILIUM_API_VERSION
    ) {
      const kind = isObject(value) ? JSON.stringify(value['kind'] ?? null) : 'none';
      const apiVersion = isObject(value) ? JSON.stringify(value['apiVersion'] ?? null) : 'none';
      report(
        'unknown-kind',
        '',
        `Cannot validate ${object}: kind ${kind} with apiVersion ${apiVersion} is not a pinned Cilium CRD; expected apiVersion "${CILIUM_API_VERSION}" and kind CiliumEgressGatewayPolicy, CiliumNetworkPolicy or CiliumClusterwideNetworkPolicy`,
      );
      return;
    }
    const kind = value['kind'];
    const validate = getSchemaValidator(kind, version);
    if (!validate(value)) {
      for (const error of validate.errors ?? []) {
        // A oneOf/anyOf failure repeats what its branches said; keep the branches' words.
        if (error.keyword === 'oneOf' || error.keyword === 'anyOf') continue;
        const { path, message } = describeAjvError(error);
        report('schema', path, `${message} (${kind} schema, Cilium ${versionText})`);
      }
    }
    const meta = isObject(value['metadata']) ? value['metadata'] : {};
    if (kind === 'CiliumNetworkPolicy' && typeof meta['namespace'] !== 'string') {
      report(
        'missing-namespace',
        'metadata.namespace',
        `CiliumNetworkPolicy "${String(meta['name'])}" has no namespace: it would land in whatever namespace kubectl defaults to; set metadata.namespace`,
      );
    }
    const key = `${kind}/${typeof meta['namespace'] === 'string' ? meta['namespace'] : ''}/${String(meta['name'])}`;
    const first = seen.get(key);
    if (first !== undefined) {
      report(
        'duplicate-name',
        'metadata.name',
        `${object} appears twice (objects #${first + 1} and #${index + 1}): the second would replace the first`,
      );
    } else {
      seen.set(key, index);
    }
    const spec = isObject(value['spec']) ? value['spec'] : undefined;
    if (kind === 'CiliumEgressGatewayPolicy') {
      if (spec !== undefined) checkEgressGateway(spec, version, versionText, report);
    } else {
      const rules = [
        ...(spec === undefined ? [] : [{ rule: spec, path: 'spec' }]),
        ...(Array.isArray(value['specs']) ? value['specs'] : []).map((rule, i) => ({
          rule: rule as unknown,
          path: `specs[${i}]`,
        })),
      ];
      for (const { rule, path } of rules)
        if (isObject(rule)) checkCidrExceptions(rule, path, report);
    }
  });
  return problems;
}

type Report = (code: ManifestProblemCode, path: string, message: string) => void;

function checkEgressGateway(
  spec: Obj,
  version: CiliumVersion,
  versionText: string,
  report: Report,
): void {
  const gateway = isObject(spec['egressGateway']) ? spec['egressGateway'] : {};
  const iface = gateway['interface'];
  const egressIP = gateway['egressIP'];
  if (
    typeof iface === 'string' &&
    iface !== '' &&
    typeof egressIP === 'string' &&
    egressIP !== ''
  ) {
    // EGW doc, warning: "Policies that contain both of these properties will be ignored by Cilium"
    // and then traffic leaves normally: fail open.
    report(
      'interface-and-egress-ip',
      'spec.egressGateway',
      `egressGateway sets both interface "${iface}" and egressIP "${egressIP}": Cilium ignores such a policy and the traffic leaves unsteered; set only one of them`,
    );
  }
  if (gateway['nodeSelector'] !== undefined && isEmptySelector(gateway['nodeSelector'])) {
    report(
      'empty-node-selector',
      'spec.egressGateway.nodeSelector',
      'egressGateway.nodeSelector is empty: every node qualifies and the first by name becomes the gateway, so no node label can fail closed; select the gateway label',
    );
  }

  const destinations = strings(spec['destinationCIDRs']);
  const excluded = strings(spec['excludedCIDRs']);
  const parsed = (list: string[]) =>
    list.flatMap((text, i) => {
      const prefix = parsePrefix(text);
      return prefix === undefined || !text.includes('/') ? [] : [{ text, i, prefix }];
    });
  const destinationPrefixes = parsed(destinations);
  const destinationSet = AddressSet.fromPrefixes(destinationPrefixes.map((d) => d.prefix));
  // Without destinationCIDRs the schema has already said so; every exclusion would repeat it.
  const excludedToCheck = Array.isArray(spec['destinationCIDRs']) ? parsed(excluded) : [];
  for (const { text, i, prefix } of excludedToCheck) {
    if (!destinationSet.covers(AddressSet.fromPrefixes([prefix]))) {
      // Schema text: "Should be a subset of destinationCIDRs otherwise it will not have any effect".
      report(
        'excluded-outside-destinations',
        `spec.excludedCIDRs[${i}]`,
        `excludedCIDRs entry "${text}" is not inside destinationCIDRs (${destinations.join(', ') || 'none'}): Cilium ignores it; exclude only parts of the destinations`,
      );
    }
  }

  if (!supportsIpv6EgressGateway(version)) {
    for (const [field, list] of [
      ['destinationCIDRs', parsed(destinations)],
      ['excludedCIDRs', parsed(excluded)],
    ] as const) {
      for (const { text, i, prefix } of list) {
        if (prefix.family === 6) {
          report(
            'ipv6-egress-gateway-unsupported',
            `spec.${field}[${i}]`,
            `${field} entry "${text}" is IPv6, but Cilium ${versionText} has no IPv6 egress gateway (from 1.18): target Cilium 1.18 or block IPv6 for this class by other means`,
          );
        }
      }
    }
  }

  if (typeof egressIP === 'string' && egressIP !== '') {
    const address = parsePrefix(egressIP);
    if (address !== undefined) {
      const other = destinationPrefixes.find((d) => d.prefix.family !== address.family);
      if (other !== undefined) {
        // cilium/cilium PR #44524 rejects an egressIP whose family differs from the destinations
        // (dual-stack included); #48660: dual-stack destinations with an IPv4 egressIP black-hole.
        report(
          'egress-ip-family',
          'spec.egressGateway.egressIP',
          `egressIP "${egressIP}" is IPv${address.family} but destinationCIDRs has IPv${other.prefix.family} "${other.text}": one family per egressIP; use interface for dual-stack, or one policy per family`,
        );
      }
    }
  }

  const selectors = Array.isArray(spec['selectors']) ? spec['selectors'] : undefined;
  if (selectors?.length === 0) {
    report(
      'no-selectors',
      'spec.selectors',
      'selectors is empty: the policy steers no pod; select the class by namespace and pod labels',
    );
  }
  (selectors ?? []).forEach((selector: unknown, i) => {
    if (!isObject(selector)) return;
    const pod = selector['podSelector'];
    const namespace = selector['namespaceSelector'];
    if (pod === undefined && namespace === undefined) {
      // pkg/egressgateway/policy.go ParseCEGP: "cannot have both nil namespace selector and nil
      // pod selector"; the EGW doc: nodeSelector "cannot be used alone".
      report(
        'empty-selector',
        `spec.selectors[${i}]`,
        `selectors[${i}] has neither podSelector nor namespaceSelector: Cilium rejects the whole policy; select the class's pods`,
      );
    } else if (
      (pod === undefined || isEmptySelector(pod)) &&
      (namespace === undefined || isEmptySelector(namespace))
    ) {
      report(
        'selects-all-pods',
        `spec.selectors[${i}]`,
        `selectors[${i}] has only empty selectors: it steers every pod in the cluster through the gateway; select the class by namespace and pod labels`,
      );
    }
  });
}

function checkCidrExceptions(rule: Obj, path: string, report: Report): void {
  for (const section of ['egress', 'egressDeny'] as const) {
    const peers = Array.isArray(rule[section]) ? rule[section] : [];
    peers.forEach((peer: unknown, p) => {
      if (!isObject(peer) || !Array.isArray(peer['toCIDRSet'])) return;
      peer['toCIDRSet'].forEach((entry: unknown, c) => {
        if (!isObject(entry) || typeof entry['cidr'] !== 'string') return;
        const cidr = parsePrefix(entry['cidr']);
        if (cidr === undefined) return;
        const outer = AddressSet.fromPrefixes([cidr]);
        strings(entry['except']).forEach((text, e) => {
          const inner = parsePrefix(text);
          if (inner === undefined || outer.covers(AddressSet.fromPrefixes([inner]))) return;
          // CRD text: "These CIDR prefixes should be contained within Cidr".
          report(
            'except-outside-cidr',
            `${path}.${section}[${p}].toCIDRSet[${c}].except[${e}]`,
            `toCIDRSet except "${text}" is not inside its cidr "${entry['cidr'] as string}": it excludes nothing; except only parts of the cidr`,
          );
        });
      });
    });
  }
}
