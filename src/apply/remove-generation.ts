import type { Backend } from '../backends/index.js';
import type { Runner } from '../runner/index.js';
import { acquireHostLock, type StateDir } from '../state/index.js';
import { removeFile } from './apply-generation.js';
import {
  FILES,
  pruneGenerations,
  readGeneration,
  writeGeneration,
  writeJson,
} from './generation.js';

/** Removes what egressguard owns (routing first, then the table) and records that it did. */
export async function removeGeneration(input: {
  backend: Backend;
  runner: Runner;
  state: StateDir;
  table: string;
}): Promise<readonly string[]> {
  const lock = acquireHostLock(input.state, 'remove egressguard state');
  try {
    const applier = input.backend.createApplier({ runner: input.runner, tableName: input.table });
    const { removed } = await applier.remove();
    let current;
    try {
      current = readGeneration(input.state, FILES.applied);
    } catch {
      current = undefined;
    }
    if (current !== undefined) writeGeneration(input.state, FILES.previous, current);
    for (const name of [FILES.applied, FILES.attempt, FILES.confirm, FILES.lockdown]) {
      removeFile(input.state.file(name));
    }
    // Boot-time restore reads this: an explicit removal must not come back as a lockdown.
    writeJson(input.state, 'removed.json', { removedAt: new Date().toISOString(), removed });
    pruneGenerations(input.state);
    return removed;
  } finally {
    lock.release();
  }
}
