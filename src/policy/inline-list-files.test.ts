import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { packagePath } from '../core/index.js';
import { inlineListFiles } from './inline-list-files.js';
import { loadPolicy, parsePolicy } from './parse-policy.js';

const dir = mkdtempSync(join(tmpdir(), 'eg-inline-'));
afterAll(() => {
  rmSync(dir, { recursive: true, force: true });
});

/** What the policy enforces, without where it was read from. */
function meaning(result: ReturnType<typeof loadPolicy>) {
  expect(result.issues.filter((i) => i.severity === 'error')).toEqual([]);
  const { classes, podClasses, tunnels, uplink, name } = result.policy ?? {};
  return { classes, podClasses, tunnels, uplink, name };
}

describe('inlineListFiles (what fleet push sends: no path left for the controller to open)', () => {
  it('puts the prefixes of every list file under cidrs, and the policy means the same', () => {
    const file = packagePath('testdata/policies/valid/linux-container-host/policy.yaml');
    const inlined = inlineListFiles(readFileSync(file, 'utf8'), file);
    expect(inlined).not.toMatch(/files:/);
    expect(inlined).toContain('203.0.113.64/27');
    const pushed = parsePolicy(inlined, 'policy.yaml', { readListFiles: false });
    expect(meaning(pushed)).toEqual(meaning(loadPolicy(file)));
  });

  it('merges files with the cidrs already there, keeps exclusions, takes host bits as the checker does', () => {
    writeFileSync(
      join(dir, 'a.txt'),
      '# list\n10.1.0.0/16\n10.2.0.7/16  # host bits\n2001:db8:1::/48\n',
    );
    writeFileSync(join(dir, 'b.txt'), '10.3.0.0/24\n');
    const policy = join(dir, 'policy.yaml');
    const text = readFileSync(
      packagePath('testdata/policies/valid/linux-container-host/policy.yaml'),
      'utf8',
    )
      .replace(
        'files: [mirrors.txt]',
        'cidrs: [192.0.2.0/28]\n    files: [a.txt, b.txt]\n    exclude: [10.1.2.0/24]',
      )
      .replace('files: [blocklist.txt]', 'files: [b.txt]');
    writeFileSync(policy, text);
    const inlined = inlineListFiles(text, policy);
    expect(inlined).not.toMatch(/files:/);
    expect(meaning(parsePolicy(inlined, 'policy.yaml', { readListFiles: false }))).toEqual(
      meaning(loadPolicy(policy)),
    );
  });

  it('leaves a policy without list files as it is', () => {
    const text = readFileSync(
      packagePath('testdata/policies/valid/linux-vpn-gateway/policy.yaml'),
      'utf8',
    );
    expect(inlineListFiles(text, 'policy.yaml')).toBe(text);
  });

  it('refuses a list file when files are not to be read, opening nothing', () => {
    const result = parsePolicy(
      'apiVersion: egressguard/v1\nkind: Policy\nmetadata: { name: p }\nnetworks:\n  n:\n    files: [/etc/shadow]\n',
      'pushed.yaml',
      { readListFiles: false },
    );
    const issue = result.issues.find((i) => i.path === 'networks.n.files[0]');
    expect(issue).toMatchObject({
      code: 'invalid-value',
      message: expect.stringMatching(
        /^Network list file "\/etc\/shadow" is not read here: a controller never opens a path/,
      ) as string,
    });
  });
});
