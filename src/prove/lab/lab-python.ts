import type { Runner } from '../../runner/index.js';

let resolving: Promise<string> | undefined;
let resolved: string | undefined;

/**
 * The Python interpreter the lab's scripts run with: `python3` on PATH, resolved once to the
 * interpreter itself. A proof starts hundreds of short scripts, and a wrapper on PATH (pyenv's
 * shims are shell scripts that fork several processes per start) made each start take seconds on
 * a loaded machine, long enough for an observer's positive control to time out.
 */
export function labPython(runner: Runner): Promise<string> {
  resolving ??= runner
    .run(['python3', '-c', 'import sys; print(sys.executable)'], {
      effect: 'read',
      allowFailure: true,
    })
    .then((r) =>
      r.exitCode === 0 && r.stdout.trim().startsWith('/') ? r.stdout.trim() : 'python3',
    )
    .catch(() => 'python3')
    .then((path) => (resolved = path));
  return resolving;
}

/** The interpreter labPython resolved, or `python3` before it has (for synchronous starts). */
export function resolvedLabPython(): string {
  return resolved ?? 'python3';
}
