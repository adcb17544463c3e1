import { readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import { readHostFacts } from '../../facts/index.js';
import { lowerForHost } from '../../ir/index.js';
import { loadPolicy } from '../../policy/index.js';
import { RULESET_ARTIFACT, createNftCompiler } from './nft-compiler.js';

const EXAMPLE = fileURLToPath(
  new URL('../../../testdata/policies/valid/linux-vpn-gateway/', import.meta.url),
);
const DOC = readFileSync(new URL('../../../docs/linux.md', import.meta.url), 'utf8');

/** docs/linux.md's "The table": each chain it lists, and whether it says the chain has a hook. */
function documentedChains(): Map<string, boolean> {
  const section = DOC.slice(DOC.indexOf('## The table'));
  const chains = new Map<string, boolean>();
  for (const line of section.split('\n').slice(2)) {
    if (!line.startsWith('|')) {
      if (chains.size > 0) break;
      continue;
    }
    const [, name, hook] = line.split('|').map((cell) => cell.trim());
    const chain = /^`(\w+)`$/.exec(name ?? '')?.[1];
    if (chain !== undefined) chains.set(chain, hook !== 'none');
  }
  return chains;
}

// The chains docs/linux.md describes are the ones the compiler emits besides the class chains,
// and it says which of them hook into the kernel (it once listed the reassembly chain as none).
describe("docs/linux.md's table of chains", () => {
  it('matches the compiled ruleset of the example', () => {
    const policy = loadPolicy(`${EXAMPLE}policy.yaml`).policy;
    if (policy === undefined) throw new Error('the example does not load');
    const ruleset =
      createNftCompiler()
        .compile(lowerForHost(policy, readHostFacts(`${EXAMPLE}facts.json`)))
        .find((a) => a.name === RULESET_ARTIFACT)?.content ?? '';
    const compiled = new Map<string, boolean>();
    for (const [, name, body] of ruleset.matchAll(/\tchain (\S+) \{\n([\s\S]*?)\n\t\}/g)) {
      if (name === undefined || name.startsWith('c_')) continue; // a class's own chains
      compiled.set(name, /^\t\ttype \w+ hook /.test(body ?? ''));
    }
    expect(documentedChains()).toEqual(compiled);
  });
});
