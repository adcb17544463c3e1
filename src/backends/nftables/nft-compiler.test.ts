import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import { readHostFacts } from '../../facts/index.js';
import { lowerForHost } from '../../ir/index.js';
import { loadPolicy } from '../../policy/index.js';
import { createNftCompiler } from './nft-compiler.js';

const VALID = fileURLToPath(new URL('../../../testdata/policies/valid', import.meta.url));

function compileCase(name: string) {
  const dir = join(VALID, name);
  const parsed = loadPolicy(join(dir, 'policy.yaml'));
  if (parsed.policy === undefined) throw new Error(`golden case ${name} is invalid`);
  const facts = readHostFacts(join(dir, 'facts.json'));
  return createNftCompiler().compile(lowerForHost(parsed.policy, facts));
}

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
    expect(drops).toHaveLength(1);
    expect(drops[0]).toMatch(
      /^meta nfproto ipv4 oifname != "tun0" ip daddr != @s_host-vpn_ks4_[0-9a-f]{12} fib daddr type != \{ local, broadcast, anycast \} counter name n_host-vpn\/kill-switch drop comment "host-vpn\/kill-switch"$/,
    );
  });

  it('needs no such exemption in the forward hook, where nothing is for the host', () => {
    const drops = chainRules('linux-host-tunnel', 'c_vms_fwd').filter((l) =>
      l.endsWith('drop comment "vms/kill-switch"'),
    );
    expect(drops).toHaveLength(1);
    expect(drops[0]).not.toContain('fib');
  });
});

describe('large sets', () => {
  // 40,000 /32s two apart, so nothing merges: more than SHARD_ELEMENTS, two shards.
  function compileLarge(extra = ''): string {
    const dir = mkdtempSync(join(tmpdir(), 'eg-shards-'));
    try {
      const lines = Array.from({ length: 40_000 }, (_, i) => {
        const n = 2 * i;
        return `198.${18 + (n >> 16)}.${(n >> 8) & 255}.${n & 255}/32`;
      });
      writeFileSync(join(dir, 'big.txt'), `${lines.join('\n')}\n${extra}`);
      const policy = readFileSync(join(VALID, 'linux-vpn-gateway', 'policy.yaml'), 'utf8')
        .replace('lan: [192.168.0.0/16]', 'lan: [192.168.0.0/16]\n  big: { files: [big.txt] }')
        .replace('except: [lan]', 'except: [lan, big]')
        .replace(
          '    default: allow\n  internet:',
          '    rules:\n      - { id: no-big, action: deny, to: big }\n    default: allow\n  internet:',
        );
      writeFileSync(join(dir, 'policy.yaml'), policy);
      const parsed = loadPolicy(join(dir, 'policy.yaml'));
      if (parsed.policy === undefined)
        throw new Error(parsed.issues.map((i) => i.message).join('; '));
      const facts = readHostFacts(join(VALID, 'linux-vpn-gateway', 'facts.json'));
      const artifacts = createNftCompiler().compile(lowerForHost(parsed.policy, facts));
      return artifacts.find((a) => a.name === 'ruleset.nft')?.content ?? '';
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  }
  const ruleset = compileLarge();
  const sets = (prefix: string): { name: string; elements: string[] }[] =>
    [...ruleset.matchAll(/\tset (\S+) \{\n[^}]*?elements = \{ ([^}]*) \}/g)]
      .filter((m) => (m[1] ?? '').startsWith(prefix))
      .map((m) => ({ name: m[1] ?? '', elements: (m[2] ?? '').split(/,\s*/) }));
  const rules = (needle: string): string[] =>
    ruleset.split('\n').filter((l) => l.includes(needle) && l.includes('counter name'));

  it('are split into shards of contiguous ranges that together hold every element', () => {
    const shards = sets('s_vpn_r0_dst4_');
    expect(shards.map((s) => s.name)).toEqual([
      expect.stringMatching(/^s_vpn_r0_dst4_p0_[0-9a-f]{12}$/),
      expect.stringMatching(/^s_vpn_r0_dst4_p1_[0-9a-f]{12}$/),
    ]);
    expect(shards.map((s) => s.elements.length)).toEqual([20_000, 20_000]);
    expect(shards[0]?.elements.at(-1)).toBe('198.18.156.62/32');
    expect(shards[1]?.elements[0]).toBe('198.18.156.64/32');
  });

  it('match with one rule per shard, and "in none" with one rule that checks every shard', () => {
    const deny = rules('comment "no-big"');
    expect(deny).toHaveLength(2 * 2); // two shards, in the forward and input chains of vpn
    expect(deny.filter((l) => /@s_vpn_r0_dst4_p0_/.test(l))).toHaveLength(2);
    const killSwitch = rules('comment "vpn/kill-switch"').filter((l) => l.includes('ipv4'));
    expect(killSwitch).toHaveLength(1);
    expect(killSwitch[0]).toMatch(
      /ip daddr != @s_vpn_ks4_p0_[0-9a-f]{12} ip daddr != @s_vpn_ks4_p1_[0-9a-f]{12} /,
    );
  });

  it('are named by content: the same elements keep their names, others get new ones', () => {
    expect(compileLarge()).toBe(ruleset);
    const changed = compileLarge('203.0.113.9/32\n');
    const names = (text: string): string[] =>
      [...text.matchAll(/\tset (s_vpn_r0_dst4_\S+) \{/g)].map((m) => m[1] ?? '');
    // Shards are cut by count, so one more element moves the boundary and renames both; what
    // matters is that no new content keeps an old name, which apply would take as live already.
    expect(names(changed)).toHaveLength(2);
    for (const name of names(changed)) expect(names(ruleset)).not.toContain(name);
  });
});
