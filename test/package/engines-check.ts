import semver from 'semver';

/** One entry of a lockfile's `packages` (package-lock.json v3, or npm's hidden lockfile). */
export interface LockPackage {
  readonly version?: string;
  readonly engines?: { readonly node?: string } | readonly string[];
}

/**
 * The packages of a lockfile (`packages`, keyed by install path) whose `engines.node` leaves out
 * part of the project's own Node range: npm warns EBADENGINE for each on those versions. The
 * project's range must be a subset of every package's range, not merely overlap it (`>=22`
 * overlaps `>=20`, and is exactly the warning a Node 20 user got).
 */
export function enginesExcluding(
  projectRange: string,
  packages: Readonly<Record<string, LockPackage>>,
): string[] {
  const out: string[] = [];
  for (const [path, pkg] of Object.entries(packages)) {
    // The root entry is the project itself; an array is the long-gone `engines: ["node >= 0.4"]`.
    if (path === '' || pkg.engines === undefined || Array.isArray(pkg.engines)) continue;
    const node = (pkg.engines as { readonly node?: string }).node;
    if (node === undefined || node.trim() === '') continue;
    if (!semver.subset(projectRange, node)) {
      out.push(`${path.replace(/^.*node_modules\//, '')}@${pkg.version ?? '?'} needs node ${node}`);
    }
  }
  return out;
}
