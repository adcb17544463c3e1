import { readFileSync } from 'node:fs';

/**
 * Who a process is, across pid reuse and reboots: a bare pid is not enough, since after a crash
 * and a reboot the pid in a state file often belongs to some other process.
 */
export interface ProcessIdentity {
  readonly pid: number;
  /** Field 22 of /proc/PID/stat (start time in clock ticks since boot); null where unknown. */
  readonly start: string | null;
  /** /proc/sys/kernel/random/boot_id; null where unknown. */
  readonly boot: string | null;
}

let bootId: string | null | undefined;

/** This boot's id, read once. */
export function currentBootId(): string | null {
  bootId ??= readTrimmed('/proc/sys/kernel/random/boot_id');
  return bootId;
}

/** When `pid` started (clock ticks since boot), or null when it is gone or /proc is absent. */
export function processStartTime(pid: number): string | null {
  const stat = readTrimmed(`/proc/${pid}/stat`);
  if (stat === null) return null;
  // The command name (field 2) may hold spaces and parentheses: count fields after its last ')'.
  return stat.slice(stat.lastIndexOf(')') + 2).split(' ')[19] ?? null;
}

/** This process. */
export function ownIdentity(): ProcessIdentity {
  return identityOf(process.pid);
}

/** A running process, named so that a later process with the same pid is not taken for it. */
export function identityOf(pid: number): ProcessIdentity {
  return { pid, start: processStartTime(pid), boot: currentBootId() };
}

/**
 * Whether the process a state file names still runs: same boot, pid alive, same start time.
 * Fields a file does not record (written by an older egressguard) are not compared.
 */
export function isProcessAlive(owner: {
  readonly pid: number;
  readonly start?: string | null | undefined;
  readonly boot?: string | null | undefined;
}): boolean {
  if (!Number.isInteger(owner.pid) || owner.pid <= 0) return false;
  const boot = currentBootId();
  if (owner.boot != null && boot !== null && owner.boot !== boot) return false;
  try {
    process.kill(owner.pid, 0);
  } catch (error) {
    // EPERM: it exists, owned by another user.
    if ((error as NodeJS.ErrnoException).code !== 'EPERM') return false;
  }
  if (owner.start == null) return true;
  const start = processStartTime(owner.pid);
  return start === null || start === owner.start;
}

/** When this machine booted, in ms since the epoch (the `btime` of /proc/stat), or null. */
export function bootTimeMs(): number | null {
  const stat = readTrimmed('/proc/stat');
  const match = stat === null ? null : /^btime (\d+)$/m.exec(stat);
  return match?.[1] === undefined ? null : Number(match[1]) * 1000;
}

function readTrimmed(path: string): string | null {
  try {
    return readFileSync(path, 'utf8').trim();
  } catch {
    return null;
  }
}
