import { existsSync, readdirSync, readFileSync, statSync } from 'node:fs';
import { join, relative } from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import { formatIssue } from './issue.js';
import { loadPolicy } from './parse-policy.js';

/**
 * The invalid cases through `loadPolicy`, without a build: the same golden lines the CLI prints
 * (test/e2e-cli/invalid-cases.test.ts), except what `check` finds with the host's facts and the
 * IR (the codes of FROM_FACTS).
 */
const INVALID = fileURLToPath(new URL('../../testdata/policies/invalid', import.meta.url));
const FROM_FACTS = ['probe-mismatch', 'ingress-not-on-host', 'masquerade-without-address'];
const cases = readdirSync(INVALID).filter((name) => statSync(join(INVALID, name)).isDirectory());

describe.each(cases)('invalid case %s', (name) => {
  const dir = join(INVALID, name);
  const expectedFile = join(dir, 'expected.txt');

  it.runIf(existsSync(expectedFile))('loadPolicy reports the expected issues', () => {
    const result = loadPolicy(join(dir, 'policy.yaml'));
    // Paths as the CLI prints them when run in the case's directory.
    const lines = result.issues.map((issue) =>
      formatIssue({
        ...issue,
        file: relative(dir, issue.file),
        message: issue.message.replaceAll(`${dir}/`, ''),
      }),
    );
    const expected = readFileSync(expectedFile, 'utf8')
      .split('\n')
      .filter((l) => l !== '' && !FROM_FACTS.some((code) => l.includes(` ${code}: `)));
    expect(lines).toEqual(expected);
    if (result.issues.some((i) => i.severity === 'error')) expect(result.policy).toBeUndefined();
    else expect(result.policy).toBeDefined();
  });
});
