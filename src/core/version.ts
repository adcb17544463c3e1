import { readFileSync } from 'node:fs';
import { packagePath } from './package-path.js';

/** The package version, read once from package.json. */
export const VERSION: string = (
  JSON.parse(readFileSync(packagePath('package.json'), 'utf8')) as {
    version: string;
  }
).version;

/** Where the CLI bundle came from: written by scripts/bundle.mjs beside the bundle. */
export interface BuildInfo {
  /** The git commit it was built from; undefined when built outside a git checkout. */
  readonly commit: string | undefined;
  /** Whether tracked files differed from that commit when it was built. */
  readonly modified: boolean;
}

/** The build's record, or an unknown commit when there is none (run from src/ or dist/). */
export function readBuildInfo(): BuildInfo {
  try {
    const info = JSON.parse(
      readFileSync(packagePath('dist', 'bundle', 'build-info.json'), 'utf8'),
    ) as { commit?: unknown; modified?: unknown };
    return {
      commit: typeof info.commit === 'string' ? info.commit : undefined,
      modified: info.modified === true,
    };
  } catch {
    return { commit: undefined, modified: false };
  }
}
