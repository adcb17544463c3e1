import { spawn } from 'node:child_process';
import { existsSync } from 'node:fs';
import type { Backend, BackendOptions } from '../backends/index.js';
import { EgressguardError } from '../core/index.js';
import type { Runner } from '../runner/index.js';
import {
  acquireHostLockWaiting,
  currentBootId,
  identityOf,
  isProcessAlive,
  type StateDir,
} from '../state/index.js';
import { FILES, readGeneration, removeFile, writeJson } from './generation.js';

/** A revert in progress holds the lock for as long as a load takes. */
const CONFIRM_LOCK_WAIT_MS = 30_000;

/** A revert that happens unless `confirm` runs first. */
export interface PendingConfirm {
  readonly generation: number;
  /** The generation live before it, which a revert restores; null: none (a revert removes). */
  readonly previous?: number | null;
  readonly deadline: string;
  /** The boot the timer runs in: neither kind of timer outlives a reboot. */
  readonly boot?: string | null;
  readonly timer:
    | { readonly kind: 'systemd'; readonly unit: string }
    | {
        /** Kept by the backend's own service manager (a LaunchDaemon): its `confirmTimer`. */
        readonly kind: 'backend';
        readonly backend: string;
        readonly id: string;
        readonly file?: string;
      }
    | {
        readonly kind: 'process';
        readonly pid: number;
        /** Told apart from a later process with the same pid (see ProcessIdentity). */
        readonly start?: string | null;
        readonly boot?: string | null;
      };
}

/** Where a backend's confirm timer keeps its files (a LaunchDaemon's plist), in the state dir. */
const BACKEND_TIMER_DIR = 'confirm-timer';

/**
 * Schedules the revert outside this process: a lost SSH session kills the CLI, which is exactly
 * when the revert must still happen. The backend's own timer when it has one (a LaunchDaemon),
 * else systemd-run where systemd runs, else a detached process.
 */
export async function scheduleRevert(input: {
  runner: Runner;
  state: StateDir;
  /** The backend applying; its `confirmTimer`, when it has one, keeps the timer. */
  backend?: Backend;
  options?: BackendOptions;
  generation: number;
  /** The generation live before `generation`, or null when there was none. */
  previous: number | null;
  seconds: number;
  /** argv that runs `egressguard restore --unconfirmed GEN [--netns X] [--state-dir D]`. */
  command: readonly string[];
}): Promise<PendingConfirm> {
  const deadline = new Date(Date.now() + input.seconds * 1000).toISOString();
  let timer: PendingConfirm['timer'];
  const own = input.backend?.confirmTimer;
  if (input.backend !== undefined && own !== undefined) {
    const still = readPendingFile(input.state)?.pending?.timer;
    const scheduled = await own.schedule({
      runner: input.runner,
      options: input.options ?? {},
      dir: input.state.file(BACKEND_TIMER_DIR),
      generation: input.generation,
      seconds: input.seconds,
      deadline,
      command: input.command,
      keep: still?.kind === 'backend' ? [still] : [],
    });
    timer = { kind: 'backend', backend: input.backend.name, ...scheduled };
  } else if (existsSync('/run/systemd/system')) {
    const unit = `egressguard-revert-${process.pid}-${input.generation}`;
    await input.runner.run(
      [
        'systemd-run',
        `--unit=${unit}`,
        `--on-active=${input.seconds}s`,
        '--collect',
        ...input.command,
      ],
      { effect: 'change' },
    );
    timer = { kind: 'systemd', unit };
  } else {
    const [file, ...args] = input.command;
    const child = spawn(file ?? process.execPath, [...args, '--after', String(input.seconds)], {
      detached: true,
      stdio: 'ignore',
    });
    child.unref();
    if (child.pid === undefined) {
      throw new EgressguardError('apply-failed', 'Cannot start the revert timer process');
    }
    timer = { kind: 'process', ...identityOf(child.pid) };
  }
  const pending: PendingConfirm = {
    generation: input.generation,
    previous: input.previous,
    deadline,
    boot: currentBootId(),
    timer,
  };
  writeJson(input.state, FILES.confirm, pending);
  return pending;
}

/** pending-confirm.json as it is: its text (to put back) and the revert, when readable. */
export interface PendingFile {
  readonly text: string;
  readonly pending: PendingConfirm | undefined;
}

export function readPendingFile(state: StateDir): PendingFile | undefined {
  const text = state.read(FILES.confirm);
  if (text === undefined) return undefined;
  try {
    const parsed = JSON.parse(text) as Partial<PendingConfirm> | null;
    const timer = parsed?.timer as Partial<{
      kind: string;
      unit: unknown;
      pid: unknown;
      backend: unknown;
      id: unknown;
    }> | null;
    const isTimer =
      (timer?.kind === 'systemd' && typeof timer.unit === 'string') ||
      (timer?.kind === 'backend' &&
        typeof timer.backend === 'string' &&
        typeof timer.id === 'string') ||
      (timer?.kind === 'process' && typeof timer.pid === 'number');
    if (!Number.isInteger(parsed?.generation) || !isTimer) return { text, pending: undefined };
    return { text, pending: parsed as PendingConfirm };
  } catch {
    return { text, pending: undefined };
  }
}

/** The pending revert, if any; an unreadable file is corrupt state, not a crash. */
export function readPendingConfirm(state: StateDir): PendingConfirm | undefined {
  const file = readPendingFile(state);
  if (file === undefined || file.pending !== undefined) return file?.pending;
  const path = state.file(FILES.confirm);
  throw new EgressguardError(
    'state-corrupt',
    `Cannot read state "${path}": not a pending confirmation: ${JSON.stringify(file.text.slice(0, 60))}`,
    {
      hint: `delete ${path} to keep the applied generation, or run \`egressguard restore --previous\` to go back`,
    },
  );
}

/**
 * Keeps the applied generation: cancels the timer and forgets the pending revert. Under the host
 * lock, so it cannot interleave with the revert, and only for the generation recorded as applied:
 * one whose apply died before recording it is not there to keep (its timer reverts it).
 */
export async function confirmGeneration(input: {
  runner: Runner;
  state: StateDir;
  /** The target's backend: its `confirmTimer` stops a timer it scheduled. */
  backend?: Backend;
  options?: BackendOptions;
  /** Told once when the lock is found held: what holds it, so a person knows why it waits. */
  onLockWait?: (message: string, timeoutMs: number) => void;
}): Promise<PendingConfirm> {
  const { state } = input;
  const lock = await acquireHostLockWaiting(state, 'confirm the applied generation', {
    timeoutMs: CONFIRM_LOCK_WAIT_MS,
    onWait: (message) => input.onLockWait?.(message, CONFIRM_LOCK_WAIT_MS),
  });
  try {
    const pending = readPendingConfirm(state);
    if (pending === undefined) {
      throw new EgressguardError(
        'usage',
        'Nothing to confirm: no apply is waiting for confirmation',
        {
          hint: 'apply with --confirm-within DURATION first; a reverted apply cannot be confirmed',
        },
      );
    }
    let applied: number | undefined;
    try {
      applied = readGeneration(state, FILES.applied)?.number;
    } catch {
      applied = undefined;
    }
    if (applied !== pending.generation) {
      throw new EgressguardError(
        'usage',
        `Cannot confirm generation ${pending.generation}: it is not the applied generation (${applied === undefined ? 'none is recorded' : `that is ${applied}`}); its apply did not finish`,
        { hint: 'its revert runs at the deadline; run `egressguard status`, then apply again' },
      );
    }
    await cancelRevert({ ...input, pending });
    return pending;
  } finally {
    lock.release();
  }
}

/** Forgets a pending revert and stops its timer (confirm; an apply that failed before its commit). */
export async function cancelRevert(input: {
  runner: Runner;
  state: StateDir;
  pending: PendingConfirm;
  backend?: Backend;
  options?: BackendOptions;
}): Promise<void> {
  const { pending } = input;
  // A timer this command cannot stop (the wrong `--target`) is refused before anything changes:
  // were the file gone, the revert would be forgotten while its timer still runs.
  const stop = timerStopper(input);
  // Then the file goes first: a timer that fires now finds nothing to revert.
  if (readPendingConfirm(input.state)?.generation === pending.generation) {
    removeFile(input.state.file(FILES.confirm));
  }
  await stop();
}

/** What stops the pending revert's timer; a `usage` error when this backend cannot. */
function timerStopper(input: {
  runner: Runner;
  pending: PendingConfirm;
  backend?: Backend;
  options?: BackendOptions;
}): () => Promise<void> {
  const { timer } = input.pending;
  switch (timer.kind) {
    case 'backend': {
      const own = input.backend?.name === timer.backend ? input.backend.confirmTimer : undefined;
      if (own === undefined) {
        throw new EgressguardError(
          'usage',
          `Cannot stop the revert timer "${timer.id}": it was scheduled by backend "${timer.backend}", not by ${input.backend === undefined ? 'this command' : `"${input.backend.name}"`}`,
          {
            hint: `nothing was changed, and it still reverts at its deadline; run \`egressguard confirm --target ${timer.backend}\` to stop it`,
          },
        );
      }
      return () =>
        own.cancel({
          runner: input.runner,
          options: input.options ?? {},
          timer: { id: timer.id, ...(timer.file === undefined ? {} : { file: timer.file }) },
        });
    }
    case 'systemd':
      return async () => {
        await input.runner.run(['systemctl', 'stop', `${timer.unit}.timer`], {
          effect: 'change',
          allowFailure: true,
        });
      };
    case 'process':
      return () => {
        if (isProcessAlive(timer)) {
          try {
            process.kill(timer.pid, 'SIGTERM');
          } catch {
            // Gone meanwhile.
          }
        }
        return Promise.resolve();
      };
  }
}
