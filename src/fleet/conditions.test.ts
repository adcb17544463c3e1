import { describe, expect, it } from 'vitest';
import {
  deriveConditions,
  mergeConditions,
  overlaySilence,
  type HostConvergence,
} from './conditions.js';

const A = 'a'.repeat(64);
const B = 'b'.repeat(64);
const base: HostConvergence = {
  desiredHash: A,
  desiredError: null,
  appliedHash: A,
  liveHash: A,
  failureHash: null,
  failureCount: 0,
  nextAttemptAt: null,
  lastError: null,
  invalidHash: null,
  invalidMessage: null,
  suspended: false,
};
const statusOf = (host: HostConvergence) =>
  Object.fromEntries(deriveConditions(host).map((c) => [c.type, `${c.status} ${c.reason}`]));

describe('deriveConditions', () => {
  it('is Ready when applied and live equal the desired hash', () => {
    expect(statusOf(base)).toEqual({
      Ready: 'True Converged',
      Progressing: 'False Converged',
      Degraded: 'False AsExpected',
      Stalled: 'False BundleValid',
    });
  });

  it('is Degraded and Progressing, never Stalled, while a failing hash is retried', () => {
    const failing = {
      ...base,
      desiredHash: B,
      failureHash: B,
      failureCount: 7,
      lastError: 'busy',
      nextAttemptAt: 0,
    };
    expect(statusOf(failing)).toEqual({
      Ready: 'False Retrying',
      Progressing: 'True Retrying',
      Degraded: 'True ApplyFailed',
      Stalled: 'False BundleValid',
    });
    expect(deriveConditions(failing).find((c) => c.type === 'Degraded')?.message).toMatch(
      /^attempt 7 failed: busy; next attempt at 1970/,
    );
  });

  it('is Stalled only for a bundle invalid on this host, and a new desired hash clears it and Degraded', () => {
    const stalled = {
      ...base,
      desiredHash: B,
      invalidHash: B,
      invalidMessage: 'no interface wg9',
      failureHash: A,
    };
    expect(statusOf(stalled)['Stalled']).toBe('True BundleInvalidForHost');
    const rearmed = { ...stalled, desiredHash: 'c'.repeat(64) };
    expect(statusOf(rearmed)['Stalled']).toBe('False BundleValid');
    expect(statusOf(rearmed)['Degraded']).toBe('False AsExpected');
    expect(statusOf(rearmed)['Progressing']).toBe('True Applying');
  });

  it('reports drift as Degraded', () => {
    expect(statusOf({ ...base, liveHash: null })['Degraded']).toBe('False AsExpected');
    expect(statusOf({ ...base, liveHash: B })['Degraded']).toBe('True Drift');
  });
});

describe('mergeConditions and overlaySilence', () => {
  it('keeps the transition time while a status holds, and moves it when it changes', () => {
    const first = mergeConditions([], deriveConditions(base), 100);
    const same = mergeConditions(first, deriveConditions(base), 200);
    expect(same.every((c) => c.lastTransitionTime === 100)).toBe(true);
    const changed = mergeConditions(same, deriveConditions({ ...base, liveHash: B }), 300);
    expect(changed.find((c) => c.type === 'Degraded')?.lastTransitionTime).toBe(300);
    expect(changed.find((c) => c.type === 'Stalled')?.lastTransitionTime).toBe(100);
  });

  it('makes Ready Unknown for a silent host', () => {
    const silent = overlaySilence(mergeConditions([], deriveConditions(base), 1), 5_000);
    expect(silent.find((c) => c.type === 'Ready')).toMatchObject({
      status: 'Unknown',
      reason: 'AgentSilent',
      lastTransitionTime: 5_000,
    });
  });
});
