import { spawn } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { execa } from 'execa';
import type { ProofReport } from '../../../src/prove/index.js';

export const BIN = fileURLToPath(new URL('../../../bin/egressguard.js', import.meta.url));
export const VPN_POLICY = fileURLToPath(
  new URL('../../../testdata/policies/valid/linux-vpn-gateway/policy.yaml', import.meta.url),
);

/** A finished `egressguard prove` run: exit code, output, and the evidence it wrote. */
export interface ProveRun {
  readonly exitCode: number | undefined;
  readonly stdout: string;
  readonly stderr: string;
  readonly report: ProofReport | undefined;
  readonly junit: string | undefined;
  readonly durationMs: number;
}

/** Runs the built CLI's `prove --lab` (`npm run build` first) with the root-namespace guard on. */
export async function runProve(
  args: readonly string[],
  options: {
    readonly faults?: string;
    readonly timeoutMs?: number;
    /** Another policy than the linux-vpn-gateway example. */
    readonly policy?: string;
  } = {},
): Promise<ProveRun> {
  const dir = mkdtempSync(join(tmpdir(), 'egtest-prove-'));
  const json = join(dir, 'proof.json');
  const junit = join(dir, 'proof.xml');
  const started = performance.now();
  try {
    const result = await execa(
      process.execPath,
      [
        BIN,
        'prove',
        options.policy ?? VPN_POLICY,
        '--lab',
        '--json',
        json,
        '--junit',
        junit,
        ...args,
      ],
      {
        env: {
          NO_COLOR: '1',
          EGRESSGUARD_ROOTNS_GUARD: '1',
          EGRESSGUARD_FAULTS: options.faults ?? '',
        },
        reject: false,
        timeout: options.timeoutMs ?? 840_000, // a full prove took 491 s at load 14 on 2 cores
      },
    );
    return {
      exitCode: result.exitCode,
      stdout: result.stdout,
      stderr: result.stderr,
      report: readOptional(json, (t) => JSON.parse(t) as ProofReport),
      junit: readOptional(junit, (t) => t),
      durationMs: Math.round(performance.now() - started),
    };
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

/**
 * Starts `prove --lab --progress` and sends it SIGTERM once a progress line matches `when` and
 * then `ready(pid)` holds (polled: a state of the lab, not a delay a loaded machine can outrun);
 * resolves with its exit code, signal and stderr.
 */
export function interruptProve(
  args: readonly string[],
  options: {
    readonly when: RegExp;
    readonly ready: (pid: number) => Promise<boolean>;
    /** The child's TMPDIR: a directory of the test's own, which no other run writes into. */
    readonly tmpDir?: string;
  },
): Promise<{ pid: number; exitCode: number | null; signal: string | null; stderr: string }> {
  return new Promise((resolve, reject) => {
    const child = spawn(
      process.execPath,
      [BIN, 'prove', VPN_POLICY, '--lab', '--progress', ...args],
      {
        env: {
          ...process.env,
          ...(options.tmpDir === undefined ? {} : { TMPDIR: options.tmpDir }),
          NO_COLOR: '1',
          EGRESSGUARD_ROOTNS_GUARD: '1',
          EGRESSGUARD_FAULTS: '',
        },
        stdio: ['ignore', 'ignore', 'pipe'],
      },
    );
    let stderr = '';
    let sent = false;
    child.stderr.on('data', (chunk: Buffer) => {
      stderr += chunk.toString();
      if (!sent && options.when.test(stderr)) {
        sent = true;
        const poll = async (): Promise<void> => {
          while (child.exitCode === null && !(await options.ready(child.pid ?? -1))) {
            await new Promise((r) => setTimeout(r, 100));
          }
          child.kill('SIGTERM');
        };
        void poll();
      }
    });
    const timer = setTimeout(() => {
      child.kill('SIGKILL');
      reject(new Error(`prove never reached ${options.when.source}: ${stderr}`));
    }, 120_000);
    child.on('exit', (exitCode, signal) => {
      clearTimeout(timer);
      resolve({ pid: child.pid ?? -1, exitCode, signal, stderr });
    });
  });
}

function readOptional<T>(file: string, parse: (text: string) => T): T | undefined {
  try {
    return parse(readFileSync(file, 'utf8'));
  } catch {
    return undefined;
  }
}
