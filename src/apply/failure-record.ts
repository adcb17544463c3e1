import type { StateDir } from '../state/index.js';
import { FILES, removeFile, writeJson } from './generation.js';

/**
 * The last thing that did not go as asked on this host, for `status`: an apply that failed (the
 * re-converge LaunchDaemon's output goes to a log nobody reads), or a boot that loaded the
 * class lockdown instead of the applied generation. The next apply that goes in clears it.
 */
export interface FailureRecord {
  readonly operation: 'apply' | 'restore';
  readonly at: string;
  readonly message: string;
  readonly code: string | null;
}

export function recordFailure(
  state: StateDir,
  failure: Pick<FailureRecord, 'operation' | 'message'> & { readonly code?: string | null },
): void {
  writeJson(state, FILES.failure, {
    operation: failure.operation,
    at: new Date().toISOString(),
    message: failure.message,
    code: failure.code ?? null,
  } satisfies FailureRecord);
}

/** The recorded failure; an unreadable record is reported as what it is, not dropped. */
export function readFailure(state: StateDir): FailureRecord | null {
  const text = state.read(FILES.failure);
  if (text === undefined) return null;
  try {
    const parsed = JSON.parse(text) as Partial<FailureRecord>;
    if (typeof parsed.message === 'string' && typeof parsed.at === 'string') {
      return {
        operation: parsed.operation === 'restore' ? 'restore' : 'apply',
        at: parsed.at,
        message: parsed.message,
        code: parsed.code ?? null,
      };
    }
  } catch {
    // Below.
  }
  return {
    operation: 'apply',
    at: 'unknown',
    message: `an unreadable failure record at ${state.file(FILES.failure)}`,
    code: null,
  };
}

/** Forgets the failure (of `operation` only, when given): what it said no longer holds. */
export function clearFailure(state: StateDir, operation?: FailureRecord['operation']): void {
  if (operation !== undefined && readFailure(state)?.operation !== operation) return;
  removeFile(state.file(FILES.failure));
}
