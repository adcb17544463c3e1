import { readFileSync } from 'node:fs';
import type { ValidateFunction } from 'ajv';
import { packagePath } from '../../core/index.js';
import { createKubernetesAjv, describeAjvError } from './kubernetes-ajv.js';

let validator: ValidateFunction | undefined;

/**
 * Validates a parsed chainsaw Test against the pinned v1alpha1 schema (schema/chainsaw/, the file
 * `chainsaw lint` uses); returns "path: message" lines, none when valid.
 */
export function validateChainsawTest(document: unknown): string[] {
  if (validator === undefined) {
    const schema = JSON.parse(
      readFileSync(packagePath('schema', 'chainsaw', 'test-chainsaw-v1alpha1.json'), 'utf8'),
    ) as Record<string, unknown>;
    // ajv 8 does not know the draft URI "http://json-schema.org/schema#" (SOURCES.md).
    delete schema['$schema'];
    validator = createKubernetesAjv().compile(schema);
  }
  if (validator(document)) return [];
  return (validator.errors ?? []).map((error) => {
    const { path, message } = describeAjvError(error);
    return `${path === '' ? '(root)' : path}: ${message}`;
  });
}
