import { randomBytes } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  applySteeringDiff,
  readLiveSteering,
} from '../../src/backends/nftables/steering-applier.js';
import type { SteeringRoute, SteeringRule } from '../../src/backends/nftables/steering.js';
import { createRunner } from '../../src/runner/index.js';

// Steering changes go to one `ip -batch -` per family, which stops at the first command that
// fails: a route via an absent tunnel in the middle of a batch is deferred and everything after
// it still goes in; a rule the kernel refuses fails the apply, naming the command. Real kernel, a
// namespace of our own.

const ns = `egtest-stbatch-${randomBytes(4).toString('hex')}`;
const root = createRunner();
const host = root.inNamespace(ns);
const PROTO = 99;
const TABLE = 7391;

const route = (overrides: Partial<SteeringRoute>): SteeringRoute => ({
  family: 4,
  table: TABLE,
  type: 'unicast',
  destination: '0.0.0.0/0',
  metric: 0,
  ...overrides,
});
const rule: SteeringRule = { family: 4, from: '10.10.0.0/24', table: TABLE, priority: 7391 };

describe('steering changes in one ip batch per family', () => {
  beforeAll(async () => {
    await root.run(['ip', 'netns', 'add', ns], { effect: 'change' });
    await host.run(['ip', 'link', 'set', 'lo', 'up'], { effect: 'change' });
  });
  afterAll(async () => {
    await root.run(['ip', 'netns', 'delete', ns], { effect: 'change', allowFailure: true });
  });

  it('defers a route via an absent tunnel mid-batch and applies everything after it', async () => {
    const absent = route({ device: 'tunx9', metric: 10 });
    const outcome = await applySteeringDiff(
      host,
      {
        addRoutes: [
          route({ type: 'throw', destination: '192.168.0.0/16' }),
          absent,
          route({ type: 'blackhole', metric: 4000 }),
          route({ family: 6, type: 'blackhole', destination: '::/0', metric: 4000 }),
        ],
        addRules: [rule],
        // Not there: a delete of what is gone already is no error.
        deleteRules: [{ ...rule, from: '10.99.0.0/24' }],
        deleteRoutes: [],
      },
      PROTO,
    );
    expect(outcome.deferred).toEqual([absent]);
    const live = await readLiveSteering(host, {
      protocol: PROTO,
      tunnels: [{ table: TABLE, priority: 7391 }],
    });
    expect(live.ownedRules).toEqual([rule]);
    expect(live.ownedRoutes.map((r) => `${r.family} ${r.type} ${r.destination}`).sort()).toEqual([
      '4 blackhole 0.0.0.0/0',
      '4 throw 192.168.0.0/16',
      '6 blackhole ::/0',
    ]);
  });

  it('fails, naming the command, when the kernel refuses a rule', async () => {
    // The same rule again: "File exists".
    await expect(
      applySteeringDiff(
        host,
        { addRoutes: [], addRules: [rule], deleteRules: [], deleteRoutes: [] },
        PROTO,
      ),
    ).rejects.toThrow(
      /Cannot add "ip -4 rule add from 10\.10\.0\.0\/24 lookup 7391 priority 7391 proto 99": .*File exists/,
    );
  });
});
