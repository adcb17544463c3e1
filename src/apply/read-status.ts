import { type Backend, type BackendOptions, type LiveState } from '../backends/index.js';
import type { Runner } from '../runner/index.js';
import { isProcessAlive, type StateDir } from '../state/index.js';
import { readPendingConfirm, type PendingConfirm } from './confirm-timer.js';
import { readFailure, type FailureRecord } from './failure-record.js';
import { describePending, describeRevert, readRevert, type RevertRecord } from './revert-record.js';
import { FILES, readAttempt, readGeneration, type Attempt, type Generation } from './generation.js';

/** The one-word summary `status` leads with. */
export type Condition =
  'InSync' | 'Drifted' | 'PartiallyApplied' | 'Interrupted' | 'NotApplied' | 'StateCorrupt';

export interface HostStatus {
  readonly condition: Condition;
  readonly reasons: readonly string[];
  readonly desiredHash: string | null;
  readonly appliedHash: string | null;
  readonly liveHash: string | null;
  readonly attempt: Attempt | null;
  readonly generation: number | null;
  readonly appliedAt: string | null;
  readonly live: LiveState;
  /**
   * The last apply that failed, or a boot that loaded the lockdown, since an apply last went in
   * (the re-converge LaunchDaemon's failures land here). It does not change `condition`, which
   * compares live state with the applied generation, nor `status`'s exit code.
   */
  readonly failure: FailureRecord | null;
  /** A generation applied with --confirm-within, not confirmed yet: its deadline. */
  readonly pendingConfirm: PendingConfirm | null;
  /** The last generation reverted because it was not confirmed in time, until an apply goes in. */
  readonly revert: RevertRecord | null;
}

/** Compares what was applied with what is live, and says why they differ. */
export async function readStatus(input: {
  backend: Backend;
  runner: Runner;
  state: StateDir;
  options: BackendOptions;
  desiredHash?: string | undefined;
}): Promise<HostStatus> {
  let applied: Generation | undefined;
  let corrupt: string | undefined;
  try {
    applied = readGeneration(input.state, FILES.applied);
  } catch (error) {
    corrupt = (error as Error).message;
  }
  const attempt = readAttempt(input.state);
  const inspector = input.backend.createInspector({ runner: input.runner, options: input.options });
  const live = await inspector.read(
    applied?.artifacts,
    applied?.tunnels === undefined ? {} : { tunnels: applied.tunnels },
  );
  const failure = readFailure(input.state);
  const reasons: string[] = [];
  let condition: Condition;
  if (corrupt !== undefined) {
    condition = 'StateCorrupt';
    reasons.push(corrupt);
  } else if (attempt?.outcome === 'partially-applied') {
    condition = 'PartiallyApplied';
    reasons.push(attempt.error ?? `the apply of ${attempt.hash} stopped after the firewall commit`);
  } else if (attempt !== undefined && !isProcessAlive(attempt)) {
    condition = 'Interrupted';
    reasons.push(
      `an apply of ${attempt.hash.slice(0, 12)} started ${attempt.startedAt} did not finish; live hash is ${live.hash?.slice(0, 12) ?? 'none'}`,
    );
  } else if (applied === undefined) {
    condition = 'NotApplied';
    if (live.present)
      reasons.push('a table with our name is live, but this state directory never applied it');
  } else {
    if (!live.present) reasons.push(`${input.backend.describeScope(input.options)} is gone`);
    else if (live.hash !== applied.hash)
      reasons.push(
        `live hash ${live.hash?.slice(0, 12) ?? 'none'} differs from applied ${applied.hash.slice(0, 12)}`,
      );
    else if (live.fingerprint !== applied.fingerprint)
      reasons.push('the table was edited since it was applied');
    const waiting = live.missing.filter((m) => m.waitingFor !== null);
    const later = live.missing.filter((m) => m.waitingFor === null && m.until !== undefined);
    const missing = live.missing.filter((m) => m.waitingFor === null && m.until === undefined);
    if (missing.length > 0) reasons.push(`missing: ${missing.map((m) => m.what).join('; ')}`);
    if (live.unexpected.length > 0) {
      reasons.push(`unexpected: ${live.unexpected.map((m) => m.what).join('; ')}`);
    }
    // The live state is what was applied, but the tunnel it names is no longer the policy's.
    reasons.push(...movedTunnels(live));
    condition = reasons.length === 0 ? 'InSync' : 'Drifted';
    for (const tunnel of new Set(waiting.map((m) => m.waitingFor))) {
      const what = waiting.filter((m) => m.waitingFor === tunnel).map((m) => m.what);
      reasons.push(`waiting for tunnel ${tunnel}: ${what.join('; ')}`);
    }
    for (const m of later) reasons.push(`waiting for ${m.until ?? ''}: ${m.what}`);
  }
  if (failure !== null)
    reasons.push(`the last ${failure.operation} (${failure.at}): ${failure.message}`);
  let pendingConfirm: PendingConfirm | null = null;
  try {
    pendingConfirm = readPendingConfirm(input.state) ?? null;
  } catch (error) {
    reasons.push((error as Error).message);
  }
  if (pendingConfirm !== null) reasons.push(describePending(pendingConfirm, new Date()));
  const revert = readRevert(input.state);
  if (revert !== null) reasons.push(describeRevert(revert));
  return {
    condition,
    reasons,
    desiredHash: input.desiredHash ?? null,
    appliedHash: applied?.hash ?? null,
    liveHash: live.hash,
    attempt: attempt ?? null,
    generation: applied?.number ?? null,
    appliedAt: applied?.appliedAt ?? null,
    live,
    failure,
    pendingConfirm,
    revert,
  };
}

/**
 * Tunnels found by `match` that are elsewhere now: on another interface (a renumbered utun), or
 * nowhere while the interface the live state names exists (another VPN took its number). One
 * absent and matched nowhere is a tunnel that is down: the kill switch holds, nothing moved.
 */
function movedTunnels(live: LiveState): string[] {
  return live.tunnels.flatMap((t) => {
    if (t.matchesNow === undefined || t.matchesNow === t.name) return [];
    const name = t.declared ?? t.name;
    if (t.matchesNow !== null) {
      return [`tunnel ${name} is on "${t.matchesNow}" now, but the live state names "${t.name}"`];
    }
    if (t.state === 'absent') return [];
    return [
      `tunnel ${name} matches no interface now, but the live state names "${t.name}", an interface that is not the tunnel`,
    ];
  });
}
