import { createHash } from 'node:crypto';
import { readFileSync, readdirSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { packagePath } from '../../core/index.js';
import { SCHEMA_FILES, getSchemaValidator } from './cilium-schemas.js';
import { SUPPORTED_CILIUM_VERSIONS, parseCiliumVersion } from './cilium-version.js';

/** The `file` → sha256 rows of a SOURCES.md table. */
function pinnedHashes(folder: string): Map<string, string> {
  const text = readFileSync(packagePath('schema', folder, 'SOURCES.md'), 'utf8');
  const rows = new Map<string, string>();
  for (const line of text.split('\n')) {
    const file = /^\| `([^`]+\.json)`/.exec(line)?.[1];
    const hash = /`([0-9a-f]{64})`/.exec(line)?.[1];
    if (file !== undefined && hash !== undefined) rows.set(file, hash);
  }
  return rows;
}

describe('pinned schemas', () => {
  for (const folder of ['cilium', 'chainsaw']) {
    it(`schema/${folder}: every JSON file is listed in SOURCES.md with its sha256`, () => {
      const hashes = pinnedHashes(folder);
      const files = readdirSync(packagePath('schema', folder)).filter((f) => f.endsWith('.json'));
      expect(files.length).toBeGreaterThan(0);
      expect([...hashes.keys()].sort()).toEqual(files.sort());
      for (const file of files) {
        const actual = createHash('sha256')
          .update(readFileSync(packagePath('schema', folder, file)))
          .digest('hex');
        expect(actual, file).toBe(hashes.get(file));
      }
    });
  }

  it('every CRD compiles for every supported Cilium release', () => {
    for (const text of SUPPORTED_CILIUM_VERSIONS) {
      const version = parseCiliumVersion(text);
      if (version === undefined) throw new Error(`Unparsable supported version ${text}`);
      for (const kind of Object.keys(SCHEMA_FILES) as (keyof typeof SCHEMA_FILES)[]) {
        expect(typeof getSchemaValidator(kind, version)).toBe('function');
      }
    }
  });
});
