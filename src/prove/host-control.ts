import { createInterface } from 'node:readline';
import { execa } from 'execa';
import {
  applyGeneration,
  readStatus,
  type ApplyReport,
  type HostStatus,
  type ResidentLogEntry,
} from '../apply/index.js';
import {
  artifactOfRole,
  compileWithHash,
  type Artifact,
  type Backend,
  type BackendOptions,
  type LiveState,
} from '../backends/index.js';
import { EgressguardError, isEgressguardError } from '../core/index.js';
import { createHostTarget, hostContext } from '../host/index.js';
import type { HostIR } from '../ir/index.js';
import type { Runner } from '../runner/index.js';
import type { StateDir } from '../state/index.js';

/** A policy compiled for the lab's host: what an apply loads. */
export interface CompiledPolicy {
  readonly file: string;
  readonly name: string;
  readonly hash: string;
  readonly artifacts: readonly Artifact[];
  readonly lockdown: string | undefined;
}

/** A run of the egressguard CLI. */
export interface CliRun {
  readonly argv: readonly string[];
  readonly exitCode: number | undefined;
  readonly signal: string | undefined;
  readonly stdout: string;
  readonly stderr: string;
  readonly durationMs: number;
}

/** What egressguard does on the lab's host: the real applier, the real CLI, the real `run`. */
export interface HostControl {
  readonly runner: Runner;
  readonly state: StateDir;
  /** The backend's options (its defaults: the lab's host is a host like any). */
  readonly options: BackendOptions;
  readonly backend: Backend;
  readonly netns: string;
  compile(ir: HostIR, file: string): CompiledPolicy;
  /** applyGeneration in this process, retried while the resident holds the host lock. */
  apply(policy: CompiledPolicy): Promise<ApplyReport>;
  readLive(policy?: CompiledPolicy): Promise<LiveState>;
  status(): Promise<HostStatus>;
  /** Runs the egressguard CLI against the lab's host, with test faults added to the inherited. */
  cli(args: readonly string[], options?: { readonly faults?: string }): Promise<CliRun>;
  /** Starts `egressguard run POLICY` (the resident mode), as the host's service would. */
  startResident(): Promise<void>;
  /** Stops it with SIGTERM (rules and routes stay, as they do when the service stops). */
  stopResident(): Promise<void>;
  readonly isResidentRunning: boolean;
  /** Everything the resident mode logged, across restarts. */
  readonly residentLog: readonly ResidentLogEntry[];
}

const LOCK_RETRY_MS = 25;
const LOCK_RETRY_LIMIT_MS = 10_000;
const RESIDENT_START_TIMEOUT_MS = 15_000;
const CLI_TIMEOUT_MS = 60_000;

/**
 * Controls egressguard on the lab's host namespace. Applies run in this process (the same
 * applyGeneration the CLI runs); `run`, killed applies and `restore` run the built CLI
 * (`selfCommand`) as separate processes with --netns, as a host's services and admins would.
 * Every child gets EGRESSGUARD_ROOTNS_GUARD=1: it can change nothing outside the lab.
 */
export function createHostControl(options: {
  readonly netns: string;
  readonly stateRoot: string;
  readonly selfCommand: readonly string[];
  readonly version: string;
  /** The policy and facts files `run` reads. */
  readonly policyFile: string;
  readonly factsFile: string;
  /** The backend the lab's facts choose. */
  readonly backend: Backend;
}): HostControl {
  const { backend } = options;
  const host = createHostTarget({
    netns: options.netns,
    stateDir: options.stateRoot,
    guard: true,
    backend: backend.name,
  });
  const { runner, state } = host;
  const context = hostContext(host, backend);
  const target = [
    '--netns',
    options.netns,
    '--state-dir',
    options.stateRoot,
    '--target',
    backend.name,
  ];
  const residentLog: ResidentLogEntry[] = [];
  let resident: { kill: (signal: NodeJS.Signals) => void; exited: Promise<unknown> } | undefined;

  const env = (faults?: string): Record<string, string> => {
    const inherited = process.env['EGRESSGUARD_FAULTS'] ?? '';
    return {
      NO_COLOR: '1',
      EGRESSGUARD_ROOTNS_GUARD: '1',
      EGRESSGUARD_FAULTS: [inherited, faults ?? ''].filter((f) => f !== '').join(','),
    };
  };
  const [file = process.execPath, ...prefix] = options.selfCommand;

  return {
    runner,
    state,
    options: host.options,
    backend,
    netns: options.netns,

    compile(ir, policyFile) {
      const { artifacts, hash } = compileWithHash(backend, {
        ir,
        options: host.options,
        versions: { compiler: options.version, agent: options.version },
      });
      return {
        file: policyFile,
        name: ir.name,
        hash,
        artifacts,
        lockdown: artifactOfRole(backend, artifacts, 'lockdown')?.content,
      };
    },

    async apply(policy) {
      const started = performance.now();
      const deadline = started + LOCK_RETRY_LIMIT_MS;
      for (;;) {
        try {
          const attemptStarted = performance.now();
          const report = await applyGeneration({
            ...context,
            policy: policy.name,
            hash: policy.hash,
            artifacts: policy.artifacts,
            ...(policy.lockdown === undefined ? {} : { lockdown: policy.lockdown }),
          });
          // Time lost to attempts refused because another egressguard held the host lock.
          const waited = attemptStarted - started;
          return waited >= 1
            ? { ...report, timings: { 'lock retries': Math.round(waited), ...report.timings } }
            : report;
        } catch (error) {
          // The resident holds the lock while it repairs; an admin's apply would wait too.
          if (!isEgressguardError(error) || error.code !== 'lock-held') throw error;
          if (performance.now() > deadline) throw error;
          await sleep(LOCK_RETRY_MS);
        }
      }
    },

    readLive(policy) {
      return backend.createInspector(context).read(policy?.artifacts);
    },

    status() {
      return readStatus(context);
    },

    async cli(args, cliOptions = {}) {
      const started = performance.now();
      const argv = [...prefix, ...args, ...target];
      const result = await execa(file, argv, {
        env: env(cliOptions.faults),
        reject: false,
        timeout: CLI_TIMEOUT_MS,
      });
      return {
        argv: [file, ...argv],
        exitCode: result.exitCode,
        signal: result.signal,
        stdout: result.stdout,
        stderr: result.stderr,
        durationMs: Math.round(performance.now() - started),
      };
    },

    async startResident() {
      if (resident !== undefined) return;
      const child = execa(
        file,
        [...prefix, 'run', options.policyFile, '--facts', options.factsFile, '--json', ...target],
        { env: env(), reject: false, buffer: false, stdin: 'ignore' },
      );
      const exited = child.then(
        () => undefined,
        () => undefined,
      );
      resident = {
        kill: (signal) => {
          child.kill(signal);
        },
        exited,
      };
      const lines = createInterface({ input: child.stdout, crlfDelay: Infinity });
      let stderr = '';
      child.stderr.on('data', (chunk: Buffer) => {
        stderr = (stderr + chunk.toString()).slice(-2000);
      });
      const watching = new Promise<void>((resolve, reject) => {
        const timer = setTimeout(() => {
          reject(
            new EgressguardError(
              'command-failed',
              `Cannot start the resident mode in the lab: no "watching" after ${RESIDENT_START_TIMEOUT_MS} ms: ${stderr}`,
            ),
          );
        }, RESIDENT_START_TIMEOUT_MS);
        lines.on('line', (line) => {
          try {
            const entry = JSON.parse(line) as ResidentLogEntry;
            residentLog.push(entry);
            if (entry.action === 'watching') {
              clearTimeout(timer);
              resolve();
            }
          } catch {
            // not a log line
          }
        });
        void exited.then(() => {
          clearTimeout(timer);
          reject(
            new EgressguardError(
              'command-failed',
              `Cannot start the resident mode in the lab: \`egressguard run\` exited: ${stderr}`,
            ),
          );
        });
      });
      try {
        await watching;
      } catch (error) {
        await this.stopResident();
        throw error;
      }
    },

    async stopResident() {
      const running = resident;
      if (running === undefined) return;
      resident = undefined;
      running.kill('SIGTERM');
      const timer = setTimeout(() => {
        running.kill('SIGKILL');
      }, 5000);
      await running.exited;
      clearTimeout(timer);
    },

    get isResidentRunning() {
      return resident !== undefined;
    },

    residentLog,
  };
}

function sleep(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms));
}
