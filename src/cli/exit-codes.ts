/** Documented exit codes (README "Exit codes"). */
export const EXIT = {
  ok: 0,
  /** The policy is invalid, a probe disagrees, or a check failed. */
  failed: 1,
  /** Bad usage or a runtime error (unreadable facts, a command that failed). */
  error: 2,
  /** `plan --detailed-exitcode`: valid, and apply would change something (as terraform plan). */
  changes: 2,
  /** `status`: live state differs from what was applied (drift). */
  drift: 3,
} as const;
