import { describe, expect, it } from 'vitest';
import { matchesLabelSelector } from './label-selector.js';

describe('matchesLabelSelector (Kubernetes semantics)', () => {
  const labels = { app: 'web', tier: 'front' };

  it('selects everything with an empty selector, and ANDs every requirement', () => {
    expect(matchesLabelSelector({}, labels)).toBe(true);
    expect(matchesLabelSelector({ matchLabels: { app: 'web', tier: 'front' } }, labels)).toBe(true);
    expect(matchesLabelSelector({ matchLabels: { app: 'web', tier: 'back' } }, labels)).toBe(false);
    expect(
      matchesLabelSelector(
        {
          matchLabels: { app: 'web' },
          matchExpressions: [{ key: 'tier', operator: 'In', values: ['back'] }],
        },
        labels,
      ),
    ).toBe(false);
  });

  it('implements In, NotIn (also true without the key), Exists and DoesNotExist', () => {
    const one = (
      operator: 'In' | 'NotIn' | 'Exists' | 'DoesNotExist',
      key: string,
      values?: string[],
    ) =>
      matchesLabelSelector(
        { matchExpressions: [{ key, operator, ...(values ? { values } : {}) }] },
        labels,
      );
    expect([
      one('In', 'app', ['web', 'api']),
      one('In', 'app', ['api']),
      one('In', 'zone', ['a']),
    ]).toEqual([true, false, false]);
    expect([
      one('NotIn', 'app', ['api']),
      one('NotIn', 'app', ['web']),
      one('NotIn', 'zone', ['a']),
    ]).toEqual([true, false, true]);
    expect([
      one('Exists', 'app'),
      one('Exists', 'zone'),
      one('DoesNotExist', 'zone'),
      one('DoesNotExist', 'app'),
    ]).toEqual([true, false, true, false]);
  });
});
