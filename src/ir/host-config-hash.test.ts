import { fileURLToPath } from 'node:url';
import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { parseHostFacts } from '../facts/index.js';
import { parsePolicy } from '../policy/index.js';
import { hostConfigHash, irDigest } from './host-config-hash.js';
import { lowerForHost } from './bind-host.js';

const dir = fileURLToPath(
  new URL('../../testdata/policies/valid/linux-vpn-gateway/', import.meta.url),
);
const text = readFileSync(`${dir}policy.yaml`, 'utf8');
const facts = parseHostFacts(JSON.parse(readFileSync(`${dir}facts.json`, 'utf8')), 'facts.json');

function lower(source: string) {
  const { policy, issues } = parsePolicy(source, `${dir}policy.yaml`);
  if (policy === undefined) throw new Error(JSON.stringify(issues));
  return lowerForHost(policy, facts);
}

const versions = { compiler: '1', agent: '1' };

describe('host config hash', () => {
  it('ignores requirement wording: editing it re-applies nothing', () => {
    const edited = text.replace(
      'Class vpn reaches the internet only through the tunnel',
      'Class vpn must never leave by the uplink',
    );
    expect(edited).not.toBe(text);
    expect(irDigest(lower(edited))).toBe(irDigest(lower(text)));
  });

  it('changes when anything enforced changes', () => {
    const base = irDigest(lower(text));
    expect(
      irDigest(lower(text.replace('lan: [192.168.0.0/16]', 'lan: [192.168.0.0/17]'))),
    ).not.toBe(base);
    expect(irDigest(lower(text.replace('mssClamp: pmtu', 'mssClamp: 1360')))).not.toBe(base);
  });

  it('blanks the stamp inside artifacts and covers artifacts and versions', () => {
    const ir = lower(text);
    const a = hostConfigHash({
      ir,
      artifacts: [{ name: 'r', content: `x eg-hash:${'a'.repeat(64)}` }],
      versions,
    });
    const b = hostConfigHash({
      ir,
      artifacts: [{ name: 'r', content: `x eg-hash:${'b'.repeat(64)}` }],
      versions,
    });
    expect(a).toBe(b);
    expect(hostConfigHash({ ir, artifacts: [{ name: 'r', content: 'y' }], versions })).not.toBe(a);
    expect(
      hostConfigHash({
        ir,
        artifacts: [{ name: 'r', content: `x eg-hash:${'a'.repeat(64)}` }],
        versions: { compiler: '2', agent: '1' },
      }),
    ).not.toBe(a);
  });

  it('is frozen: the IR cannot be mutated', () => {
    const ir = lower(text);
    expect(Object.isFrozen(ir)).toBe(true);
    expect(Object.isFrozen(ir.classes[0]?.rules)).toBe(true);
  });
});
