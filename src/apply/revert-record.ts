import type { LiveProblem } from '../backends/index.js';
import type { StateDir } from '../state/index.js';
import type { PendingConfirm } from './confirm-timer.js';
import { FILES, removeFile, writeJson } from './generation.js';

/** What the revert of an unconfirmed generation did. */
export type RevertOutcome =
  | {
      readonly kind: 'reverted';
      readonly generation: number;
      readonly restored: number;
      readonly deferred: readonly LiveProblem[];
    }
  | { readonly kind: 'removed'; readonly generation: number; readonly removed: readonly string[] }
  | { readonly kind: 'lockdown'; readonly generation: number; readonly reason: string }
  | { readonly kind: 'nothing'; readonly generation: number; readonly reason: string };

/**
 * The last generation applied with `--confirm-within` that was reverted because nobody confirmed
 * it in time, for `status` (it would otherwise say only what is live now: `NotApplied` after the
 * revert of a first apply). The next apply that goes in clears it.
 */
export interface RevertRecord {
  readonly generation: number;
  readonly deadline: string;
  readonly at: string;
  /** What is live after it: the generation before, nothing (it was the first), or the lockdown. */
  readonly outcome: 'reverted' | 'removed' | 'lockdown';
  readonly restored: number | null;
  /** Why the lockdown was loaded instead of the generation before. */
  readonly reason: string | null;
}

export function recordRevert(
  state: StateDir,
  pending: PendingConfirm,
  outcome: RevertOutcome,
): void {
  if (outcome.kind === 'nothing') return;
  writeJson(state, FILES.reverted, {
    generation: pending.generation,
    deadline: pending.deadline,
    at: new Date().toISOString(),
    outcome: outcome.kind,
    restored: outcome.kind === 'reverted' ? outcome.restored : null,
    reason: outcome.kind === 'lockdown' ? outcome.reason : null,
  } satisfies RevertRecord);
}

/** The record, or null: none, or one that cannot be read (it only informs; status goes on). */
export function readRevert(state: StateDir): RevertRecord | null {
  const text = state.read(FILES.reverted);
  if (text === undefined) return null;
  try {
    const parsed = JSON.parse(text) as Partial<RevertRecord>;
    return typeof parsed.generation === 'number' && typeof parsed.at === 'string'
      ? (parsed as RevertRecord)
      : null;
  } catch {
    return null;
  }
}

export function clearRevert(state: StateDir): void {
  removeFile(state.file(FILES.reverted));
}

/** `reverted at T: not confirmed …`, for status. */
export function describeRevert(record: RevertRecord): string {
  const after =
    record.outcome === 'reverted'
      ? `generation ${record.restored ?? '?'}, live before it, is applied again`
      : record.outcome === 'removed'
        ? 'it was the first, so what it applied was removed'
        : `the class lockdown is loaded (${record.reason ?? 'the generation before could not be'})`;
  return `reverted at ${record.at}: not confirmed: generation ${record.generation} had to be confirmed by ${record.deadline}; ${after}`;
}

/** `awaiting confirmation: …`, for status: the deadline, and what happens at it. */
export function describePending(pending: PendingConfirm, now: Date): string {
  const left = Math.round((Date.parse(pending.deadline) - now.getTime()) / 1000);
  const when = left >= 0 ? `in ${left} s` : `${-left} s ago: the revert is due`;
  const back =
    pending.previous === null
      ? 'removes what it applied (it was the first)'
      : pending.previous === undefined
        ? 'goes back to the generation before'
        : `goes back to generation ${pending.previous}`;
  return `awaiting confirmation: generation ${pending.generation} ${back} at ${pending.deadline} (${when}) unless \`egressguard confirm\` runs first`;
}
