import { readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import { readHostFacts } from '../../facts/index.js';
import { lowerForHost } from '../../ir/index.js';
import { parsePolicy } from '../../policy/index.js';
import { RULESET_ARTIFACT, createNftCompiler } from './nft-compiler.js';
import { diffRulesets } from './nft-plan-diff.js';

const EXAMPLE = fileURLToPath(
  new URL('../../../testdata/policies/valid/linux-vpn-gateway/', import.meta.url),
);
const POLICY = readFileSync(`${EXAMPLE}policy.yaml`, 'utf8');
const FACTS = readHostFacts(`${EXAMPLE}facts.json`);

/** The example's ruleset, with its policy text edited by `edit` (each edit must apply). */
function compile(...edits: readonly (readonly [string, string])[]): string {
  let text = POLICY;
  for (const [from, to] of edits) {
    if (!text.includes(from)) throw new Error(`the example policy has no ${JSON.stringify(from)}`);
    text = text.replace(from, to);
  }
  const parsed = parsePolicy(text, `${EXAMPLE}policy.yaml`);
  if (parsed.policy === undefined) throw new Error(JSON.stringify(parsed.issues));
  const artifacts = createNftCompiler().compile(lowerForHost(parsed.policy, FACTS));
  return artifacts.find((a) => a.name === RULESET_ARTIFACT)?.content ?? '';
}

const RULES = (rules: string): readonly [string, string] => [
  '    mssClamp: pmtu\n    default: allow\n',
  `    mssClamp: pmtu\n    rules:\n${rules}    default: allow\n`,
];
const SMTP = '      - { id: deny-smtp, action: deny, to: any, proto: tcp, ports: [25] }\n';
const WEB = '      - { id: allow-web, action: allow, to: any, proto: tcp, ports: [443] }\n';
const WEB2 = '      - { id: allow-web, action: allow, to: any, proto: tcp, ports: [80, 443] }\n';
const META = '      - { id: deny-metadata, action: deny, to: 169.254.169.254 }\n';

describe('diffRulesets: what plan shows of a firewall change, by rule id and set', () => {
  it('finds nothing between a ruleset and itself', () => {
    const ruleset = compile();
    expect(diffRulesets(ruleset, ruleset, 'egressguard')).toEqual({
      rules: { added: [], removed: [], changed: [] },
      sets: [],
    });
  });

  it('names rules added, removed and changed by their policy ids', () => {
    const before = compile(RULES(SMTP + WEB));
    const after = compile(RULES(META + WEB2));
    const diff = diffRulesets(before, after, 'egressguard');
    expect(diff.rules).toEqual({
      added: ['deny-metadata'],
      removed: ['deny-smtp'],
      changed: ['allow-web'],
    });
    // deny-metadata's destination is a set of its own: all of it is new.
    expect(diff.sets).toEqual([
      {
        set: 'rule deny-metadata',
        family: 'ipv4',
        added: 1,
        removed: 0,
        sampleAdded: ['169.254.169.254/32'],
        sampleRemoved: [],
      },
    ]);
  });

  it("shows a changed network as its set's elements, not as renamed sets or changed rules", () => {
    const before = compile();
    const after = compile(['lan: [192.168.0.0/16]', 'lan: [192.168.0.0/16, 172.16.0.0/12]']);
    const diff = diffRulesets(before, after, 'egressguard');
    // The kill switch's rule refers to a set of another name now: the same rule all the same.
    expect(diff.rules).toEqual({ added: [], removed: [], changed: [] });
    // Both steered classes (vpn and the host's resolver, host-vpn) may reach the LAN.
    const lanGrew = (set: string) => ({
      set,
      family: 'ipv4',
      added: 1,
      removed: 0,
      sampleAdded: ['172.16.0.0/12'],
      sampleRemoved: [],
    });
    expect(diff.sets).toEqual([
      lanGrew('class vpn kill-switch exceptions'),
      lanGrew('class host-vpn kill-switch exceptions'),
    ]);
  });

  it('calls a rule that moved within its chain changed (first match wins), not the ones it passed', () => {
    const before = compile(RULES(SMTP + WEB + META));
    const after = compile(RULES(WEB + META + SMTP));
    expect(diffRulesets(before, after, 'egressguard').rules).toEqual({
      added: [],
      removed: [],
      changed: ['deny-smtp'],
    });
  });

  it('counts and samples the elements of a large set', () => {
    // Every other address: neighbours would merge into one interval.
    const many = (n: number) => Array.from({ length: n }, (_, i) => `198.51.100.${2 * i}/32`);
    const before = compile(['lan: [192.168.0.0/16]', `lan: [${many(10).join(', ')}]`]);
    const after = compile([
      'lan: [192.168.0.0/16]',
      `lan: [${many(10).slice(4).join(', ')}, 203.0.113.0/24]`,
    ]);
    const [set] = diffRulesets(before, after, 'egressguard').sets;
    expect(set).toMatchObject({ added: 1, removed: 4, sampleAdded: ['203.0.113.0/24'] });
    expect(set?.sampleRemoved).toHaveLength(3);
  });

  it('adds everything when no table is live', () => {
    const diff = diffRulesets(undefined, compile(), 'egressguard');
    expect(diff.rules.removed).toEqual([]);
    expect(diff.rules.added).toEqual(
      expect.arrayContaining(['vpn/kill-switch', 'vpn/default', 'internet/anti-spoofing']),
    );
    expect(diff.sets.map((s) => `${s.set} ${s.family}`)).toContain('class vpn sources ipv4');
  });
});
