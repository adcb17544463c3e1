import type { Backend, BackendOptions } from '../backends/index.js';
import type { Runner } from '../runner/index.js';
import { acquireHostLock, type StateDir } from '../state/index.js';
import {
  FILES,
  pruneGenerations,
  readGeneration,
  removeFile,
  writeGeneration,
  writeJson,
} from './generation.js';

interface RemoveInput {
  readonly backend: Backend;
  readonly runner: Runner;
  readonly state: StateDir;
  readonly options: BackendOptions;
}

/** Removes what egressguard owns (routing first, then the table) and records that it did. */
export async function removeGeneration(input: RemoveInput): Promise<readonly string[]> {
  const lock = acquireHostLock(input.state, 'remove egressguard state');
  try {
    return await removeOwned(input);
  } finally {
    lock.release();
  }
}

/**
 * The removal itself, under a lock the caller holds (remove; the revert of a first apply). The
 * applied generation becomes previous, so `restore --previous` can bring it back.
 */
export async function removeOwned(input: RemoveInput): Promise<readonly string[]> {
  const applier = input.backend.createApplier({ runner: input.runner, options: input.options });
  const { removed } = await applier.remove();
  let current;
  try {
    current = readGeneration(input.state, FILES.applied);
  } catch {
    current = undefined;
  }
  if (current !== undefined) writeGeneration(input.state, FILES.previous, current);
  for (const name of [FILES.applied, FILES.attempt, FILES.confirm, FILES.lockdown, FILES.failure]) {
    removeFile(input.state.file(name));
  }
  // Boot-time restore reads this: an explicit removal must not come back as a lockdown.
  writeJson(input.state, FILES.removed, { removedAt: new Date().toISOString(), removed });
  pruneGenerations(input.state);
  return removed;
}
