import { existsSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

let root: string | undefined;

/**
 * A path inside the installed package (package.json, bin/, scripts/lab/), found by walking up
 * from this module: the same from src/ in tests, from dist/ and from the bundle in dist/bundle/,
 * where every module shares one directory.
 */
export function packagePath(...parts: string[]): string {
  if (root === undefined) {
    let dir = dirname(fileURLToPath(import.meta.url));
    while (!existsSync(join(dir, 'package.json'))) {
      const up = dirname(dir);
      if (up === dir) {
        throw new Error(
          `Cannot find the egressguard package above ${fileURLToPath(import.meta.url)}`,
        );
      }
      dir = up;
    }
    root = dir;
  }
  return join(root, ...parts);
}
