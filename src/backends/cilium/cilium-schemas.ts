import { readFileSync } from 'node:fs';
import type { ValidateFunction } from 'ajv';
import { packagePath } from '../../core/index.js';
import {
  type CiliumVersion,
  formatCiliumVersion,
  supportsIpv6EgressGateway,
} from './cilium-version.js';
import { createKubernetesAjv } from './kubernetes-ajv.js';

/** The CRD kinds whose pinned schema ships in schema/cilium/. */
export type CiliumKind =
  'CiliumEgressGatewayPolicy' | 'CiliumNetworkPolicy' | 'CiliumClusterwideNetworkPolicy';

export const SCHEMA_FILES: Readonly<Record<CiliumKind, string>> = {
  CiliumEgressGatewayPolicy: 'ciliumegressgatewaypolicy_v2.json',
  CiliumNetworkPolicy: 'ciliumnetworkpolicy_v2.json',
  CiliumClusterwideNetworkPolicy: 'ciliumclusterwidenetworkpolicy_v2.json',
};

export function isCiliumKind(kind: unknown): kind is CiliumKind {
  return typeof kind === 'string' && Object.hasOwn(SCHEMA_FILES, kind);
}

type Json = null | boolean | number | string | Json[] | { [key: string]: Json };

/** Rewrites every `pattern` in a schema tree in place. */
function rewritePatterns(node: Json, rewrite: (pattern: string) => string): void {
  if (Array.isArray(node)) {
    for (const item of node) rewritePatterns(item, rewrite);
  } else if (node !== null && typeof node === 'object') {
    for (const [key, value] of Object.entries(node)) {
      if (key === 'pattern' && typeof value === 'string') node[key] = rewrite(value);
      else rewritePatterns(value, rewrite);
    }
  }
}

function child(node: Json | undefined, ...keys: string[]): { [key: string]: Json } {
  let current = node;
  for (const key of keys) {
    if (current === null || typeof current !== 'object' || Array.isArray(current)) break;
    current = current[key];
  }
  if (current === null || typeof current !== 'object' || Array.isArray(current)) {
    throw new Error(`Pinned schema lacks ${keys.join('.')}: was schema/cilium/ edited?`);
  }
  return current;
}

/** Reads a pinned schema and applies the load-time patches listed in schema/cilium/SOURCES.md. */
function loadSchema(kind: CiliumKind, version: CiliumVersion): { [key: string]: Json } {
  const text = readFileSync(packagePath('schema', 'cilium', SCHEMA_FILES[kind]), 'utf8');
  const schema = JSON.parse(text) as { [key: string]: Json };
  // `\PC` is RE2 (Go) for "not a control character"; a JavaScript `u` RegExp spells it \P{C}.
  rewritePatterns(schema, (pattern) => pattern.replace(/\\PC/g, '\\P{C}'));
  if (kind === 'CiliumEgressGatewayPolicy' && supportsIpv6EgressGateway(version)) {
    // 1.17.1's items carry an IPv4-only pattern; 1.18 takes IPv6 destinations too.
    for (const field of ['destinationCIDRs', 'excludedCIDRs']) {
      const items = child(schema, 'properties', 'spec', 'properties', field, 'items');
      delete items['pattern'];
      items['format'] = 'cidr';
    }
  }
  return schema;
}

const validators = new Map<string, ValidateFunction>();

/** The compiled validator of a kind for a Cilium release, compiled once and cached. */
export function getSchemaValidator(kind: CiliumKind, version: CiliumVersion): ValidateFunction {
  const key = `${kind}@${formatCiliumVersion(version)}`;
  let validate = validators.get(key);
  if (validate === undefined) {
    validate = createKubernetesAjv().compile(loadSchema(kind, version));
    validators.set(key, validate);
  }
  return validate;
}
