/** How many requests one host may send: a burst, refilled at a steady rate. */
export interface HostRateLimit {
  readonly burst: number;
  readonly perSecond: number;
}

/**
 * A healthy agent sends a long poll per poll interval and a report per change; a repair or a link
 * event adds one of each. Thirty at once and one a second after that is far above it, and far
 * below a host that floods (per replica: each replica counts its own requests).
 */
export const DEFAULT_HOST_RATE_LIMIT: HostRateLimit = { burst: 30, perSecond: 1 };

/** A token bucket per host credential; full buckets are forgotten. */
export class HostRateLimiter {
  readonly #buckets = new Map<string, { tokens: number; at: number }>();

  constructor(private readonly limit: HostRateLimit) {}

  /** Takes one request of `hostId` at `now` (ms): undefined when allowed, else seconds to wait. */
  take(hostId: string, now: number): number | undefined {
    const { burst, perSecond } = this.limit;
    const bucket = this.#buckets.get(hostId) ?? { tokens: burst, at: now };
    bucket.tokens = Math.min(burst, bucket.tokens + ((now - bucket.at) / 1000) * perSecond);
    bucket.at = now;
    this.#buckets.set(hostId, bucket);
    if (this.#buckets.size > 50_000) this.#forgetFull(now);
    if (bucket.tokens >= 1) {
      bucket.tokens -= 1;
      return undefined;
    }
    return Math.max(1, Math.ceil((1 - bucket.tokens) / perSecond));
  }

  /** For messages: `30 at once, then 1 a second`. */
  describe(): string {
    return `${this.limit.burst} at once, then ${this.limit.perSecond} a second`;
  }

  #forgetFull(now: number): void {
    const { burst, perSecond } = this.limit;
    for (const [id, bucket] of this.#buckets) {
      if (bucket.tokens + ((now - bucket.at) / 1000) * perSecond >= burst) this.#buckets.delete(id);
    }
  }
}
