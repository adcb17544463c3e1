import { existsSync, readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import { readHostFacts } from '../../facts/index.js';
import { lowerPolicy } from '../../ir/index.js';
import { loadPolicy } from '../../policy/index.js';
import { createNftCompiler } from './nft-compiler.js';

const VALID = fileURLToPath(new URL('../../../testdata/policies/valid', import.meta.url));
const update = process.env['UPDATE_GOLDEN'] === '1';

function compileCase(name: string) {
  const dir = join(VALID, name);
  const parsed = loadPolicy(join(dir, 'policy.yaml'));
  if (parsed.policy === undefined) throw new Error(`golden case ${name} is invalid`);
  const facts = readHostFacts(join(dir, 'facts.json'));
  return createNftCompiler().compile(lowerPolicy(parsed.policy, facts), facts);
}

describe('nftables compiler golden files', () => {
  it.each(readdirSync(VALID))('%s', (name) => {
    const artifacts = compileCase(name);
    for (const [artifact, golden] of [
      ['ruleset.nft', 'expected.nft'],
      ['steering.json', 'expected.steering.json'],
      ['lockdown.nft', 'expected.lockdown.nft'],
    ] as const) {
      const content = artifacts.find((a) => a.name === artifact)?.content;
      const path = join(VALID, name, golden);
      if (update) writeFileSync(path, content ?? '');
      expect(existsSync(path), `${path} is missing: run with UPDATE_GOLDEN=1 and review it`).toBe(
        true,
      );
      expect(content).toBe(readFileSync(path, 'utf8'));
    }
  });

  it('is deterministic', () => {
    expect(compileCase('linux-vpn-gateway')).toEqual(compileCase('linux-vpn-gateway'));
  });
});

describe('nftables compiler dispatch (STYLE.md rule 2)', () => {
  it('branches on selector.kind only by switch, so a new selector kind does not compile', () => {
    const source = readFileSync(
      fileURLToPath(new URL('./nft-compiler.ts', import.meta.url)),
      'utf8',
    );
    // `if (x.kind === …)` and ternaries compile silently when a kind is added; switch + assertNever
    // does not.
    expect(source.match(/selector\.kind\s*[!=]==/g) ?? []).toEqual([]);
  });
});
