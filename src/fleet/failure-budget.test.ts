import { describe, expect, it } from 'vitest';
import { createRandom } from '../core/index.js';
import { DEFAULT_BACKOFF, FailureBudget, backoffCeiling, backoffDelay } from './failure-budget.js';

const HASH_A = 'a'.repeat(64);
const HASH_B = 'b'.repeat(64);

describe('backoffDelay', () => {
  it('draws from the full range [0, min(cap, base·2^(n-1))]', () => {
    const policy = { baseMs: 1000, capMs: 15 * 60_000 };
    for (let n = 1; n <= 40; n++) {
      const ceiling = Math.min(policy.capMs, 1000 * 2 ** (n - 1));
      expect(backoffCeiling(n, policy)).toBe(ceiling);
      expect(backoffDelay(n, policy, () => 0)).toBe(0);
      expect(backoffDelay(n, policy, () => 0.999_999_999)).toBe(ceiling);
      const random = createRandom(n);
      for (let i = 0; i < 50; i++) {
        const delay = backoffDelay(n, policy, random);
        expect(delay).toBeGreaterThanOrEqual(0);
        expect(delay).toBeLessThanOrEqual(ceiling);
      }
    }
  });

  it('spreads delays over the range instead of clustering at the ceiling', () => {
    const random = createRandom(7);
    const delays = Array.from({ length: 2000 }, () => backoffDelay(5, DEFAULT_BACKOFF, random));
    const ceiling = backoffCeiling(5, DEFAULT_BACKOFF);
    const lowHalf = delays.filter((d) => d < ceiling / 2).length;
    // Uniform: about half below the middle (a plain exponential backoff would put none there).
    expect(lowHalf).toBeGreaterThan(800);
    expect(lowHalf).toBeLessThan(1200);
  });

  it('is capped at 15 minutes by default, even after thousands of failures', () => {
    expect(DEFAULT_BACKOFF.capMs).toBe(15 * 60_000);
    expect(backoffCeiling(10_000, DEFAULT_BACKOFF)).toBe(15 * 60_000);
    expect(Number.isFinite(backoffDelay(1_000_000, DEFAULT_BACKOFF, () => 0.5))).toBe(true);
  });
});

describe('FailureBudget', () => {
  it('never runs out: after any number of failures the next attempt is due within the cap', () => {
    const budget = new FailureBudget(DEFAULT_BACKOFF, createRandom(1));
    let now = 0;
    for (let n = 1; n <= 500; n++) {
      expect(budget.isDue(HASH_A, now)).toBe(true);
      expect(budget.attemptNumber(HASH_A)).toBe(n);
      const delay = budget.recordFailure(HASH_A, now);
      expect(delay).toBeLessThanOrEqual(DEFAULT_BACKOFF.capMs);
      expect(budget.nextAttemptAt).toBe(now + delay);
      if (delay > 0) expect(budget.isDue(HASH_A, now + delay - 1)).toBe(false);
      now += delay;
    }
    expect(budget.failures).toBe(500);
  });

  it('belongs to one hash: a new hash is due at once and starts at attempt 1', () => {
    const budget = new FailureBudget(DEFAULT_BACKOFF, () => 0.99);
    for (let n = 0; n < 12; n++) budget.recordFailure(HASH_A, 0);
    expect(budget.isDue(HASH_A, 1000)).toBe(false);
    expect(budget.isDue(HASH_B, 0)).toBe(true);
    expect(budget.attemptNumber(HASH_B)).toBe(1);
    budget.recordFailure(HASH_B, 0);
    expect(budget.failures).toBe(1);
  });

  it('re-arms on an operator retry', () => {
    const budget = new FailureBudget(DEFAULT_BACKOFF, () => 0.99);
    for (let n = 0; n < 12; n++) budget.recordFailure(HASH_A, 0);
    budget.rearm();
    expect(budget.isDue(HASH_A, 0)).toBe(true);
    expect(budget.attemptNumber(HASH_A)).toBe(1);
  });
});
