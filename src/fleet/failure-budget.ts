/** Exponential backoff, capped; there is deliberately no maximum number of attempts. */
export interface BackoffPolicy {
  readonly baseMs: number;
  readonly capMs: number;
}

export const DEFAULT_BACKOFF: BackoffPolicy = { baseMs: 1_000, capMs: 15 * 60_000 };

/** The ceiling of the delay after failure number `failures` (1-based): min(cap, base·2^(n-1)). */
export function backoffCeiling(failures: number, policy: BackoffPolicy): number {
  // 2^52 already exceeds any cap; the exponent is clamped so the product stays finite.
  return Math.min(policy.capMs, policy.baseMs * 2 ** Math.min(Math.max(failures - 1, 0), 52));
}

/**
 * "Full jitter": a delay drawn uniformly from [0, ceiling], so a fleet that failed together
 * spreads its retries instead of retrying in lockstep (AWS Architecture Blog, "Exponential Backoff
 * And Jitter", 2015). `random` returns values in [0, 1).
 */
export function backoffDelay(
  failures: number,
  policy: BackoffPolicy,
  random: () => number,
): number {
  const ceiling = backoffCeiling(failures, policy);
  return Math.min(ceiling, Math.floor(random() * (ceiling + 1)));
}

/**
 * The failure budget of one (host, desired hash): how often it failed and when to try again.
 * It never runs out: after any number of failures the next attempt is at most `capMs` away. A new
 * hash, or an operator's retry, re-arms it.
 */
export class FailureBudget {
  #hash: string | undefined;
  #failures = 0;
  #nextAttemptAt = 0;

  constructor(
    private readonly policy: BackoffPolicy,
    private readonly random: () => number,
  ) {}

  get hash(): string | undefined {
    return this.#hash;
  }

  get failures(): number {
    return this.#failures;
  }

  get nextAttemptAt(): number {
    return this.#nextAttemptAt;
  }

  /** The number the next attempt at `hash` will carry (1 after a re-arm). */
  attemptNumber(hash: string): number {
    return hash === this.#hash ? this.#failures + 1 : 1;
  }

  /** Whether an attempt at `hash` may run at `now`. */
  isDue(hash: string, now: number): boolean {
    return hash !== this.#hash || now >= this.#nextAttemptAt;
  }

  /** Records a failed attempt at `hash`; returns the delay until the next one. */
  recordFailure(hash: string, now: number): number {
    if (hash !== this.#hash) this.rearm(hash);
    this.#failures += 1;
    const delay = backoffDelay(this.#failures, this.policy, this.random);
    this.#nextAttemptAt = now + delay;
    return delay;
  }

  /** Forgets every failure: a new desired hash, a success, or an operator's retry. */
  rearm(hash?: string): void {
    this.#hash = hash;
    this.#failures = 0;
    this.#nextAttemptAt = 0;
  }
}
