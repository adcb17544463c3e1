import { closeSync, openSync, readFileSync, renameSync, rmSync, writeFileSync } from 'node:fs';
import { EgressguardError } from '../../src/core/index.js';
import type { PfctlModelState } from './pfctl-model.js';

/**
 * Persistence of a pfctl MODEL's state (pfctl-model.ts) in one JSON file, so that separate
 * processes (the `pfctl` shim, a test driving packets) act on the same modelled host. Writes are
 * atomic (write, then rename) and every read-modify-write holds an exclusive lock file, so two
 * shims run at once see each other's changes in some order, as two pfctl processes would.
 */

export function readPfctlModelState(path: string): PfctlModelState {
  return readModelStateFile(path, {
    model: 'pfctl model',
    field: 'anchors',
    hint: 'create it with writePfctlModelState, or point EGRESSGUARD_PFCTL_MODEL_STATE at one',
  }) as PfctlModelState;
}

/** Reads a model's version 1 JSON state file; `field` is one every such state has. */
export function readModelStateFile(
  path: string,
  expect: { readonly model: string; readonly field: string; readonly hint: string },
): object {
  let text: string;
  try {
    text = readFileSync(path, 'utf8');
  } catch (error) {
    throw new EgressguardError('io', `Cannot read the ${expect.model} state "${path}"`, {
      cause: error,
      hint: expect.hint,
    });
  }
  let value: unknown;
  try {
    value = JSON.parse(text);
  } catch (error) {
    throw new EgressguardError(
      'state-corrupt',
      `Cannot parse the ${expect.model} state "${path}"`,
      {
        cause: error,
      },
    );
  }
  if (
    typeof value !== 'object' ||
    value === null ||
    (value as { version?: unknown }).version !== 1 ||
    typeof (value as Record<string, unknown>)[expect.field] !== 'object'
  ) {
    throw new EgressguardError(
      'state-corrupt',
      `Cannot use the ${expect.model} state "${path}": not a version 1 model state`,
    );
  }
  return value;
}

export function writePfctlModelState(path: string, state: PfctlModelState): void {
  writeModelStateFile(path, state);
}

/** Writes a model's state atomically (write, then rename). */
export function writeModelStateFile(path: string, state: unknown): void {
  const temporary = `${path}.${process.pid}.tmp`;
  writeFileSync(temporary, `${JSON.stringify(state, null, 1)}\n`);
  renameSync(temporary, path);
}

const LOCK_WAIT_MS = 10_000;
const sleeper = new Int32Array(new SharedArrayBuffer(4));

/** Runs `change` on the state under an exclusive lock, then saves it. */
export function updatePfctlModelState<T>(path: string, change: (state: PfctlModelState) => T): T {
  return updateModelStateFile(path, readPfctlModelState, change);
}

/** Read-modify-write of a model's JSON state file under an exclusive lock (any model's). */
export function updateModelStateFile<S, T>(
  path: string,
  read: (path: string) => S,
  change: (state: S) => T,
): T {
  const lock = `${path}.lock`;
  let waited = 0;
  for (;;) {
    try {
      closeSync(openSync(lock, 'wx'));
      break;
    } catch (error) {
      if ((error as NodeJS.ErrnoException).code !== 'EEXIST') throw error;
      if (waited >= LOCK_WAIT_MS) {
        throw new EgressguardError('lock-held', `Cannot lock the model state "${path}"`, {
          hint: `remove "${lock}" if no model shim is running`,
        });
      }
      Atomics.wait(sleeper, 0, 0, 5);
      waited += 5;
    }
  }
  try {
    const state = read(path);
    const result = change(state);
    writeModelStateFile(path, state);
    return result;
  } finally {
    rmSync(lock, { force: true });
  }
}
