import { describe, expect, it } from 'vitest';
import { parseIpv4 } from '../../core/index.js';
import { createMacosPfHost } from './create-macos-pf-host.js';
import { createPfSelftest, SELFTEST_ANCHOR } from './pf-selftest.js';
import { createPfctlModelRunner } from './pfctl-model-runner.js';
import { findForbiddenPfctlForms } from './pfctl-model.js';

const LOOPBACK = parseIpv4('127.0.0.1') as number;

describe('pf selftest against the pfctl model', () => {
  it('passes every check on the model, prints the assumptions, and leaves nothing behind', async () => {
    const model = createMacosPfHost();
    const references = model.state.tokens.length;
    // On the model the probe datagram goes through the pf evaluator (a real Mac sends it).
    const selftest = createPfSelftest({
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
      'read back nat',
      'read back table',
      'anchor listed',
      'consulted',
      'counters move',
      'take a reference',
      'release the reference',
      'remove',
    ]);
    expect(checks.every((c) => c.assumption !== null)).toBe(true);
    expect(model.run(['-a', SELFTEST_ANCHOR, '-sr']).stdout).toBe('');
    expect(model.state.tokens).toHaveLength(references);
    expect(runner.invocations.flatMap((i) => findForbiddenPfctlForms(i.argv.slice(1)))).toEqual([]);
  });

  it('fails the counter check when no packet reaches the anchor: the check is not vacuous', async () => {
    const model = createMacosPfHost();
    const checks = await createPfSelftest({ sendProbe: () => Promise.resolve() }).run({
      runner: createPfctlModelRunner(model),
      options: {},
    });
    expect(checks.filter((c) => !c.ok).map((c) => c.name)).toEqual(['counters move']);
  });
});
