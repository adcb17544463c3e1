import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { parseAddress } from '../core/index.js';
import { parsePolicy } from './parse-policy.js';

/** A policy with these networks and one class whose deny rule uses `target`. */
function policyWith(networks: string, target = 'target'): string {
  return `apiVersion: egressguard/v1
metadata: { name: nets }
networks:
${networks}
classes:
  vm:
    ingress: [br0]
    sources: [192.168.64.0/22]
    rules:
      - { id: deny-target, action: deny, to: ${target} }
    default: allow
`;
}

function check(text: string, file = '/policies/policy.yaml') {
  const result = parsePolicy(text, file);
  return {
    result,
    codes: result.issues.map((i) => i.code),
    at: result.issues.map((i) => `${i.file}:${i.line}:${i.column} ${i.code}`),
  };
}

/** Whether the resolved destination of the class's first rule contains an address. */
function targetContains(text: string, address: string): boolean {
  const { result } = check(text);
  const destination = result.policy?.classes[0]?.rules[0]?.destination;
  const parsed = parseAddress(address);
  if (destination?.kind !== 'addresses' || parsed === undefined) throw new Error('no policy');
  return destination.set.contains(parsed.family, parsed.value);
}

describe('network references and cycles', () => {
  it('reports a network that includes itself, at the reference', () => {
    const { at, result } = check(
      policyWith('  target: { cidrs: [10.0.0.0/8], include: [target] }'),
    );
    expect(at).toEqual(['/policies/policy.yaml:4:44 network-cycle']);
    expect(result.issues[0]?.message).toBe(
      'Network "target" refers to itself: remove the reference',
    );
    expect(result.policy).toBeUndefined();
  });

  it('reports a cycle of three once, naming its members in order', () => {
    const { result, codes } = check(
      policyWith(`  target: [a]
  a: { include: [b] }
  b: { include: [c] }
  c: { cidrs: [10.0.0.0/8], include: [a] }`),
    );
    expect(codes).toEqual(['network-cycle']);
    expect(result.issues[0]?.message).toBe(
      'Network "c" refers back to "a", a cycle: "a" → "b" → "c" → "a"; remove one of these references',
    );
    expect(result.issues[0]?.line).toBe(7);
  });

  it('finds a cycle through an exclusion', () => {
    const { codes } = check(
      policyWith(`  target: { cidrs: [10.0.0.0/8], exclude: [lab] }
  lab: { cidrs: [10.1.0.0/16], include: [target] }`),
    );
    expect(codes).toEqual(['network-cycle']);
  });

  it('resolves a network used by several others once, without a false cycle', () => {
    const { codes } = check(
      policyWith(`  target: { include: [a, b] }
  a: { include: [base] }
  b: { include: [base] }
  base: [10.0.0.0/8]`),
    );
    expect(codes).toEqual([]);
  });

  it('tells an unknown name from a malformed address', () => {
    const { result } = check(
      policyWith('  lan: [192.168.0.0/16]', '[Lan, 192.168.1.0/24x, 10.0.0.300, fe80::1%eth0]'),
    );
    expect(result.issues.map((i) => [i.code, i.message])).toEqual([
      [
        'unknown-network',
        'Unknown network "Lan" (did you mean "lan"?): define it under "networks"',
      ],
      [
        'malformed-cidr',
        'Cannot parse "192.168.1.0/24x" as an address or prefix: an IPv4 prefix length is a number from 0 to 32',
      ],
      [
        'malformed-cidr',
        'Cannot parse "10.0.0.300" as an address or prefix: an IPv4 address is four numbers from 0 to 255, without leading zeros',
      ],
      [
        'malformed-cidr',
        'Cannot parse "fe80::1%eth0" as an address or prefix: a zone (%eth0) has no place in a prefix: remove it',
      ],
    ]);
  });

  it('rejects network names that could never be referenced', () => {
    const { result } = check(
      policyWith('  target: [10.0.0.0/8]\n  any: [0.0.0.0/0]\n  10net: [10.0.0.0/8]'),
    );
    expect(result.issues.map((i) => `${i.line}:${i.column} ${i.code}`)).toEqual([
      '5:3 invalid-value',
      '6:3 invalid-value',
    ]);
  });
});

describe('exclusions are set arithmetic', () => {
  it('subtracts excluded prefixes, leaving the pieces around them', () => {
    const text = policyWith('  target: { cidrs: [10.0.0.0/8], exclude: [10.1.0.0/16] }');
    expect(targetContains(text, '10.0.255.255')).toBe(true);
    expect(targetContains(text, '10.1.2.3')).toBe(false);
    expect(targetContains(text, '10.2.0.0')).toBe(true);
  });

  it('excludes a network with exclusions of its own: A − (B − C)', () => {
    const text = policyWith(`  target: { cidrs: [10.0.0.0/8], exclude: [lab] }
  lab: { cidrs: [10.1.0.0/16], exclude: [10.1.2.0/24] }`);
    expect(targetContains(text, '10.1.2.5')).toBe(true);
    expect(targetContains(text, '10.1.3.5')).toBe(false);
    expect(targetContains(text, '10.9.0.1')).toBe(true);
  });

  it('excludes per family', () => {
    const text = policyWith(
      '  target: { cidrs: [10.0.0.0/8, 2001:db8::/32], exclude: [2001:db8:1::/48] }',
    );
    expect(targetContains(text, '10.1.2.3')).toBe(true);
    expect(targetContains(text, '2001:db8:2::1')).toBe(true);
    expect(targetContains(text, '2001:db8:1::1')).toBe(false);
  });

  it('warns at the exclusions when they empty a network, and only then', () => {
    const { result, at } = check(
      policyWith(`  target: { cidrs: [10.20.0.0/16], exclude: [10.0.0.0/8] }
  nothing: { exclude: [10.0.0.0/8] }`),
    );
    expect(at).toEqual(['/policies/policy.yaml:4:45 empty-network']);
    expect(result.issues[0]?.message).toContain('remove all of 10.20.0.0/16');
    // A warning: the policy is still usable, and the emptied rule matches nothing.
    const rule = result.policy?.classes[0]?.rules[0];
    expect(rule?.destination.kind === 'addresses' && rule.destination.set.isEmpty()).toBe(true);
  });

  it('refuses a prefix with host bits in the policy (it widens the match), saying what it means', () => {
    const text = policyWith('  target: [10.42.0.10/24]');
    const { result } = check(text);
    expect(result.issues.map((i) => [i.code, i.severity, i.column])).toEqual([
      ['host-bits', 'error', 12],
    ]);
    expect(result.policy).toBeUndefined();
    expect(result.issues[0]?.message).toContain('so it matches all of "10.42.0.0/24"');
  });

  it('refuses "any" and "self" inside a list', () => {
    const { result } = check(policyWith('  target: [10.0.0.0/8]', '[target, any]'));
    expect(result.issues.map((i) => i.code)).toEqual(['misplaced-keyword']);
  });
});

describe('network list files', () => {
  const dir = mkdtempSync(join(tmpdir(), 'eg-lists-'));
  afterAll(() => {
    rmSync(dir, { recursive: true, force: true });
  });

  it('reports a malformed line at its line and column in the list file', () => {
    writeFileSync(
      join(dir, 'drop.txt'),
      '\uFEFF# header\n198.51.100.0/24\n\n   203.0.113.0/33  # too long\r\n\t2001:db8::1/64\n',
    );
    const result = parsePolicy(
      policyWith('  target: { files: [drop.txt] }'),
      join(dir, 'policy.yaml'),
    );
    const inList = result.issues.filter((i) => i.file.endsWith('drop.txt'));
    expect(inList.map((i) => `${i.file}:${i.line}:${i.column} ${i.severity} ${i.code}`)).toEqual([
      `${dir}/drop.txt:4:4 error malformed-cidr`,
      `${dir}/drop.txt:5:2 warning host-bits-in-list`,
    ]);
    expect(inList[0]?.path).toBe('networks.target.files[0]');
  });

  it('caps the issues of a long bad file and says how many there are', () => {
    writeFileSync(join(dir, 'bad.txt'), Array.from({ length: 25 }, (_, i) => `bad${i}`).join('\n'));
    const result = parsePolicy(
      policyWith('  target: { files: [bad.txt], cidrs: [10.0.0.0/8] }'),
      join(dir, 'policy.yaml'),
    );
    expect(result.issues).toHaveLength(21);
    expect(result.issues.at(-1)?.message).toContain('has 25 lines with this problem');
  });

  it('names an unreadable list by its path as the policy names it', () => {
    const result = parsePolicy(
      policyWith('  target: { files: [lists/missing.txt], cidrs: [10.0.0.0/8] }'),
      'site/policy.yaml',
    );
    expect(result.issues.map((i) => [i.code, i.file, i.line, i.column, i.message])).toEqual([
      [
        'unreadable-file',
        'site/policy.yaml',
        4,
        21,
        'Cannot read network list "site/lists/missing.txt": ENOENT (no such file): check the path (relative to the policy file) and its permissions',
      ],
    ]);
  });

  it('reads a list with both families and comments', () => {
    writeFileSync(join(dir, 'mixed.txt'), '192.0.2.0/24 # docs\n2001:db8::/32\n198.51.100.7\n');
    const result = parsePolicy(policyWith('  target: { files: [mixed.txt] }'), join(dir, 'p.yaml'));
    expect(result.issues.map((i) => i.code)).toEqual(['unreachable-family']);
    const destination = result.policy?.classes[0]?.rules[0]?.destination;
    expect(destination?.kind === 'addresses' && destination.set.describe()).toBe(
      '192.0.2.0/24, 198.51.100.7/32, 2001:db8::/32',
    );
  });
});
