import { appendFileSync, existsSync } from 'node:fs';
import { createInterface } from 'node:readline';
import {
  spawn as spawnProcess,
  type ChildProcess,
  type ChildProcessByStdio,
} from 'node:child_process';
import type { Readable } from 'node:stream';
import { EgressguardError } from '../core/index.js';
import {
  classifyCommand,
  classifyModelPrograms,
  MODEL_PROGRAMS_ENV,
  modelProgramsFromEnv,
  targetsNamedNamespace,
  type CommandClassifier,
} from './classify-command.js';
import { Faults } from './faults.js';

/** What a command does to the network namespace it runs in, as the caller declares it. */
export type Effect = 'read' | 'change';

export interface RunOptions {
  readonly effect: Effect;
  readonly input?: string;
  readonly timeoutMs?: number;
  /** Return a non-zero exit instead of throwing. */
  readonly allowFailure?: boolean;
}

export interface CommandResult {
  readonly exitCode: number;
  readonly stdout: string;
  readonly stderr: string;
}

/** One recorded command, for audits against an allow-list. */
export interface Invocation {
  readonly argv: readonly string[];
  readonly netns: string | null;
  readonly effect: Effect;
  readonly exitCode: number | null;
  readonly durationMs: number;
}

/** A long-running command (a monitor, a capture) read line by line. */
export interface RunningCommand {
  readonly lines: AsyncIterable<string>;
  /** Resolves with the exit code when the process ends. */
  readonly exited: Promise<number | null>;
  /** The end of what it wrote to stderr so far, for an error message. */
  stderr(): string;
  /**
   * Asks it to end (SIGTERM) and waits until it has; one that is still there after `graceMs`
   * (default 20 s) is wedged and is killed (SIGKILL), so no caller waits for ever on a helper.
   */
  stop(graceMs?: number): Promise<void>;
}

/** A long-running command whose output is binary (a pcap stream), read chunk by chunk. */
export interface RunningBinaryCommand {
  readonly chunks: AsyncIterable<Uint8Array>;
  /** Resolves with the exit code when the process ends. */
  readonly exited: Promise<number | null>;
  /** The end of what it wrote to stderr so far, for an error message. */
  stderr(): string;
  /**
   * Asks it to end (SIGTERM) and waits until it has; one that is still there after `graceMs`
   * (default 20 s) is wedged and is killed (SIGKILL), so no caller waits for ever on a helper.
   */
  stop(graceMs?: number): Promise<void>;
}

/** The one way egressguard runs external commands. */
export interface Runner {
  readonly netns: string | undefined;
  readonly faults: Faults;
  readonly invocations: readonly Invocation[];
  run(argv: readonly string[], options: RunOptions): Promise<CommandResult>;
  start(argv: readonly string[], options: { readonly effect: Effect }): RunningCommand;
  startBinary(argv: readonly string[], options: { readonly effect: Effect }): RunningBinaryCommand;
  /** The same runner (shared record and faults) acting inside another namespace. */
  inNamespace(netns: string | undefined): Runner;
}

export interface RunnerOptions {
  readonly netns?: string | undefined;
  /** Refuse changes outside a named namespace; defaults to EGRESSGUARD_ROOTNS_GUARD=1. */
  readonly guard?: boolean;
  readonly faults?: Faults;
  /** Append every invocation as a JSON line; defaults to EGRESSGUARD_AUDIT_LOG. */
  readonly auditLog?: string | undefined;
  /** How the backends' own tools read or change state (the registry's classifiers). */
  readonly classifiers?: readonly CommandClassifier[];
  /**
   * Programs (by path) that are models of a tool, a test's stand-ins for the real one, which the
   * guard lets act: they change no firewall here. Defaults to EGRESSGUARD_ROOTNS_GUARD_MODELS.
   */
  readonly models?: readonly string[];
}

const NETNS_NAME = /^[A-Za-z0-9_][A-Za-z0-9_.-]{0,63}$/; // never a leading '-': it would be an option of ip

/** Where `ip netns` keeps a named network namespace, which `nsenter --net=` opens. */
function namespacePath(netns: string): string {
  return `/run/netns/${netns}`;
}

/**
 * Stops with a clear error when a named network namespace does not exist (a typo in --netns, or
 * one deleted while egressguard worked in it), before anything is read or written for it.
 */
export function requireNamespace(netns: string | undefined): void {
  if (netns === undefined || existsSync(namespacePath(netns))) return;
  throw missingNamespace(netns);
}

function missingNamespace(netns: string, cause?: unknown): EgressguardError {
  return new EgressguardError(
    'netns-missing',
    `Cannot act in network namespace "${netns}": it does not exist (no ${namespacePath(netns)})`,
    {
      hint: `create it with \`ip netns add ${netns}\`, or name one that \`ip netns list\` shows`,
      ...(cause === undefined ? {} : { cause }),
    },
  );
}

export function createRunner(options: RunnerOptions = {}): Runner {
  const shared = {
    guard: options.guard ?? process.env['EGRESSGUARD_ROOTNS_GUARD'] === '1',
    faults: options.faults ?? Faults.fromEnv(process.env['EGRESSGUARD_FAULTS']),
    auditLog: options.auditLog ?? process.env['EGRESSGUARD_AUDIT_LOG'],
    classifiers: [
      classifyModelPrograms(
        options.models ?? modelProgramsFromEnv(process.env[MODEL_PROGRAMS_ENV]),
      ),
      ...(options.classifiers ?? []),
    ],
    invocations: [] as Invocation[],
  };
  return makeRunner(shared, options.netns);
}

interface Shared {
  readonly guard: boolean;
  readonly faults: Faults;
  readonly auditLog: string | undefined;
  readonly classifiers: readonly CommandClassifier[];
  readonly invocations: Invocation[];
}

function makeRunner(shared: Shared, netns: string | undefined): Runner {
  if (netns !== undefined && !NETNS_NAME.test(netns)) {
    throw new EgressguardError('usage', `Cannot use network namespace name "${netns}"`, {
      hint: 'use letters, digits, ".", "_" or "-" (not first), at most 64 characters',
    });
  }

  const prepare = (
    argv: readonly string[],
    declared: Effect,
    input?: string,
  ): { full: string[]; effect: Effect } => {
    const found = classifyCommand(argv, input, shared.classifiers);
    const effect: Effect = declared === 'read' && found === 'read' ? 'read' : 'change';
    if (
      shared.guard &&
      netns === undefined &&
      effect === 'change' &&
      found !== 'offline' &&
      !targetsNamedNamespace(argv)
    ) {
      throw new EgressguardError(
        'rootns-guard',
        `Refusing to run "${argv.join(' ')}" in the machine's own network namespace: EGRESSGUARD_ROOTNS_GUARD=1 is set`,
        { hint: 'run it inside a lab namespace (--netns NAME)' },
      );
    }
    const full = netns === undefined ? [...argv] : inNamespace(argv, netns);
    return { full, effect };
  };

  const record = (invocation: Invocation): void => {
    shared.invocations.push(invocation);
    if (shared.auditLog !== undefined) {
      appendFileSync(shared.auditLog, `${JSON.stringify({ ...invocation, pid: process.pid })}\n`);
    }
  };

  const spawn = (
    argv: readonly string[],
    declared: Effect,
  ): { child: ChildProcessByStdio<null, Readable, Readable>; exited: Promise<number | null> } => {
    const { full, effect } = prepare(argv, declared);
    const started = performance.now();
    const [file, ...args] = full;
    const child = spawnProcess(file ?? '', args, { stdio: ['ignore', 'pipe', 'pipe'] });
    const exited = new Promise<number | null>((resolve) => {
      child.once('error', () => {
        resolve(null);
      });
      child.once('close', (code) => {
        resolve(code);
      });
    }).then((exitCode) => {
      record({
        argv,
        netns: netns ?? null,
        effect,
        exitCode,
        durationMs: Math.round(performance.now() - started),
      });
      return exitCode;
    });
    return { child, exited };
  };

  return {
    netns,
    faults: shared.faults,
    invocations: shared.invocations,
    inNamespace: (other) => makeRunner(shared, other),

    async run(argv, options) {
      const { full, effect } = prepare(argv, options.effect, options.input);
      const started = performance.now();
      const result = await runToCompletion(full, options);
      record({
        argv,
        netns: netns ?? null,
        effect,
        exitCode: result.exitCode,
        durationMs: Math.round(performance.now() - started),
      });
      // A command that could not enter its namespace never ran: allowFailure does not cover it.
      if (result.exitCode !== 0 && netns !== undefined && !existsSync(namespacePath(netns))) {
        throw missingNamespace(netns, result);
      }
      if (result.exitCode !== 0 && (!options.allowFailure || result.exitCode === null)) {
        const detail = result.stderr.trim() || result.problem || 'no output';
        throw new EgressguardError(
          'command-failed',
          `Command "${argv.join(' ')}"${netns === undefined ? '' : ` in namespace "${netns}"`} failed${result.exitCode === null ? '' : ` with exit code ${result.exitCode}`}: ${detail}`,
          { cause: result },
        );
      }
      return { exitCode: result.exitCode, stdout: result.stdout, stderr: result.stderr };
    },

    start(argv, options) {
      const { child, exited } = spawn(argv, options.effect);
      const stderr = keepStderrTail(child.stderr);
      return {
        lines: createInterface({ input: child.stdout, crlfDelay: Infinity }),
        exited,
        stderr,
        stop(graceMs?: number) {
          return stopChild(child, exited, graceMs);
        },
      };
    },

    startBinary(argv, options) {
      const { child, exited } = spawn(argv, options.effect);
      return {
        chunks: child.stdout,
        exited,
        stderr: keepStderrTail(child.stderr),
        stop(graceMs?: number) {
          return stopChild(child, exited, graceMs);
        },
      };
    },
  };
}

const STOP_GRACE_MS = 20_000;

/** SIGTERM, then SIGKILL for a process still there after the grace; resolves once it ended. */
async function stopChild(
  child: ChildProcess,
  exited: Promise<number | null>,
  graceMs = STOP_GRACE_MS,
): Promise<void> {
  child.kill('SIGTERM');
  const wedged = setTimeout(() => child.kill('SIGKILL'), graceMs);
  try {
    await exited;
  } finally {
    clearTimeout(wedged);
  }
}

/** Drains a long-running command's stderr as it comes (a full pipe would block it), keeping the end. */
function keepStderrTail(stream: NodeJS.ReadableStream): () => string {
  const KEPT = 64 * 1024;
  let text = '';
  stream.setEncoding('utf8');
  stream.on('data', (chunk: string) => {
    text = (text + chunk).slice(-KEPT);
  });
  return () => text;
}

/**
 * The argv that runs `argv` inside `netns`. `ip` takes the namespace itself (`ip -n NS …`), which
 * saves an exec. Everything else enters the network namespace with `nsenter` (util-linux), which
 * execs the command in place: `ip netns exec` also builds a private mount namespace and remounts
 * /sys, which cost ~240 ms against ~80 ms per call at load 13 here, several times per apply. No
 * command egressguard runs reads /sys or /etc/netns, the only things that setup adds.
 */
function inNamespace(argv: readonly string[], netns: string): string[] {
  const [cmd, ...args] = argv;
  if (cmd === 'ip' && args[0] !== 'netns' && !args.includes('-n') && !args.includes('-netns')) {
    return ['ip', '-n', netns, ...args];
  }
  return ['nsenter', `--net=${namespacePath(netns)}`, '--', ...argv];
}

/**
 * Runs a command to completion with its input, collecting its output. node:child_process, not a
 * wrapper library: this is on the path of every CLI call, and the library alone cost ~70 ms of
 * start-up per process here.
 */
function runToCompletion(
  full: readonly string[],
  options: RunOptions,
): Promise<{ exitCode: number | null; stdout: string; stderr: string; problem: string }> {
  const [file, ...args] = full;
  return new Promise((resolve) => {
    const child = spawnProcess(file ?? '', args, { stdio: ['pipe', 'pipe', 'pipe'] });
    const stdout: Buffer[] = [];
    const stderr: Buffer[] = [];
    let problem = '';
    child.stdout.on('data', (chunk: Buffer) => stdout.push(chunk));
    child.stderr.on('data', (chunk: Buffer) => stderr.push(chunk));
    // A command that exits before reading its input (one that fails at once) closes the pipe early.
    child.stdin.on('error', () => undefined);
    const timer = setTimeout(() => {
      problem = `timed out after ${options.timeoutMs ?? DEFAULT_TIMEOUT_MS} ms`;
      child.kill('SIGKILL');
    }, options.timeoutMs ?? DEFAULT_TIMEOUT_MS);
    child.once('error', (error) => {
      problem =
        (error as NodeJS.ErrnoException).code === 'ENOENT'
          ? `"${file ?? ''}" is not installed`
          : error.message;
    });
    child.once('close', (code, signal) => {
      clearTimeout(timer);
      if (signal !== null && problem === '') problem = `killed by ${signal}`;
      resolve({
        exitCode: problem === '' ? code : null,
        stdout: Buffer.concat(stdout).toString('utf8'),
        stderr: Buffer.concat(stderr).toString('utf8'),
        problem,
      });
    });
    child.stdin.end(options.input ?? '');
  });
}

const DEFAULT_TIMEOUT_MS = 120_000;
