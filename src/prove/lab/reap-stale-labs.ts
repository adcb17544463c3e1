import { readdirSync } from 'node:fs';
import { createRunner, type Runner } from '../../runner/index.js';
import {
  DEFAULT_LAB_RUN_DIR,
  isLabNamespace,
  isOwnerAlive,
  killProcessesIn,
  listNamespaces,
  parseNamespaceName,
  readLabMarker,
  removeLabMarker,
} from './lab-registry.js';

/** What reapStaleLabs did. */
export interface ReapResult {
  /** Namespaces deleted: their lab's owner is gone. */
  readonly reaped: readonly string[];
  /** Lab namespaces left alone: their owner still runs. */
  readonly kept: readonly string[];
  /** `eglab-` namespaces whose name carries no owner, left alone. */
  readonly unknown: readonly string[];
}

/** Deletes the namespaces of labs whose creating process has died (a SIGKILL, a crash). */
export async function reapStaleLabs(
  options: { readonly runner?: Runner; readonly runDir?: string } = {},
): Promise<ReapResult> {
  const runner = options.runner ?? createRunner({ guard: true });
  const runDir = options.runDir ?? DEFAULT_LAB_RUN_DIR;
  const reaped: string[] = [];
  const kept: string[] = [];
  const unknown: string[] = [];
  const stale = new Set<string>();
  for (const ns of (await listNamespaces(runner)).filter(isLabNamespace)) {
    const parsed = parseNamespaceName(ns);
    if (parsed === undefined) {
      unknown.push(ns);
      continue;
    }
    const marker = readLabMarker(runDir, parsed.runId);
    const isAlive =
      marker === undefined
        ? isOwnerAlive(parsed.pid, undefined)
        : isOwnerAlive(marker.pid, marker.pidStart);
    if (isAlive) {
      kept.push(ns);
    } else {
      stale.add(parsed.runId);
      await killProcessesIn(runner, ns); // orphans of the dead owner, e.g. its captures
      await runner.run(['ip', 'netns', 'delete', ns], { effect: 'change', allowFailure: true });
      reaped.push(ns);
    }
  }
  // Markers of dead owners whose namespaces are all gone (killed between marker and first add).
  for (const file of listMarkerFiles(runDir)) {
    const runId = file.slice(0, -'.json'.length);
    const marker = readLabMarker(runDir, runId);
    if (stale.has(runId) || (marker !== undefined && !isOwnerAlive(marker.pid, marker.pidStart))) {
      removeLabMarker(runDir, runId);
    }
  }
  return { reaped, kept, unknown };
}

function listMarkerFiles(runDir: string): string[] {
  try {
    return readdirSync(runDir).filter((f) => f.endsWith('.json'));
  } catch {
    return [];
  }
}
