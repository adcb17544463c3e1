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

describe('the kill switch of a host-originated class', () => {
  /** The rules of one chain of the compiled ruleset. */
  function chainRules(name: string, chain: string): string[] {
    const ruleset = compileCase(name).find((a) => a.name === 'ruleset.nft')?.content ?? '';
    const body =
      new RegExp(`\\tchain ${chain} \\{\\n([\\s\\S]*?)\\n\\t\\}`).exec(ruleset)?.[1] ?? '';
    return body.split('\n').map((l) => l.trim());
  }

  // Its traffic to the host itself leaves by "lo", never by the tunnel: the kill switch must let
  // the host's own addresses through to the class's `to: self` rules (the evaluator's "self").
  it('exempts the host itself in the output hook', () => {
    const drops = chainRules('linux-host-tunnel', 'c_host-vpn_out').filter((l) =>
      l.endsWith('drop comment "host-vpn/kill-switch"'),
    );
    expect(drops).toEqual([
      'meta nfproto ipv4 oifname != "tun0" ip daddr != @s_host-vpn_ks4 fib daddr type != { local, broadcast, anycast } counter name n_host-vpn/kill-switch drop comment "host-vpn/kill-switch"',
    ]);
  });

  it('needs no such exemption in the forward hook, where nothing is for the host', () => {
    const drops = chainRules('linux-host-tunnel', 'c_vms_fwd').filter((l) =>
      l.endsWith('drop comment "vms/kill-switch"'),
    );
    expect(drops).toHaveLength(1);
    expect(drops[0]).not.toContain('fib');
  });
});
