import { describe, expect, it } from 'vitest';
import { knownKeysAt, policyJsonSchema } from './schema.js';

describe('policy schema', () => {
  it('generates a JSON Schema with the class and rule shapes', () => {
    const schema = JSON.stringify(policyJsonSchema());
    expect(schema).toContain('"killSwitch"');
    expect(schema).toContain('"egressguard/v1"');
  });

  it('knows the keys of nested objects for suggestions', () => {
    expect(knownKeysAt(['classes', 'vm'])).toContain('killSwitch');
    expect(knownKeysAt(['classes', 'vm', 'rules', 0])).toEqual(
      expect.arrayContaining(['id', 'action', 'to', 'proto', 'ports']),
    );
    expect(knownKeysAt(['networks', 'lan'])).toEqual(
      expect.arrayContaining(['cidrs', 'include', 'exclude', 'files']),
    );
  });
});
