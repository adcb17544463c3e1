import { readdirSync, readFileSync, statSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { REPO, runCli } from './run-cli.js';

/**
 * testdata/FEATURES.md is a table of policy features and the cases that show them; this keeps it
 * true. A valid cell lists `case` names; an invalid cell lists `case` (code, code) entries.
 */
const TESTDATA = join(REPO, 'testdata');
const VALID = join(TESTDATA, 'policies/valid');
const INVALID = join(TESTDATA, 'policies/invalid');

interface FeatureRow {
  readonly feature: string;
  readonly valid: readonly string[];
  readonly invalid: readonly { name: string; codes: readonly string[] }[];
}

function parseFeatures(markdown: string): FeatureRow[] {
  const rows = markdown
    .split('\n')
    .filter((line) => line.startsWith('|'))
    .map((line) =>
      line
        .slice(1, line.endsWith('|') ? -1 : undefined)
        .split('|')
        .map((cell) => cell.trim()),
    )
    // The header and the separator row.
    .slice(2);
  return rows.map(([feature = '', valid = '', invalid = '']) => ({
    feature,
    valid: [...valid.matchAll(/`([a-z0-9-]+)`/g)].map((m) => m[1] ?? ''),
    invalid: [...invalid.matchAll(/`([a-z0-9-]+)`\s*\(([^)]*)\)/g)].map((m) => ({
      name: m[1] ?? '',
      codes: (m[2] ?? '')
        .split(',')
        .map((c) => c.trim())
        .filter((c) => c !== ''),
    })),
  }));
}

function caseDirectories(root: string): string[] {
  return readdirSync(root).filter((name) => statSync(join(root, name)).isDirectory());
}

const markdown = readFileSync(join(TESTDATA, 'FEATURES.md'), 'utf8');
const rows = parseFeatures(markdown);
const validCases = [...new Set(rows.flatMap((r) => r.valid))].sort();
const invalidCodes = new Map<string, Set<string>>();
for (const row of rows) {
  for (const { name, codes } of row.invalid) {
    const seen = invalidCodes.get(name) ?? new Set<string>();
    for (const code of codes) seen.add(code);
    invalidCodes.set(name, seen);
  }
}

interface CheckReport {
  valid: boolean;
  files: { issues: { code: string; severity: string }[] }[];
}

async function check(dir: string): Promise<{ exitCode: number; report: CheckReport }> {
  const result = await runCli(['check', 'policy.yaml', '--json'], { cwd: dir });
  expect(result.stderr).toBe('');
  return { exitCode: result.exitCode, report: JSON.parse(result.stdout) as CheckReport };
}

describe('testdata/FEATURES.md', () => {
  it('has rows, each with a feature and at least one case', () => {
    expect(rows.length).toBeGreaterThan(20);
    for (const row of rows) {
      expect(row.feature, JSON.stringify(row)).not.toBe('');
      expect(row.valid.length + row.invalid.length, row.feature).toBeGreaterThan(0);
      for (const entry of row.invalid) expect(entry.codes.length, entry.name).toBeGreaterThan(0);
    }
  });

  it('names every case directory, and only existing ones', () => {
    expect(validCases).toEqual(caseDirectories(VALID).sort());
    expect([...invalidCodes.keys()].sort()).toEqual(caseDirectories(INVALID).sort());
  });

  it.each(validCases)('valid case %s passes check with no issue', async (name) => {
    const { exitCode, report } = await check(join(VALID, name));
    expect(report.files[0]?.issues).toEqual([]);
    expect(report.valid).toBe(true);
    expect(exitCode).toBe(0);
  });

  it.each([...invalidCodes.entries()].map(([name, codes]) => [name, [...codes]] as const))(
    'invalid case %s reports %j',
    async (name, codes) => {
      const { exitCode, report } = await check(join(INVALID, name));
      const issues = report.files[0]?.issues ?? [];
      const reported = new Set(issues.map((i) => i.code));
      for (const code of codes) expect(reported, `${name} should report ${code}`).toContain(code);
      const hasError = issues.some((i) => i.severity === 'error');
      expect(exitCode).toBe(hasError ? 1 : 0);
      expect(report.valid).toBe(!hasError);
    },
  );
});
