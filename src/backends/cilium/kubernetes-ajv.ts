import { domainToASCII } from 'node:url';
import { Ajv, type ErrorObject } from 'ajv';
import formatsModule from 'ajv-formats';
import { parsePrefix } from '../../core/index.js';

/**
 * An ajv 8 instance for JSON Schemas generated from Kubernetes OpenAPI (CRDs, chainsaw): the
 * `x-kubernetes-*` annotations are not JSON Schema, hence `strict: false`; `strictRequired` and
 * `strictTypes` are off because both pinned schema sets break them (schema/cilium/SOURCES.md,
 * schema/chainsaw/SOURCES.md).
 */
export function createKubernetesAjv(): Ajv {
  const ajv = new Ajv({
    strict: false,
    strictRequired: false,
    strictTypes: false,
    allErrors: true,
    // Kubernetes schemas carry a `default` here and there; validation must not change the input.
    useDefaults: false,
  });
  formatsModule.default(ajv);
  ajv.addFormat('cidr', { type: 'string', validate: isCidr });
  ajv.addFormat('idn-hostname', { type: 'string', validate: isIdnHostname });
  ajv.addFormat('int', { type: 'number', validate: Number.isInteger });
  return ajv;
}

/**
 * Kubernetes' OpenAPI `cidr` format: an IPv4 or IPv6 prefix with an explicit length (Go's
 * net.ParseCIDR, so host bits are allowed). Leading zeros in an octet are refused, which is
 * stricter than the API server's "sloppy" parser: egressguard never writes them.
 */
function isCidr(value: string): boolean {
  return value.includes('/') && parsePrefix(value) !== undefined;
}

const HOSTNAME_LABEL = /^[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?$/i;

/** A hostname that may hold Unicode labels: its ASCII (punycode) form must be a hostname. */
function isIdnHostname(value: string): boolean {
  const ascii = domainToASCII(value);
  if (ascii === '' || ascii.length > 253) return false;
  return ascii.split('.').every((label) => HOSTNAME_LABEL.test(label));
}

/** A validation error as "path: message", the path in JSON Pointer form turned into dots. */
export function describeAjvError(error: ErrorObject): { path: string; message: string } {
  const path = error.instancePath
    .split('/')
    .slice(1)
    .map((segment) => segment.replace(/~1/g, '/').replace(/~0/g, '~'))
    .map((segment) => (/^\d+$/.test(segment) ? `[${segment}]` : `.${segment}`))
    .join('')
    .replace(/^\./, '');
  const message = error.message ?? `fails "${error.keyword}"`;
  switch (error.keyword) {
    case 'additionalProperties': {
      const extra = (error.params as { additionalProperty?: string }).additionalProperty ?? '?';
      return { path, message: `Unknown field "${extra}"` };
    }
    case 'enum': {
      const allowed = (error.params as { allowedValues?: unknown[] }).allowedValues ?? [];
      return {
        path,
        message: `Must be one of ${allowed.map((v) => JSON.stringify(v)).join(', ')}`,
      };
    }
    case 'pattern': {
      // The CRD patterns run to hundreds of characters: name the rule, not the regex.
      const pattern = (error.params as { pattern?: string }).pattern ?? '';
      const shown = pattern.length > 60 ? `${pattern.slice(0, 57)}...` : pattern;
      return { path, message: `Does not match the pattern "${shown}"` };
    }
    default:
      return { path, message: message.charAt(0).toUpperCase() + message.slice(1) };
  }
}
