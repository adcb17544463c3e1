import { existsSync, mkdirSync, readdirSync, readFileSync, rmSync, unlinkSync } from 'node:fs';
import { join } from 'node:path';
import { EgressguardError } from '../core/index.js';
import type { Artifact, BackendOptions, BoundTunnel } from '../backends/index.js';
import { isProcessAlive, type StateDir } from '../state/index.js';

/** One applied configuration, as kept in the state directory. */
export interface Generation {
  readonly format: 'egressguard/generation/v1';
  readonly number: number;
  readonly hash: string;
  readonly policy: string;
  readonly backend: string;
  readonly options: BackendOptions;
  readonly appliedAt: string;
  readonly fingerprint: string | null;
  readonly artifacts: readonly Artifact[];
  /** The tunnels it was bound to (absent in generations recorded before they were kept). */
  readonly tunnels?: readonly BoundTunnel[];
}

/** An apply in progress; left behind by a crash, so `status` can tell the truth. */
export interface Attempt {
  readonly hash: string;
  readonly startedAt: string;
  readonly pid: number;
  /** The apply's start time and boot (see ProcessIdentity): a bare pid is reused after a reboot. */
  readonly start?: string | null;
  readonly boot?: string | null;
  readonly outcome: 'in-progress' | 'partially-applied';
  readonly error?: string;
}

export const FILES = {
  applied: 'applied.json',
  previous: 'previous.json',
  attempt: 'attempt.json',
  confirm: 'pending-confirm.json',
  lockdown: 'lockdown',
  /** Written by an explicit removal: boot restore then loads nothing, not the lockdown. */
  removed: 'removed.json',
  /** The last apply that failed, or a boot that fell back to the lockdown (failure-record.ts). */
  failure: 'last-failure.json',
  /** The last generation reverted because it was not confirmed in time (revert-record.ts). */
  reverted: 'last-revert.json',
} as const;

/** On disk: the metadata, with each artifact in a file of its own under generations/. */
interface StoredGeneration extends Omit<Generation, 'artifacts'> {
  readonly artifacts: readonly { readonly name: string; readonly file: string }[];
}

const GENERATIONS = 'generations';

/**
 * Reads a generation. Artifacts are read when first used: `status` needs the small steering spec,
 * not a ruleset of a million prefixes (parsing that as JSON alone cost ~100 ms).
 */
export function readGeneration(state: StateDir, name: string): Generation | undefined {
  const text = state.read(name);
  if (text === undefined) return undefined;
  try {
    const parsed = JSON.parse(text) as Partial<StoredGeneration> & { readonly table?: string };
    const entries = parsed.artifacts;
    // Anything malformed beyond this throws below and is reported as corrupt state too.
    if (parsed.format !== 'egressguard/generation/v1' || entries === undefined) {
      throw new Error('unknown format');
    }
    const artifacts = entries.map((entry) => {
      const path = state.file(entry.file);
      if (!existsSync(path)) throw new Error(`artifact "${entry.name}" is missing at ${path}`);
      return lazyArtifact(entry.name, path);
    });
    // Generations recorded before backends declared options name the owned table alone.
    const options = parsed.options ?? (parsed.table === undefined ? {} : { table: parsed.table });
    return { ...(parsed as StoredGeneration), options, artifacts };
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

/**
 * Records a generation as `name` (applied.json, previous.json). Artifact files are written once
 * per generation and never rewritten. It never prunes: while an operation rewrites its records,
 * a directory none points at yet may be the next one's (a revert swaps applied and previous);
 * each operation calls pruneGenerations once, after its last record.
 */
export function writeGeneration(state: StateDir, name: string, generation: Generation): void {
  const dir = generationDir(generation.number, generation.hash);
  mkdirSync(state.file(dir), { recursive: true, mode: 0o700 });
  const artifacts = generation.artifacts.map((artifact) => {
    const file = `${dir}/${artifact.name}`;
    if (!existsSync(state.file(file))) state.write(file, artifact.content);
    return { name: artifact.name, file };
  });
  const stored: StoredGeneration = { ...generation, artifacts };
  writeJson(state, name, stored);
}

/**
 * Writes the artifact files of generation `number` ahead of its record, while the apply runs (a
 * ruleset of 100k prefixes is megabytes to write and fsync); writeGeneration then finds them.
 * Files of an apply that does not go in are pruned with the next one's.
 */
export async function storeArtifacts(
  state: StateDir,
  number: number,
  hash: string,
  artifacts: readonly Artifact[],
): Promise<void> {
  const dir = generationDir(number, hash);
  mkdirSync(state.file(dir), { recursive: true, mode: 0o700 });
  await Promise.all(
    artifacts.map(async (artifact) => {
      const file = `${dir}/${artifact.name}`;
      if (!existsSync(state.file(file))) await state.writeAsync(file, artifact.content);
    }),
  );
}

function generationDir(number: number, hash: string): string {
  return `${GENERATIONS}/${number}-${hash.slice(0, 16)}`;
}

/** Removes the artifact directories that neither applied.json nor previous.json points at. */
export function pruneGenerations(state: StateDir): void {
  const keep = new Set<string>();
  for (const name of [FILES.applied, FILES.previous]) {
    try {
      const stored = JSON.parse(state.read(name) ?? '{}') as Partial<StoredGeneration>;
      for (const a of stored.artifacts ?? []) keep.add(a.file.split('/')[1] ?? '');
    } catch {
      return; // an unreadable record: keep everything rather than guess
    }
  }
  const root = state.file(GENERATIONS);
  if (!existsSync(root)) return;
  for (const entry of readdirSync(root)) {
    if (!keep.has(entry)) rmSync(join(root, entry), { recursive: true, force: true });
  }
}

function lazyArtifact(name: string, path: string): Artifact {
  let content: string | undefined;
  return {
    name,
    get content(): string {
      content ??= readFileSync(path, 'utf8');
      return content;
    },
  };
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

export function removeFile(path: string): void {
  try {
    unlinkSync(path);
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code !== 'ENOENT') throw error;
  }
}

/**
 * Removes the attempt marker of an apply that is no longer running: once a restore or a revert
 * has loaded a generation, what that apply left is no longer live, and `status` must not say
 * Interrupted or PartiallyApplied for it.
 */
export function clearDeadAttempt(state: StateDir): void {
  const attempt = readAttempt(state);
  if (attempt !== undefined && !isProcessAlive(attempt)) removeFile(state.file(FILES.attempt));
}
