/** Time as the fleet sees it: injected everywhere, so tests run on a clock they control. */
export interface Clock {
  now(): number;
}

export const systemClock: Clock = { now: () => Date.now() };

/**
 * The database's clock, read through this host's: replicas whose own clocks disagree store and
 * judge times on the one clock they share. `sync` samples the offset (the database's reading
 * against the middle of the round trip); a store whose clock is this host's (SQLite) has none.
 */
export class DatabaseClock implements Clock {
  #offsetMs = 0;

  constructor(
    private readonly local: Clock,
    private readonly readDatabase: () => Promise<number | null>,
  ) {}

  /** Whole milliseconds: PostgreSQL stores times as bigint. */
  now(): number {
    return Math.round(this.local.now() + this.#offsetMs);
  }

  /** How far the database's clock is ahead of this host's. */
  get offsetMs(): number {
    return this.#offsetMs;
  }

  async sync(): Promise<void> {
    const before = this.local.now();
    const reading = await this.readDatabase();
    if (reading === null) return;
    this.#offsetMs = reading - (before + this.local.now()) / 2;
  }
}
