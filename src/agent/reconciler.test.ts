import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { createRandom, packagePath } from '../core/index.js';
import { parseHostFacts } from '../facts/index.js';
import {
  POLICY_DOCUMENT_FORMAT,
  DEFAULT_BACKOFF,
  backoffCeiling,
  hashPolicyBundle,
  type BundleResponse,
  type HostBundle,
} from '../fleet/index.js';
import { createRecordingEngine } from './recording-engine.js';
import { Reconciler } from './reconciler.js';

const FACTS = parseHostFacts(
  JSON.parse(
    readFileSync(packagePath('testdata/policies/valid/linux-vpn-gateway/facts.json'), 'utf8'),
  ),
  'facts.json',
);

function bundleOf(policy: string): { bundle: HostBundle; hash: string } {
  const bundle: HostBundle = {
    format: POLICY_DOCUMENT_FORMAT,
    pushId: 'p1',
    policy,
    source: 'policy.yaml',
    factsDigest: null,
  };
  return { bundle, hash: hashPolicyBundle(bundle, FACTS) };
}

function response(policy: string, tokens: Partial<BundleResponse> = {}): BundleResponse {
  const { bundle, hash } = bundleOf(policy);
  return {
    hostId: 'h1',
    hash,
    bundle,
    retryToken: 0,
    forceToken: 0,
    suspended: false,
    pollIntervalMs: 30_000,
    ...tokens,
  };
}

/** A clock the test moves by hand: no timers, no wall time. */
function manualClock(): { now(): number; set(t: number): void } {
  let t = 1_000_000;
  return { now: () => t, set: (next) => (t = next) };
}

function setUp() {
  const clock = manualClock();
  const engine = createRecordingEngine({ facts: FACTS, hashBundle: hashPolicyBundle });
  const reconciler = new Reconciler({
    engine,
    clock,
    random: createRandom(42),
    agentVersion: 'test',
  });
  return { clock, engine, reconciler };
}

describe('Reconciler: retries with an injected clock', () => {
  it('retries a failing apply forever: each next attempt within full-jitter bounds and the cap', async () => {
    const { clock, engine, reconciler } = setUp();
    engine.failApplies('nft exited with 1: Could not process rule: File exists');
    reconciler.accept(response('policy v1'));
    let maxDelay = 0;
    for (let n = 1; n <= 60; n++) {
      const report = await reconciler.step();
      expect(report?.attempt).toMatchObject({ outcome: 'failed', number: n });
      const delay = report?.attempt?.nextAttemptInMs ?? -1;
      expect(delay).toBeGreaterThanOrEqual(0);
      expect(delay).toBeLessThanOrEqual(backoffCeiling(n, DEFAULT_BACKOFF));
      expect(delay).toBeLessThanOrEqual(15 * 60_000);
      maxDelay = Math.max(maxDelay, delay);
      // Not due before its time: a round in between attempts nothing.
      if (delay > 0) {
        clock.set(clock.now() + delay - 1);
        expect((await reconciler.step())?.attempt).toBeUndefined();
      }
      clock.set(reconciler.nextAttemptAt ?? Number.NaN);
    }
    // 60 failures, 50 of them far past the cap: attempt 61 still happens, and succeeds once fixed.
    expect(engine.applies).toHaveLength(60);
    expect(maxDelay).toBeGreaterThan(backoffCeiling(8, DEFAULT_BACKOFF));
    engine.failApplies(undefined);
    const fixed = await reconciler.step();
    expect(fixed?.attempt).toMatchObject({ outcome: 'applied', number: 61 });
    expect(fixed?.appliedHash).toBe(response('policy v1').hash);
    expect(fixed?.liveHash).toBe(response('policy v1').hash);
  });

  it('re-arms everything on a new desired hash: attempt 1, at once', async () => {
    const { clock, engine, reconciler } = setUp();
    engine.failApplies('route table 51820 is taken', 'v1');
    reconciler.accept(response('policy v1'));
    for (let n = 0; n < 10; n++) {
      await reconciler.step();
      clock.set(reconciler.nextAttemptAt ?? Number.NaN);
    }
    clock.set(clock.now() - 1); // the v1 budget is not due yet
    reconciler.accept(response('policy v2'));
    const report = await reconciler.step();
    expect(report?.attempt).toMatchObject({
      outcome: 'applied',
      number: 1,
      hash: response('policy v2').hash,
    });
  });

  it('re-arms on an operator retry (a new retry token) before the budget is due', async () => {
    const { engine, reconciler } = setUp();
    engine.failApplies('busy');
    reconciler.accept(response('policy v1'));
    for (let n = 0; n < 12; n++) await reconciler.step(); // only the first is due: clock not moved
    expect(engine.applies).toHaveLength(1);
    reconciler.accept(response('policy v1', { retryToken: 1 }));
    const report = await reconciler.step();
    expect(report?.attempt).toMatchObject({ outcome: 'failed', number: 1 });
    expect(engine.applies).toHaveLength(2);
  });

  it('stops attempting a bundle that can never be valid here until a new hash or a retry', async () => {
    const { clock, engine, reconciler } = setUp();
    engine.rejectBundlesContaining('wg9');
    reconciler.accept(response('policy naming wg9'));
    expect((await reconciler.step())?.attempt).toMatchObject({ outcome: 'invalid', number: 1 });
    clock.set(clock.now() + 3_600_000);
    expect((await reconciler.step())?.attempt).toBeUndefined();
    reconciler.accept(response('policy naming wg9', { retryToken: 1 }));
    expect((await reconciler.step())?.attempt).toMatchObject({ outcome: 'invalid' });
    reconciler.accept(response('policy naming wg0', { retryToken: 1 }));
    expect((await reconciler.step())?.attempt).toMatchObject({ outcome: 'applied', number: 1 });
  });

  it('detects drift of the live state and repairs it from the last bundle', async () => {
    const { engine, reconciler } = setUp();
    reconciler.accept(response('policy v1'));
    await reconciler.step();
    engine.setLiveHash(null); // someone deleted the table
    const report = await reconciler.step();
    expect(report?.drift).toMatchObject({ detectedHash: null, repaired: true });
    expect(report?.attempt).toMatchObject({ outcome: 'applied' });
    expect(report?.liveHash).toBe(response('policy v1').hash);
  });

  it("reports the watchers' repairs between rounds as repaired drift until a report carrying them is delivered", async () => {
    const { engine, reconciler } = setUp();
    reconciler.accept(response('policy v1'));
    const first = await reconciler.step();
    if (first !== undefined) reconciler.delivered(first);
    expect(await reconciler.step()).toBeUndefined();
    const hash = response('policy v1').hash ?? '';
    const repair = (what: 'table' | 'routes', message: string) => {
      reconciler.noteRepair({ what, detectedHash: null, generation: 1, message });
    };
    repair('table', 'table was deleted (ruleset: delete table inet egressguard)');
    // Live state is already repaired: nothing else changed, yet the report goes out.
    const carrying = await reconciler.step();
    expect(carrying?.attempt).toBeUndefined();
    expect(carrying?.drift).toEqual({
      detectedHash: null,
      repaired: true,
      message:
        'repaired between polls by the watchers: table was deleted (ruleset: delete table inet egressguard)',
      repairs: 1,
    });
    // Undelivered (the controller away): later repairs add up in the next report.
    repair('routes', 'routes re-converged (link tun0: up)');
    repair('table', 'table was edited (periodic check)');
    const summed = await reconciler.step();
    expect(summed?.drift?.repairs).toBe(3);
    expect(summed?.drift?.message).toBe(
      'repaired between polls by the watchers: table was edited (periodic check) (and 2 earlier: 1 of the table, 1 of routes)',
    );
    // A repair made after that report was built survives its delivery.
    repair('table', 'table carried hash none (periodic check)');
    if (summed !== undefined) reconciler.delivered(summed);
    expect((await reconciler.step())?.drift?.repairs).toBe(1);
    const last = await reconciler.step();
    if (last !== undefined) reconciler.delivered(last);
    expect(await reconciler.step()).toBeUndefined();
    expect(engine.applies).toHaveLength(1);
    expect(last?.liveHash).toBe(hash);

    // A round that repairs drift itself, its report superseded before delivery: both counted.
    repair('table', 'table was deleted (periodic check)');
    engine.setLiveHash(null);
    const round = await reconciler.step();
    expect(reconciler.roundRepaired).toBe(true);
    expect(round?.attempt).toMatchObject({ outcome: 'applied' });
    expect(round?.drift).toMatchObject({ repaired: true, repairs: 2 });
    expect(round?.drift?.message).toBe(
      `live nothing differed from applied ${hash.slice(0, 12)}; applied again (and 1 earlier: 1 of the table)`,
    );
    const superseding = await reconciler.step();
    expect(reconciler.roundRepaired).toBe(false);
    expect(superseding?.attempt).toBeUndefined();
    expect(superseding?.drift).toEqual(round?.drift);
    if (superseding !== undefined) reconciler.delivered(superseding);
    expect(await reconciler.step()).toBeUndefined();
  });

  it('applies again on force, and nothing new while suspended', async () => {
    const { engine, reconciler } = setUp();
    reconciler.accept(response('policy v1'));
    const first = await reconciler.step();
    if (first !== undefined) reconciler.delivered(first);
    // Converged and delivered: nothing to do, nothing to report (an undelivered report is re-sent).
    expect(await reconciler.step()).toBeUndefined();
    reconciler.accept(response('policy v1', { forceToken: 1 }));
    expect((await reconciler.step())?.attempt).toMatchObject({ outcome: 'applied' });
    expect(engine.applies).toHaveLength(2);
    reconciler.accept(response('policy v2', { forceToken: 1, suspended: true }));
    const suspended = await reconciler.step();
    expect(suspended?.attempt).toBeUndefined();
    expect(suspended?.appliedHash).toBe(response('policy v1').hash);
    expect(engine.applies).toHaveLength(2);
  });
});

describe('the recording engine holds applies until released', () => {
  it('a held apply completes only after the release, and the live state follows it then', async () => {
    const { engine, reconciler } = setUp();
    const release = engine.holdApplies();
    reconciler.accept(response('policy v1'));
    let settled = false;
    const step = reconciler.step().then((report) => {
      settled = true;
      return report;
    });
    // Let every queued callback run: the step is still inside the apply.
    await new Promise((resolve) => setImmediate(resolve));
    expect(settled).toBe(false);
    expect(engine.applies).toEqual([]);
    expect((await engine.readStatus()).hash).toBeNull();
    release();
    const report = await step;
    expect(report?.attempt).toMatchObject({ outcome: 'applied', number: 1 });
    expect((await engine.readStatus()).hash).toBe(response('policy v1').hash);
  });
});
