import { beforeAll, describe, expect, it } from 'vitest';
import type { Lab } from '../../src/prove/index.js';
import { liveSetName } from './support/live-set.js';
import {
  FACTS,
  HOST,
  POLICY_A,
  apply,
  cli,
  routingListing,
  status,
  target,
  useGatewayLab,
  writePolicyB,
} from './support/vpn-gateway-lab.js';

// Read-back (DESIGN.md §5): after the commit, apply checks that what it put in stayed: the stamped
// hash, and every route and rule (but routes via a tunnel that is down), with none extra. Real
// kernel, one lab; each case has a state directory of its own.

describe('apply: read back', () => {
  const { lab: current, fresh, tempDir } = useGatewayLab('egtest-readback');
  let lab: Lab;
  beforeAll(() => {
    lab = current();
  });

  it('fails as PartiallyApplied when its routing does not stay, and converges once it does', async () => {
    const path = await fresh('routing');
    const a = await apply(lab, path, POLICY_A);
    // Something deletes our rules as soon as they appear (as systemd-networkd would): a test
    // fault, so no read-back can slip between (a racing deleter lost under load).
    const failed = await cli(
      ['apply', writePolicyB(path), '--facts', FACTS, ...target(lab, path)],
      { faults: 'steering.lose-rules=on' },
    );
    expect(failed.exitCode).toBe(2);
    expect(failed.stderr).toContain(
      'Cannot finish the apply: routing did not converge after the firewall commit: missing: ip rule from 10.10.0.0/24 lookup 7350 priority 7350',
    );
    const partial = await status(lab, path);
    expect(partial).toMatchObject({
      condition: 'PartiallyApplied',
      exitCode: 3,
      appliedHash: a.hash,
      generation: 1,
    });
    expect(partial.reasons.join('\n')).toContain('routing did not converge');

    const b = await apply(lab, path, writePolicyB(path));
    expect(b).toMatchObject({ changed: true, generation: 2 });
    expect(await routingListing(lab, 7350)).toContain('7350:\tfrom 10.10.0.0/24 lookup 7350');
    expect(await status(lab, path)).toMatchObject({ condition: 'InSync', attempt: null });
  });

  it('re-applies with --force what looks unchanged: an added set element goes', async () => {
    const path = await fresh('force');
    await apply(lab, path, POLICY_A);
    const runner = lab.runner(HOST);
    const set = ['inet', 'egressguard', await liveSetName(runner, 's_vpn_ks4')];
    // Not in the terse listing: the fingerprint cannot see it.
    await runner.run(['nft', 'add', 'element', ...set, '{ 198.18.0.0/15 }'], { effect: 'change' });
    const listSet = async (): Promise<string> =>
      (await runner.run(['nft', 'list', 'set', ...set], { effect: 'read' })).stdout;
    expect(await listSet()).toContain('198.18.0.0/15');
    const forced = await apply(lab, path, POLICY_A, ['--force']);
    expect(forced).toMatchObject({ changed: true, generation: 2 });
    expect(await listSet()).not.toContain('198.18.0.0/15');
    expect(await status(lab, path)).toMatchObject({ condition: 'InSync', generation: 2 });
  });

  const plan = async (path: string): Promise<{ changes: string[] }> => {
    const result = await cli(['plan', POLICY_A, '--facts', FACTS, '--json', ...target(lab, path)]);
    expect(result.exitCode).toBe(0);
    return JSON.parse(result.stdout) as { changes: string[] };
  };

  it('plans to replace a table edited since it was applied, though its hash is the same', async () => {
    const path = await fresh('plan-edited');
    await apply(lab, path, POLICY_A);
    expect((await plan(path)).changes).toEqual([]);
    // An edit that leaves the stamp alone: one more rule in a class chain.
    await lab
      .runner(HOST)
      .run(['nft', 'add', 'rule', 'inet', 'egressguard', 'c_internet_fwd', 'counter'], {
        effect: 'change',
      });
    expect((await plan(path)).changes).toEqual([
      expect.stringMatching(
        /^~ table inet egressguard: edited since generation 1 was applied \(same hash [0-9a-f]{12}\): apply will replace it$/,
      ),
    ]);
    expect(await apply(lab, path, POLICY_A)).toMatchObject({ changed: true, generation: 2 });
    expect((await plan(path)).changes).toEqual([]);

    // Another state directory did not apply what is live: apply would load and record it.
    const other = tempDir('plan-other');
    expect((await plan(other)).changes).toEqual([
      '~ table inet egressguard: carries this hash, but nothing is recorded as applied: apply will load it again and record it',
    ]);
  });
});
