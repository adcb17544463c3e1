import { describe, expect, it } from 'vitest';
import { parseIpv4 } from '../../core/index.js';
import type { HostFacts } from '../../facts/index.js';
import { createMacosPfHost, readStockPfFiles } from '../../../sim/pf/create-macos-pf-host.js';
import type { PfctlModel } from '../../../sim/pf/pfctl-model.js';
import { createPfSelftest, SELFTEST_ANCHOR } from './pf-selftest.js';
import { createPfctlModelRunner } from '../../../sim/pf/pfctl-model-runner.js';
import { findForbiddenPfctlForms } from '../../../sim/pf/pfctl-model.js';

const LOOPBACK = parseIpv4('127.0.0.1') as number;

/** The model host's interfaces, as `ifconfig` would show them on it. */
function modelInterfacesOf(model: PfctlModel): HostFacts['interfaces'] {
  return Object.entries(model.state.interfaces).map(([name, addresses]) => ({
    name,
    up: true,
    addresses: [...addresses],
  }));
}

describe('pf selftest against the pfctl model', () => {
  it('passes every check on the model, prints the assumptions, and leaves nothing behind', async () => {
    const model = createMacosPfHost();
    const references = model.state.tokens.length;
    // On the model the probe datagram goes through the pf evaluator (a real Mac sends it).
    const selftest = createPfSelftest({
      readInterfaces: () => Promise.resolve(modelInterfacesOf(model)),
      sendProbe: () => {
        model.sendPacket({
          direction: 'out',
          interface: 'lo0',
          family: 4,
          source: LOOPBACK,
          destination: LOOPBACK,
          protocol: 17,
          sourcePort: 50_000,
          destinationPort: 9,
        });
        return Promise.resolve();
      },
    });
    const runner = createPfctlModelRunner(model);
    const checks = await selftest.run({ runner, options: {} });
    expect(checks.filter((c) => !c.ok)).toEqual([]);
    expect(checks.map((c) => c.name)).toEqual([
      'validate',
      'validate rejects',
      'route-to accepted',
      'route-to (if) refused',
      'route-to unknown refused',
      'load',
      'read back rules',
      'scrub in an anchor',
      'counts as the model predicts',
      'read back nat',
      'read back table',
      'anchor listed',
      'consulted',
      'counters move',
      'lockdown kills states',
      'take a reference',
      'release the reference',
      'remove',
    ]);
    // `self` became one rule per IPv4 address of the host (the rule is from an IPv4 source:
    // lo0, en0 and bridge100 of the model host), the six-address rule one rule on a table,
    // the `(if)` list one rule per item.
    const counts = checks.find((c) => c.name === 'counts as the model predicts')?.detail ?? '';
    expect(counts).toMatch(/egst-self 3\b/);
    expect(counts).toMatch(/\(unlabelled\) 1\b/);
    expect(counts).toMatch(/egst-dynamic 5\b/);
    expect(checks.every((c) => c.assumption !== null)).toBe(true);
    expect(model.run(['-a', SELFTEST_ANCHOR, '-sr']).stdout).toBe('');
    expect(model.state.tokens).toHaveLength(references);
    expect(runner.invocations.flatMap((i) => findForbiddenPfctlForms(i.argv.slice(1)))).toEqual([]);
  });

  it('fails the counter check when no packet reaches the anchor: the check is not vacuous', async () => {
    const model = createMacosPfHost();
    const checks = await createPfSelftest({
      sendProbe: () => Promise.resolve(),
      readInterfaces: () => Promise.resolve(modelInterfacesOf(model)),
    }).run({
      runner: createPfctlModelRunner(model),
      options: {},
    });
    expect(checks.filter((c) => !c.ok).map((c) => [c.name, c.cannotTell !== undefined])).toEqual([
      ['counters move', false],
      ['lockdown kills states', true],
    ]);
  });

  it('says "cannot tell", with the reason, where a correct Mac can differ from the model', async () => {
    // pf skips lo0 (`set skip on lo0`): the probe is never filtered; and a pfctl that, like
    // F93's parse.y, does not check route-to interfaces while parsing.
    const model = createMacosPfHost({
      pfConf: `set skip on lo0\n${readStockPfFiles().pfConf}`,
    });
    const runner = createPfctlModelRunner(model);
    const lenient: typeof runner = {
      ...runner,
      run: async (argv, options) => {
        const result = await runner.run(argv, options);
        if (argv.includes('-n') && (options.input ?? '').includes('egst-absent0')) {
          return { ...result, exitCode: 0, stderr: '' };
        }
        return result;
      },
    };
    const checks = await createPfSelftest({
      sendProbe: () => Promise.resolve(),
      readInterfaces: () => Promise.resolve(modelInterfacesOf(model)),
    }).run({ runner: lenient, options: {} });
    const notOk = checks.filter((c) => !c.ok);
    expect(notOk.map((c) => c.name)).toEqual([
      'route-to unknown refused',
      'counters move',
      'lockdown kills states',
    ]);
    expect(notOk.every((c) => c.cannotTell !== undefined)).toBe(true);
    expect(notOk[1]?.cannotTell).toMatch(/skips lo0/);
  });
});
