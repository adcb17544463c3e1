/** Stable codes of runtime failures; policy problems are data (see policy/issue.ts), not errors. */
export type ErrorCode =
  | 'usage'
  | 'policy-invalid'
  | 'io'
  | 'facts'
  | 'command-failed'
  | 'rootns-guard'
  /** A named network namespace (--netns) does not exist, or was deleted mid-work. */
  | 'netns-missing'
  | 'fault-injected'
  | 'lock-held'
  | 'state-corrupt'
  | 'apply-failed'
  | 'partially-applied'
  /** A cluster's API refused or failed a call (after its retries). */
  | 'cluster-api'
  | 'unsupported';

/** The one runtime error class: a stable `code`, a sentence-case message, and the `cause`. */
export class EgressguardError extends Error {
  readonly code: ErrorCode;
  /** What the user can do about it, shown under the message. */
  readonly hint: string | undefined;

  constructor(code: ErrorCode, message: string, options: { cause?: unknown; hint?: string } = {}) {
    super(message, options.cause === undefined ? undefined : { cause: options.cause });
    this.name = 'EgressguardError';
    this.code = code;
    this.hint = options.hint;
  }
}

export function isEgressguardError(error: unknown): error is EgressguardError {
  return error instanceof EgressguardError;
}
