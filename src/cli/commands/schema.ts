import { policyJsonSchema } from '../../policy/index.js';
import { EXIT } from '../exit-codes.js';
import { printJson, type Output } from '../output.js';

/** `schema`: the JSON Schema of policy v1, generated from the validator. */
export function runSchema(output: Output): number {
  printJson(output, policyJsonSchema());
  return EXIT.ok;
}
