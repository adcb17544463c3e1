import { describe, expect, it } from 'vitest';
import { predictShownRules, SCRATCH, SELFTEST_ANCHOR } from '../../src/backends/pf/pf-selftest.js';
import { RUNNER_INTERFACES } from './create-macos-pf-host.js';
import { createPfctlModelState, PfctlModel } from './pfctl-model.js';

// The self-test compares a real Mac's `pfctl -vsr` with predictShownRules, which the product
// computes itself (it carries no model): the pfctl model, loaded with the same interfaces, must
// show exactly the rules predicted, so the self-test checks the model's expansion and optimizer.
describe('the self-test prediction is what the pfctl model shows', () => {
  it.each([
    ['a Tart runner host', RUNNER_INTERFACES],
    [
      'loopback and an uplink of two addresses',
      { lo0: ['127.0.0.1/8'], en0: ['192.0.2.50/24', '198.51.100.9/24'] },
    ],
    ['an IPv4-only loopback and uplink', { lo0: ['127.0.0.1/8'], en0: ['203.0.113.5/24'] }],
    [
      'no en0 (the scratch anchor names its broadcast address)',
      { lo0: ['127.0.0.1/8', '::1/128'] },
    ],
  ])('on %s', (_, interfaces) => {
    const model = new PfctlModel(createPfctlModelState({ interfaces }));
    const loaded = model.run(['-a', SELFTEST_ANCHOR, '-f', '-'], { stdin: SCRATCH });
    const predicted = predictShownRules(SCRATCH, SELFTEST_ANCHOR, interfaces);
    expect(loaded.exitCode).toBe(0);
    const shown = model.run(['-a', SELFTEST_ANCHOR, '-s', 'rules']).stdout;
    expect(shown).toContain('label "egst-self"');
    expect(predicted).toEqual({ rules: shown });
  });

  it('refuses what the model refuses', () => {
    const broken = 'pass out all label\n';
    const model = new PfctlModel(createPfctlModelState({ interfaces: RUNNER_INTERFACES }));
    const loaded = model.run(['-a', SELFTEST_ANCHOR, '-f', '-'], { stdin: broken });
    expect(loaded.exitCode).toBe(1);
    const predicted = predictShownRules(broken, SELFTEST_ANCHOR, RUNNER_INTERFACES);
    expect('problems' in predicted && loaded.stderr.includes(predicted.problems)).toBe(true);
  });
});
