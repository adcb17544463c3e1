import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { policyJsonSchema } from './schema.js';

describe('committed JSON Schema', () => {
  it('matches the schema generated from the validator (regenerate: egressguard schema > schema/policy.schema.json)', () => {
    const committed = JSON.parse(
      readFileSync(new URL('../../schema/policy.schema.json', import.meta.url), 'utf8'),
    ) as unknown;
    expect(committed).toEqual(policyJsonSchema());
  });
});
