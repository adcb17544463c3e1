import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { dirname, join, relative } from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';

const REPO = fileURLToPath(new URL('../..', import.meta.url));

/** What a user reads: the README, docs/, the feature table, the shipped notes, the examples. */
function userFacingFiles(): string[] {
  const docs = readdirSync(join(REPO, 'docs'))
    .filter((f) => f.endsWith('.md'))
    .map((f) => join(REPO, 'docs', f));
  const examples = readdirSync(join(REPO, 'testdata/policies/valid')).map((c) =>
    join(REPO, 'testdata/policies/valid', c, 'policy.yaml'),
  );
  return [
    join(REPO, 'README.md'),
    join(REPO, 'testdata/FEATURES.md'),
    join(REPO, 'schema/cilium/SOURCES.md'),
    join(REPO, 'schema/chainsaw/SOURCES.md'),
    ...docs,
    ...examples,
  ];
}

/** The anchors GitHub gives a Markdown file's headings: lowercase, punctuation dropped, "-". */
function headingSlugs(file: string): Set<string> {
  if (!file.endsWith('.md')) return new Set();
  return new Set(
    [...readFileSync(file, 'utf8').matchAll(/^#{1,6} (.+)$/gm)].map(([, title = '']) =>
      title
        .toLowerCase()
        .replace(/[^\p{L}\p{N} _-]/gu, '')
        .replace(/ /g, '-'),
    ),
  );
}

// A clone has only the repository: no file outside it may be cited, and the labels of the work
// that made it (issue numbers, session names) mean nothing to a reader.
const FORBIDDEN: readonly [RegExp, string][] = [
  [/\.\.\/shared\/|\/work\//, 'a path outside the repository'],
  [/\b(DESIGN|STYLE|NOTES)\.md\b/, 'a document that is not in the repository'],
  [/\bF93\b/, 'an internal abbreviation (say "FreeBSD 9.3\'s pfctl")'],
  [/\bseed incident\b|\bfleet4\b/i, 'an internal work label'],
  [/\bissue \d+\b/i, 'an issue number (it belongs in a commit message)'],
];

describe('the docs a clone can follow', () => {
  const files = userFacingFiles();

  it.each(files.map((f) => [relative(REPO, f), f]))('%s cites nothing a clone lacks', (_, file) => {
    const found: string[] = [];
    readFileSync(file, 'utf8')
      .split('\n')
      .forEach((line, i) => {
        for (const [pattern, what] of FORBIDDEN) {
          if (pattern.test(line)) found.push(`line ${i + 1}: ${what}: ${line.trim()}`);
        }
      });
    expect(found).toEqual([]);
  });

  it.each(files.filter((f) => f.endsWith('.md')).map((f) => [relative(REPO, f), f]))(
    '%s links only to files and headings that exist',
    (_, file) => {
      const text = readFileSync(file, 'utf8');
      const broken = [...text.matchAll(/\]\(([^)\s#]+)(?:#([^)\s]*))?\)/g)]
        .filter(([, target = '']) => !/^[a-z]+:/.test(target))
        .filter(([, target = '', anchor]) => {
          const path = join(dirname(file), target);
          if (!existsSync(path)) return true;
          return anchor !== undefined && !headingSlugs(path).has(anchor);
        })
        .map(([link]) => link);
      expect(broken).toEqual([]);
    },
  );
});
