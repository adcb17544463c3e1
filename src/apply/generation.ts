import { EgressguardError } from '../core/index.js';
import type { Artifact } from '../backends/index.js';
import type { StateDir } from '../state/index.js';

/** One applied configuration, as kept in the state directory. */
export interface Generation {
  readonly format: 'egressguard/generation/v1';
  readonly number: number;
  readonly hash: string;
  readonly policy: string;
  readonly backend: string;
  readonly table: string;
  readonly appliedAt: string;
  readonly fingerprint: string | null;
  readonly artifacts: readonly Artifact[];
}

/** An apply in progress; left behind by a crash, so `status` can tell the truth. */
export interface Attempt {
  readonly hash: string;
  readonly startedAt: string;
  readonly pid: number;
  readonly outcome: 'in-progress' | 'partially-applied';
  readonly error?: string;
}

export const FILES = {
  applied: 'applied.json',
  previous: 'previous.json',
  attempt: 'attempt.json',
  confirm: 'pending-confirm.json',
  lockdown: 'lockdown.nft',
} as const;

export function readGeneration(state: StateDir, name: string): Generation | undefined {
  const text = state.read(name);
  if (text === undefined) return undefined;
  try {
    const parsed = JSON.parse(text) as Partial<Generation>;
    if (parsed.format !== 'egressguard/generation/v1' || !Array.isArray(parsed.artifacts)) {
      throw new Error('unknown format');
    }
    return parsed as Generation;
  } catch (error) {
    throw new EgressguardError(
      'state-corrupt',
      `Cannot read state "${state.file(name)}": ${(error as Error).message}`,
      {
        cause: error,
        hint: 'run `egressguard restore` (it loads the class lockdown) and apply again',
      },
    );
  }
}

export function readAttempt(state: StateDir): Attempt | undefined {
  const text = state.read(FILES.attempt);
  if (text === undefined) return undefined;
  try {
    return JSON.parse(text) as Attempt;
  } catch {
    return { hash: 'unknown', startedAt: 'unknown', pid: 0, outcome: 'in-progress' };
  }
}

export function writeJson(state: StateDir, name: string, value: unknown): void {
  state.write(name, `${JSON.stringify(value, null, 2)}\n`);
}
