import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, describe, expect, it } from 'vitest';
import { hasErrors, loadPolicy, type Policy } from '../policy/index.js';
import { variantSources, writePolicyVariant } from './policy-variant.js';

const GATEWAY = fileURLToPath(
  new URL('../../testdata/policies/valid/linux-vpn-gateway/policy.yaml', import.meta.url),
);
const temp = mkdtempSync(join(tmpdir(), 'eg-variant-'));
afterAll(() => {
  rmSync(temp, { recursive: true, force: true });
});

function load(file: string): Policy {
  const parsed = loadPolicy(file);
  if (parsed.policy === undefined || hasErrors(parsed.issues)) {
    throw new Error(parsed.issues.map((i) => i.message).join('; '));
  }
  return parsed.policy;
}

describe('the policy variant prove reapplies', () => {
  it('gives every class one unused source more in each family it has, and nothing else', () => {
    const sources = variantSources(load(GATEWAY));
    expect(sources.get('vpn')).toEqual([
      '10.10.0.0/24',
      '2001:db8:10::/64',
      '198.19.255.0/32',
      '2001:db8:ffff:ffff::/128',
    ]);
    expect(sources.get('internet')).toEqual(['10.10.1.0/24', '198.19.255.1/32']);
  });

  it('is a valid policy of another name, also when the sources are an alias', () => {
    const file = join(temp, 'aliased.yaml');
    writeFileSync(
      file,
      readFileSync(GATEWAY, 'utf8')
        .replace(
          'lan: [192.168.0.0/16]',
          'lan: [192.168.0.0/16]\n  vpn-sources: &vpn [10.10.0.0/24, 2001:db8:10::/64]',
        )
        .replace('sources: [10.10.0.0/24, 2001:db8:10::/64]', 'sources: *vpn'),
    );
    const policy = load(file);
    const variant = load(writePolicyVariant(policy, file, join(temp, 'b')));
    expect(variant.name).not.toBe(policy.name);
    const vpn = variant.classes.find((c) => c.name === 'vpn');
    expect(vpn?.sources.describe(8)).toBe(
      '10.10.0.0/24, 198.19.255.0/32, 2001:db8:10::/64, 2001:db8:ffff:ffff::/128',
    );
  });
});
