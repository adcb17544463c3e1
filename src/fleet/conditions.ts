/** The four conditions every host carries (DESIGN.md §6), in the order status shows them. */
export const CONDITION_TYPES = ['Ready', 'Progressing', 'Degraded', 'Stalled'] as const;
export type ConditionType = (typeof CONDITION_TYPES)[number];
export type ConditionStatus = 'True' | 'False' | 'Unknown';

export interface Condition {
  readonly type: ConditionType;
  readonly status: ConditionStatus;
  /** A stable CamelCase word: `Converged`, `ApplyFailed`, `BundleInvalidForHost`… */
  readonly reason: string;
  readonly message: string;
  /** The desired hash this condition was judged against. */
  readonly observedHash: string | null;
  readonly lastTransitionTime: number;
}

/** What the conditions are derived from: the stored view of one host. */
export interface HostConvergence {
  readonly desiredHash: string | null;
  readonly desiredError: { readonly reason: string; readonly message: string } | null;
  readonly appliedHash: string | null;
  readonly liveHash: string | null;
  readonly failureHash: string | null;
  readonly failureCount: number;
  /** `BundleRefused` when the agent could not take the bundle; else the apply failed. */
  readonly failureReason?: string | null;
  readonly nextAttemptAt: number | null;
  readonly lastError: string | null;
  readonly invalidHash: string | null;
  readonly invalidMessage: string | null;
  readonly suspended: boolean;
}

type Derived = Omit<Condition, 'lastTransitionTime'>;

/**
 * Derives the conditions from the host's hashes and failure budget. Nothing here is terminal:
 * Degraded says the agent is retrying, and Stalled is reached only when the bundle can never be
 * valid on this host; both are judged against the desired hash, so a new hash clears them.
 */
export function deriveConditions(host: HostConvergence): Derived[] {
  const observedHash = host.desiredHash;
  const make = (type: ConditionType, status: ConditionStatus, reason: string, message: string) => ({
    type,
    status,
    reason,
    message,
    observedHash,
  });
  const stalledMessage =
    host.desiredError !== null
      ? host.desiredError.message
      : host.desiredHash !== null && host.invalidHash === host.desiredHash
        ? (host.invalidMessage ?? 'the bundle cannot be valid on this host')
        : undefined;
  const stalledReason = host.desiredError?.reason ?? 'BundleInvalidForHost';
  const failing =
    host.desiredHash !== null &&
    host.failureHash === host.desiredHash &&
    host.appliedHash !== host.desiredHash;
  const drift =
    host.appliedHash !== null && host.liveHash !== null && host.liveHash !== host.appliedHash;
  const converged =
    host.desiredHash !== null &&
    host.appliedHash === host.desiredHash &&
    host.liveHash === host.desiredHash;

  const stalled =
    stalledMessage === undefined
      ? make('Stalled', 'False', 'BundleValid', 'the bundle is valid for this host')
      : make('Stalled', 'True', stalledReason, stalledMessage);

  const nextAttempt =
    host.nextAttemptAt === null
      ? ''
      : `; next attempt at ${new Date(host.nextAttemptAt).toISOString()}`;
  const degraded = failing
    ? host.failureReason === 'BundleRefused'
      ? make(
          'Degraded',
          'True',
          'BundleRefused',
          `the agent refused the bundle (attempt ${host.failureCount}): ${host.lastError ?? 'no message'}${nextAttempt}`,
        )
      : make(
          'Degraded',
          'True',
          'ApplyFailed',
          `attempt ${host.failureCount} failed: ${host.lastError ?? 'no message'}${nextAttempt}`,
        )
    : drift
      ? make(
          'Degraded',
          'True',
          'Drift',
          `the live state (${short(host.liveHash)}) differs from the applied one (${short(host.appliedHash)})`,
        )
      : make('Degraded', 'False', 'AsExpected', 'no failed attempt and no drift');

  let progressing: Derived;
  let ready: Derived;
  if (host.desiredHash === null && stalledMessage === undefined) {
    progressing = make(
      'Progressing',
      'False',
      'NoPolicy',
      'no policy has been pushed to this host',
    );
    ready = make('Ready', 'False', 'NoPolicy', 'no policy has been pushed to this host');
  } else if (stalledMessage !== undefined) {
    progressing = make('Progressing', 'False', 'Stalled', stalledMessage);
    ready = make('Ready', 'False', 'Stalled', stalledMessage);
  } else if (converged) {
    progressing = make('Progressing', 'False', 'Converged', `applied ${short(host.desiredHash)}`);
    ready = make('Ready', 'True', 'Converged', `applied and live: ${short(host.desiredHash)}`);
  } else if (host.suspended) {
    progressing = make('Progressing', 'False', 'Suspended', 'suspended by an operator');
    ready = make('Ready', 'False', 'Suspended', 'suspended by an operator');
  } else {
    const reason = failing ? 'Retrying' : drift ? 'RepairingDrift' : 'Applying';
    progressing = make('Progressing', 'True', reason, `converging to ${short(host.desiredHash)}`);
    ready = make(
      'Ready',
      'False',
      reason,
      `applied ${short(host.appliedHash)}, desired ${short(host.desiredHash)}`,
    );
  }
  return [ready, progressing, degraded, stalled];
}

/** Keeps each condition's transition time unless its status changed. */
export function mergeConditions(
  previous: readonly Condition[],
  derived: readonly Derived[],
  now: number,
): Condition[] {
  return derived.map((next) => {
    const before = previous.find((c) => c.type === next.type);
    return {
      ...next,
      lastTransitionTime:
        before !== undefined && before.status === next.status ? before.lastTransitionTime : now,
    };
  });
}

/** The conditions as seen now: an agent silent past its grace makes Ready Unknown. */
export function overlaySilence(
  conditions: readonly Condition[],
  silentSince: number | null,
): Condition[] {
  if (silentSince === null) return [...conditions];
  return conditions.map((c) =>
    c.type === 'Ready'
      ? {
          ...c,
          status: 'Unknown',
          reason: 'AgentSilent',
          message: `no check-in since ${new Date(silentSince).toISOString()}`,
          lastTransitionTime: silentSince,
        }
      : c,
  );
}

export function short(hash: string | null): string {
  return hash === null ? 'nothing' : hash.slice(0, 12);
}
