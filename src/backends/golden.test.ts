import { existsSync, readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import { isEgressguardError } from '../core/index.js';
import { readHostFacts } from '../facts/index.js';
import { lowerForHost } from '../ir/index.js';
import { loadPolicy } from '../policy/index.js';
import { registry } from './registry.js';

// STYLE.md rule 10: a golden file for every policy × backend cell, as `expected.<backend>.<artifact>`
// beside the policy, or `unsupported.<backend>.txt` saying why the backend cannot compile it.
const VALID = fileURLToPath(new URL('../../testdata/policies/valid', import.meta.url));
const update = process.env['UPDATE_GOLDEN'] === '1';
const cases = readdirSync(VALID).sort();

function compileCase(backendName: string, name: string) {
  const dir = join(VALID, name);
  const parsed = loadPolicy(join(dir, 'policy.yaml'));
  if (parsed.policy === undefined) throw new Error(`golden case ${name} is invalid`);
  const facts = readHostFacts(join(dir, 'facts.json'));
  return registry.get(backendName).createCompiler().compile(lowerForHost(parsed.policy, facts));
}

describe.each(registry.names())('golden files of backend %s', (backend) => {
  it.each(cases)('%s', (name) => {
    const dir = join(VALID, name);
    const unsupported = join(dir, `unsupported.${backend}.txt`);
    const goldens = readdirSync(dir).filter((f) => f.startsWith(`expected.${backend}.`));
    // The compiler's own refusal, if it refuses the policy.
    let refused: unknown;
    try {
      compileCase(backend, name);
    } catch (error) {
      refused = error;
    }
    if (update && isEgressguardError(refused) && refused.code === 'unsupported') {
      writeFileSync(unsupported, `${refused.message}\n`);
    }
    if (existsSync(unsupported)) {
      expect(readFileSync(unsupported, 'utf8').trim(), `${unsupported} gives no reason`).not.toBe(
        '',
      );
      expect(goldens, 'a cell is either unsupported or has golden files').toEqual([]);
      expect(isEgressguardError(refused) ? refused.code : refused).toBe('unsupported');
      // The file states the compiler's exact refusal.
      expect(isEgressguardError(refused) ? refused.message : '').toBe(
        readFileSync(unsupported, 'utf8').trim(),
      );
      return;
    }
    const artifacts = compileCase(backend, name);
    const expected = artifacts.map((a) => `expected.${backend}.${a.name}`);
    if (update) {
      for (const a of artifacts)
        writeFileSync(join(dir, `expected.${backend}.${a.name}`), a.content);
    }
    expect(
      update ? expected : goldens.sort(),
      `golden files of ${name} for ${backend}: run with UPDATE_GOLDEN=1 and review the diff`,
    ).toEqual([...expected].sort());
    for (const a of artifacts) {
      expect(a.content).toBe(readFileSync(join(dir, `expected.${backend}.${a.name}`), 'utf8'));
    }
  });

  it('compiles deterministically', () => {
    for (const name of cases) {
      if (existsSync(join(VALID, name, `unsupported.${backend}.txt`))) continue;
      expect(compileCase(backend, name)).toEqual(compileCase(backend, name));
    }
  });
});
