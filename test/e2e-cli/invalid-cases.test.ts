import { existsSync, readdirSync, readFileSync, statSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { ISSUE_CODES } from '../../src/policy/index.js';
import { REPO, runCli } from './run-cli.js';

/**
 * Golden messages for every invalid case, through the built CLI, run in the case's directory so
 * that paths read as they do in expected.txt. `UPDATE_GOLDEN=1` rewrites expected.txt: review
 * every rewritten message by hand (what failed, with which value, what to do).
 */
const INVALID = join(REPO, 'testdata/policies/invalid');
const UPDATE = process.env['UPDATE_GOLDEN'] === '1';
const ISSUE_LINE = /^(.+?):(\d+):(\d+): (error|warning) ([a-z0-9-]+): (.+)$/;

const cases = readdirSync(INVALID)
  .filter((name) => statSync(join(INVALID, name)).isDirectory())
  .sort();

function readExpected(name: string): string[] {
  const file = join(INVALID, name, 'expected.txt');
  return existsSync(file)
    ? readFileSync(file, 'utf8')
        .split('\n')
        .filter((l) => l !== '')
    : [];
}

describe('invalid policy cases', () => {
  it('exist', () => {
    expect(cases.length).toBeGreaterThan(0);
  });

  it.each(cases)('%s: check prints exactly expected.txt', async (name) => {
    const dir = join(INVALID, name);
    const result = await runCli(['check', 'policy.yaml'], { cwd: dir });
    expect(result.stderr).toBe('');
    const lines = result.stdout.split('\n').filter((l) => l !== '');
    const summary = lines.at(-1) ?? '';
    expect(summary).toMatch(/^[✓✗] policy\.yaml: (valid|invalid) \(/);
    const issues = lines.slice(0, -1);
    if (UPDATE) writeFileSync(join(dir, 'expected.txt'), `${issues.join('\n')}\n`);
    expect(issues).toEqual(readExpected(name));
    expect(issues.length, 'an invalid case must show at least one issue').toBeGreaterThan(0);
    for (const line of issues) expect(line).toMatch(ISSUE_LINE);
    const hasError = issues.some((l) => ISSUE_LINE.exec(l)?.[4] === 'error');
    expect(result.exitCode).toBe(hasError ? 1 : 0);
    expect(summary.startsWith(hasError ? '✗' : '✓')).toBe(true);
  });

  it('cover every issue code, with its severity', () => {
    const seen = new Map<string, string>();
    for (const name of cases) {
      for (const line of readExpected(name)) {
        const match = ISSUE_LINE.exec(line);
        if (match?.[5] !== undefined && match[4] !== undefined) seen.set(match[5], match[4]);
      }
    }
    const missing = Object.keys(ISSUE_CODES).filter((code) => !seen.has(code));
    expect(missing, 'add a case under testdata/policies/invalid for each').toEqual([]);
    for (const [code, severity] of seen) {
      expect(ISSUE_CODES[code as keyof typeof ISSUE_CODES], code).toBe(severity);
    }
  });

  it('name their cases in kebab-case', () => {
    for (const name of cases) expect(name).toMatch(/^[a-z0-9]+(-[a-z0-9]+)+$/);
  });
});
