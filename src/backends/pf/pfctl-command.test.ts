import { describe, expect, it } from 'vitest';
import { isEgressguardError } from '../../core/index.js';
import { classifyCommand, createRunner } from '../../runner/index.js';
import {
  classifyPfctlCommand,
  parseEnableToken,
  parseReferenceTokens,
  parseShownRules,
} from './pfctl-command.js';
import { createMacosPfHost } from '../../../sim/pf/create-macos-pf-host.js';
import { PFCTL_MODEL_SHIM } from '../../../sim/pf/macos-model-tools.js';
import { pfBackend } from './pf-backend.js';

const A = 'com.apple/250.egressguard';

describe('classifyPfctlCommand (the root-namespace guard)', () => {
  it.each([
    [['/sbin/pfctl', '-n', '-a', A, '-f', '-'], 'read'],
    [['/sbin/pfctl', '-a', A, '-v', '-s', 'rules'], 'read'],
    [['/sbin/pfctl', '-s', 'References'], 'read'],
    [['/sbin/pfctl', '-a', A, '-t', 'eg_x', '-T', 'show'], 'read'],
    [['/sbin/pfctl', '-a', A, '-f', '-'], 'change'],
    [['/sbin/pfctl', '-a', A, '-F', 'all'], 'change'],
    [['/sbin/pfctl', '-E'], 'change'],
    [['/sbin/pfctl', '-X', '123456789'], 'change'],
    [['/sbin/pfctl', '-k', '192.168.64.0/22'], 'change'],
    [['/sbin/pfctl', '-a', A, '-t', 'eg_x', '-T', 'add', '10.0.0.1'], 'change'],
    [['pfctl', '-d'], 'change'],
    // A model's shim is a pfctl like any other here: only the runner's injected models say not.
    [['/repo/sim/pf/macos-tools/pfctl', '-a', A, '-f', '-'], 'change'],
  ] as const)('%j is %s', (argv, expected) => {
    expect(classifyPfctlCommand(argv)).toBe(expected);
    expect(classifyCommand(argv, undefined, [classifyPfctlCommand])).toBe(expected);
  });

  it('under the guard, refuses a real pfctl change and lets only the model the tests name act', async () => {
    const classifiers = pfBackend.classifyCommand === undefined ? [] : [pfBackend.classifyCommand];
    const runner = createRunner({ guard: true, classifiers, models: [PFCTL_MODEL_SHIM] });
    for (const pfctl of ['/sbin/pfctl', 'pfctl', '/elsewhere/sim/pf/macos-tools/pfctl']) {
      await expect(
        runner.run([pfctl, '-a', A, '-f', '-'], { effect: 'change', input: '' }),
      ).rejects.toSatisfy((e: unknown) => isEgressguardError(e) && e.code === 'rootns-guard');
    }
    expect(runner.invocations).toHaveLength(0);
    // The model's shim runs (no state file named: it says so and exits 2).
    const model = await runner.run([PFCTL_MODEL_SHIM, '-a', A, '-f', '-'], {
      effect: 'change',
      input: '',
      allowFailure: true,
    });
    expect(model.stderr).toContain('EGRESSGUARD_PFCTL_MODEL_STATE is not set');
    // With no models named, the guard refuses the shim as it refuses pfctl.
    const bare = createRunner({ guard: true, classifiers, models: [] });
    await expect(
      bare.run([PFCTL_MODEL_SHIM, '-a', A, '-f', '-'], { effect: 'change', input: '' }),
    ).rejects.toSatisfy((e: unknown) => isEgressguardError(e) && e.code === 'rootns-guard');
  });

  it('leaves other tools alone', () => {
    expect(classifyPfctlCommand(['nft', 'list', 'ruleset'])).toBeUndefined();
  });
});

describe('parsing pfctl output (as the pfctl model prints it)', () => {
  it('reads the -E token and the References list', () => {
    const model = createMacosPfHost();
    const enabled = model.run(['-E']);
    const token = parseEnableToken({ ...enabled, exitCode: 0 });
    expect(token).toMatch(/^\d+$/);
    const listed = parseReferenceTokens(model.run(['-s', 'References']).stdout);
    expect(listed).toHaveLength(2);
    expect(listed).toContain(token);
  });

  it('reads rules, labels and counters from -vsr', () => {
    const rules = parseShownRules(
      [
        '@0 pass in quick on bridge100 all flags S/SA keep state label "vm/default"',
        '  [ Evaluations: 12        Packets: 3         Bytes: 180         States: 1     ]',
        '  [ Inserted: uid 0 pid 4242 ]',
        'scrub in on bridge100 all fragment reassemble',
      ].join('\n'),
    );
    expect(rules).toEqual([
      {
        text: 'pass in quick on bridge100 all flags S/SA keep state label "vm/default"',
        label: 'vm/default',
        evaluations: 12,
        packets: 3,
        bytes: 180,
      },
      {
        text: 'scrub in on bridge100 all fragment reassemble',
        label: null,
        evaluations: 0,
        packets: 0,
        bytes: 0,
      },
    ]);
  });
});
