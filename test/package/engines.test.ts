import { readFileSync } from 'node:fs';
import semver from 'semver';
import { describe, expect, it } from 'vitest';
import { enginesExcluding, type LockPackage } from './engines-check.js';

const root = new URL('../../', import.meta.url);
const readJson = (name: string): unknown => JSON.parse(readFileSync(new URL(name, root), 'utf8'));

describe('dependencies and the Node versions the project supports', () => {
  const manifest = readJson('package.json') as {
    engines: { node: string };
    dependencies: Record<string, string>;
  };
  const lock = readJson('package-lock.json') as { packages: Record<string, LockPackage> };

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

  // fastify asks for light-my-request ^6.0.0, which npm resolves to the newest 6.x (cookie 2).
  // An `overrides` entry would hold only here: npm ignores a dependency's overrides, so a user's
  // `npm install -g` of the tarball would get cookie 2 again. A direct dependency on a version
  // fastify accepts is what every install dedupes fastify's request onto.
  it('pins light-my-request directly, where fastify finds it in every install', () => {
    expect(manifest.dependencies['light-my-request']).toBe('6.6.0');
    const nested = Object.keys(lock.packages).filter((path) =>
      path.endsWith('/node_modules/light-my-request'),
    );
    expect(nested).toEqual([]);
  });
});
