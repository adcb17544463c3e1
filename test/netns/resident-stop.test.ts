import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { runResident, type ResidentPass } from '../../src/apply/index.js';
import {
  applyPrepared,
  createHostTarget,
  hostContext,
  preparePolicy,
} from '../../src/host/index.js';
import type { Lab } from '../../src/prove/index.js';
import { createRunner, Faults } from '../../src/runner/index.js';
import {
  FACTS,
  HOST,
  POLICY_A,
  createGatewayLab,
  createTempDir,
  liveStamp,
  pollUntil,
} from './support/vpn-gateway-lab.js';
import { monitorsInNamespace } from './support/namespace-monitors.js';

// The resident stops only once a repair in flight is done (review finding: `runResident` resolved
// while a reconcile was still applying, so an agent stopped by SIGTERM or decommissioned could
// exit mid-repair). The repair is the real one, on the lab's nftables; the test only holds it at
// the fault point before the commit (src/runner/faults.ts), so the stop lands inside it.

const BOUND_MS = 60_000;

/** Faults that hold an apply at "before-nft-commit" until `open()`. */
class HeldCommit extends Faults {
  readonly #opened: Promise<void>;
  #open: () => void = () => undefined;
  #held = false;

  constructor() {
    super();
    this.#opened = new Promise((resolve) => {
      this.#open = resolve;
    });
  }

  get isHolding(): boolean {
    return this.#held;
  }

  open(): void {
    this.#open();
  }

  override async hit(point: string): Promise<void> {
    await super.hit(point);
    if (point !== 'before-nft-commit') return;
    this.#held = true;
    await this.#opened;
  }
}

describe('the resident stops only after the repair in flight', () => {
  let lab: Lab;
  const state = createTempDir('egtest-resident-stop');

  beforeAll(async () => {
    lab = await createGatewayLab();
  });

  afterAll(async () => {
    await (lab as Lab | undefined)?.destroy();
    state.dispose();
  });

  it('resolves only once the repair it was making is applied, and starts none after the stop', async () => {
    const target = createHostTarget({ netns: lab.ns(HOST), stateDir: state.path });
    const prepared = await preparePolicy(target, { policy: POLICY_A, facts: FACTS });
    await applyPrepared(target, prepared);
    const stamp = await liveStamp(lab);
    expect(stamp).not.toBeNull();

    const nft = (argv: string[]) => lab.runner(HOST).run(['nft', ...argv], { effect: 'change' });
    const held = new HeldCommit();
    const runner = createRunner({ netns: lab.ns(HOST), faults: held });
    const controller = new AbortController();
    const passes: ResidentPass[] = [];
    const events: string[] = [];
    const told: string[] = [];
    const resident = runResident({
      ...hostContext(target, prepared.backend),
      runner,
      log: (entry) => events.push(entry.action),
      signal: controller.signal,
      // Ticks too: a deletion the ruleset monitor missed (not yet listening) is still repaired,
      // and ticks during the held repair ask for passes the stop must not run.
      tickMs: 500,
      onReconciled: (pass) => passes.push(pass),
      onChange: (reason) => {
        told.push(reason);
      },
    }).then(() => {
      events.push('resolved');
    });
    try {
      expect(
        await pollUntil(() => Promise.resolve(passes.length > 0 ? true : undefined), {
          timeoutMs: BOUND_MS,
        }),
        'the first pass',
      ).toBe(true);
      await nft(['delete', 'table', 'inet', 'egressguard']);
      expect(
        await pollUntil(() => Promise.resolve(held.isHolding ? true : undefined), {
          timeoutMs: BOUND_MS,
        }),
        'the repair to reach the commit',
      ).toBe(true);
      const passesBefore = passes.length;
      // An event during the repair asks for one more pass; the stop must not run it.
      const toldBefore = told.length;
      await nft(['add', 'table', 'inet', 'egtest_other']);
      await nft(['delete', 'table', 'inet', 'egtest_other']);
      expect(
        await pollUntil(
          () =>
            Promise.resolve(
              told.slice(toldBefore).some((r) => r.includes('egtest_other')) ? true : undefined,
            ),
          { timeoutMs: BOUND_MS },
        ),
        'the watcher to see the other table',
      ).toBe(true);

      expect(await monitorsInNamespace(lab.ns(HOST))).toHaveLength(3);
      controller.abort();
      // The monitors stop at once; a resident that did not wait for its repair has resolved by
      // then (its end is promise steps after the abort, their exit is processes ending).
      expect(
        await pollUntil(
          async () => ((await monitorsInNamespace(lab.ns(HOST))).length === 0 ? true : undefined),
          { timeoutMs: BOUND_MS },
        ),
        'the monitors to stop',
      ).toBe(true);
      await new Promise((resolve) => setImmediate(resolve));
      expect(events).not.toContain('resolved');
      expect(await liveStamp(lab)).toBeNull();

      held.open();
      await resident;
      // The repair finished before the resident said it stopped, and nothing ran after it.
      expect(events.indexOf('repaired-table')).toBeGreaterThan(-1);
      expect(events.indexOf('repaired-table')).toBeLessThan(events.indexOf('resolved'));
      expect(events.at(-1)).toBe('resolved');
      expect(passes.slice(passesBefore).map((p) => p.repair?.what)).toEqual(['table']);
      expect(await liveStamp(lab)).toBe(stamp);
    } finally {
      controller.abort();
      held.open();
      await resident;
    }
  }, 180_000);
});
