import type { Backend } from '../backends/index.js';
import { EgressguardError } from '../core/index.js';
import type { Runner } from '../runner/index.js';
import { acquireHostLock, type StateDir } from '../state/index.js';
import {
  FILES,
  pruneGenerations,
  readGeneration,
  writeGeneration,
  type Generation,
} from './generation.js';

export type RestoreOutcome =
  | { readonly kind: 'restored'; readonly generation: number; readonly deferred: readonly string[] }
  | { readonly kind: 'lockdown'; readonly reason: string }
  | { readonly kind: 'nothing'; readonly reason: string };

/**
 * Boot: load the last applied generation (it must work with the tunnel absent: the rule and the
 * blackhole go in, the tunnel route waits). With the state missing or corrupt, load the class
 * lockdown instead: fail closed.
 */
export async function restoreGeneration(input: {
  backend: Backend;
  runner: Runner;
  state: StateDir;
  table: string;
  /** Restore this file instead of the applied generation (`restore --previous`). */
  from?: string;
}): Promise<RestoreOutcome> {
  const lock = acquireHostLock(input.state, 'restore the last applied state');
  try {
    if (
      input.from === undefined &&
      input.state.read(FILES.removed) !== undefined &&
      input.state.read(FILES.applied) === undefined
    ) {
      return { kind: 'nothing', reason: 'egressguard was removed explicitly' };
    }
    let generation: Generation | undefined;
    let problem: string;
    try {
      generation = readGeneration(input.state, input.from ?? FILES.applied);
      problem = `no state at ${input.state.file(input.from ?? FILES.applied)}`;
    } catch (error) {
      problem = (error as Error).message;
    }
    if (generation !== undefined) {
      const applier = input.backend.createApplier({
        runner: input.runner,
        tableName: generation.table,
      });
      const { deferred } = await applier.apply(generation.artifacts, { previous: undefined });
      if (input.from !== undefined) {
        // A rollback: the generation restored is the applied one now, or `status` would call the
        // host Drifted and `run` or the next boot would bring back the generation just reverted.
        const replaced = readCurrent(input.state);
        writeGeneration(input.state, FILES.applied, generation);
        if (replaced !== undefined) writeGeneration(input.state, FILES.previous, replaced);
        pruneGenerations(input.state);
      }
      return { kind: 'restored', generation: generation.number, deferred };
    }
    const lockdown = input.state.read(FILES.lockdown);
    if (lockdown === undefined) {
      throw new EgressguardError(
        'state-corrupt',
        `Cannot restore: ${problem}, and no class lockdown was saved at ${input.state.file(FILES.lockdown)}`,
        { hint: 'apply a policy; until then no class traffic is filtered by egressguard' },
      );
    }
    await input.backend
      .createApplier({ runner: input.runner, tableName: input.table })
      .lockdown(lockdown);
    return { kind: 'lockdown', reason: problem };
  } finally {
    lock.release();
  }
}

function readCurrent(state: StateDir): Generation | undefined {
  try {
    return readGeneration(state, FILES.applied);
  } catch {
    return undefined;
  }
}
