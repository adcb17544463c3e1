import { readFileSync } from 'node:fs';
import semver from 'semver';
import { describe, expect, it } from 'vitest';

interface LockPackage {
  readonly version?: string;
  readonly engines?: { readonly node?: string } | readonly string[];
}

const root = new URL('../../', import.meta.url);
const readJson = (name: string): unknown => JSON.parse(readFileSync(new URL(name, root), 'utf8'));

/**
 * The packages of a lockfile (v3: `packages` keyed by install path) whose `engines.node` leaves
 * out part of the project's own Node range: npm ci warns EBADENGINE for each on those versions.
 * A range the project claims must be a subset of every package's range, not merely overlap it
 * (`>=22` overlaps `>=20`, and is exactly the warning a Node 20 user got).
 */
function enginesExcluding(
  projectRange: string,
  packages: Readonly<Record<string, LockPackage>>,
): string[] {
  const out: string[] = [];
  for (const [path, pkg] of Object.entries(packages)) {
    if (path === '' || pkg.engines === undefined || Array.isArray(pkg.engines)) continue;
    const node = (pkg.engines as { readonly node?: string }).node;
    if (node === undefined || node.trim() === '') continue;
    if (!semver.subset(projectRange, node)) {
      out.push(`${path.replace(/^.*node_modules\//, '')}@${pkg.version ?? '?'} needs node ${node}`);
    }
  }
  return out;
}

describe('dependencies and the Node versions the project supports', () => {
  const manifest = readJson('package.json') as { engines: { node: string } };
  const lock = readJson('package-lock.json') as {
    packages: Record<string, LockPackage>;
  };

  it('declares Node 20 and the next even releases', () => {
    for (const version of ['20.19.0', '22.13.0', '24.0.0']) {
      expect(semver.satisfies(version, manifest.engines.node), version).toBe(true);
    }
    expect(lock.packages['']?.engines).toEqual({ node: manifest.engines.node });
  });

  it('installs no package whose engines.node leaves out part of that range', () => {
    expect(enginesExcluding(manifest.engines.node, lock.packages)).toEqual([]);
  });

  it('would have caught cookie 2, which light-my-request 6.8 brings in and needs Node 22', () => {
    const cookie2 = { 'node_modules/cookie': { version: '2.0.2', engines: { node: '>=22' } } };
    expect(enginesExcluding(manifest.engines.node, cookie2)).toEqual([
      'cookie@2.0.2 needs node >=22',
    ]);
  });
});
