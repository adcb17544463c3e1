import { randomBytes } from 'node:crypto';
import { mkdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import type { Runner } from '../../runner/index.js';

/** Where labs record their owner: one `<run id>.json` per lab. */
export const DEFAULT_LAB_RUN_DIR = '/run/egressguard/labs';

const PREFIX = 'eglab-';
// eglab-<owner pid, base 36>-<4 hex>-<node>: the owner is readable from the name alone, so a lab
// whose marker lives in another run directory is still never reaped while its owner runs.
const NAMESPACE_NAME = /^eglab-([0-9a-z]{1,8})-([0-9a-f]{4})-([a-z][a-z0-9-]*)$/;

/** Who created a lab, written before its first namespace exists. */
export interface LabMarker {
  readonly runId: string;
  readonly pid: number;
  /** The owner's start time in clock ticks since boot (/proc/PID/stat field 22): pids are reused. */
  readonly pidStart: string | undefined;
  readonly namespaces: readonly string[];
  readonly createdAt: string;
}

/** A fresh run id owned by this process. */
export function createRunId(): string {
  return `${process.pid.toString(36)}-${randomBytes(2).toString('hex')}`;
}

export function namespaceName(runId: string, node: string): string {
  return `${PREFIX}${runId}-${node}`;
}

/** The run id and owner pid a lab namespace name carries, or undefined if it is not a lab's. */
export function parseNamespaceName(
  name: string,
): { runId: string; pid: number; node: string } | undefined {
  const match = NAMESPACE_NAME.exec(name);
  if (match?.[1] === undefined || match[2] === undefined || match[3] === undefined)
    return undefined;
  return { runId: `${match[1]}-${match[2]}`, pid: parseInt(match[1], 36), node: match[3] };
}

export function isLabNamespace(name: string): boolean {
  return name.startsWith(PREFIX);
}

export function writeLabMarker(runDir: string, marker: LabMarker): void {
  mkdirSync(runDir, { recursive: true, mode: 0o700 });
  writeFileSync(join(runDir, `${marker.runId}.json`), `${JSON.stringify(marker)}\n`, {
    mode: 0o600,
  });
}

export function readLabMarker(runDir: string, runId: string): LabMarker | undefined {
  try {
    const parsed = JSON.parse(readFileSync(join(runDir, `${runId}.json`), 'utf8')) as Partial<
      Record<keyof LabMarker, unknown>
    >;
    if (typeof parsed.pid !== 'number') return undefined;
    return {
      runId,
      pid: parsed.pid,
      pidStart: typeof parsed.pidStart === 'string' ? parsed.pidStart : undefined,
      namespaces: Array.isArray(parsed.namespaces) ? parsed.namespaces.map(String) : [],
      createdAt: String(parsed.createdAt),
    };
  } catch {
    return undefined; // missing or torn: the name still carries the owner pid
  }
}

export function removeLabMarker(runDir: string, runId: string): void {
  rmSync(join(runDir, `${runId}.json`), { force: true });
}

/** This process's start time, as recorded in markers. */
export function ownStartTime(): string | undefined {
  return processStartTime(process.pid);
}

/** Whether a lab's owner still runs: its pid exists and, when recorded, started at that time. */
export function isOwnerAlive(pid: number, pidStart: string | undefined): boolean {
  try {
    process.kill(pid, 0);
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code !== 'EPERM') return false;
  }
  return pidStart === undefined || processStartTime(pid) === pidStart;
}

function processStartTime(pid: number): string | undefined {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    // The command name (field 2) may hold spaces and parentheses: count fields after its ')'.
    return stat.slice(stat.lastIndexOf(')') + 2).split(' ')[19];
  } catch {
    return undefined;
  }
}

/** Names of every network namespace on the machine (`ip netns list`). */
export async function listNamespaces(runner: Runner): Promise<string[]> {
  const { stdout } = await runner.run(['ip', 'netns', 'list'], { effect: 'read' });
  return stdout
    .split('\n')
    .map((line) => line.trim().split(' ')[0] ?? '')
    .filter((name) => name !== '');
}

/**
 * Ends every process inside a lab namespace (a capture, a server a test left running): deleting
 * a namespace only unmounts its name, and a process inside keeps it and its links alive.
 */
export async function killProcessesIn(runner: Runner, ns: string): Promise<number[]> {
  const { stdout } = await runner.run(['ip', 'netns', 'pids', ns], {
    effect: 'read',
    allowFailure: true,
  });
  const pids = stdout
    .split('\n')
    .filter((line) => /^\d+$/.test(line.trim()))
    .map(Number)
    .filter((pid) => pid !== process.pid);
  for (const pid of pids) {
    try {
      process.kill(pid, 'SIGKILL');
    } catch {
      // Ended meanwhile.
    }
  }
  return pids;
}
