import { randomBytes } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createRunner } from '../../src/runner/index.js';
import { REPO, runCli } from '../e2e-cli/run-cli.js';
import { readLiveTable } from '../../src/backends/nftables/nft-inspector.js';
import { liveSetName } from './support/live-set.js';

// The sets that say who a class is and where its kill switch lets it go are small; an element
// slipped into one (a hole in the kill switch) must show as drift and be undone by apply.
const POLICY = join(REPO, 'testdata/policies/valid/linux-vpn-gateway/policy.yaml');
const ns = `egtest-setedit-${randomBytes(4).toString('hex')}`;
const root = createRunner();
const inside = root.inNamespace(ns);
const dir = mkdtempSync(join(tmpdir(), 'eg-setedit-'));
const cli = (args: string[]) =>
  runCli([...args, '--netns', ns, '--state-dir', dir], { env: { EGRESSGUARD_ROOTNS_GUARD: '1' } });

describe('an edited kill-switch exception set', () => {
  beforeAll(async () => {
    await root.run(['ip', 'netns', 'add', ns], { effect: 'change' });
    const links: [string, string][] = [
      ['eth0', '198.51.100.2/24'],
      ['lan0', '192.168.1.1/24'],
      ['vwl0', '10.10.0.1/24'],
      ['iwl0', '10.10.1.1/24'],
      ['tun0', '10.200.0.2/32'],
    ];
    for (const [link, address] of links) {
      await inside.run(['ip', 'link', 'add', link, 'type', 'veth', 'peer', 'name', `${link}p`], {
        effect: 'change',
      });
      await inside.run(['ip', 'link', 'set', link, 'up'], { effect: 'change' });
      await inside.run(['ip', 'link', 'set', `${link}p`, 'up'], { effect: 'change' });
      await inside.run(['ip', 'addr', 'add', address, 'dev', link], { effect: 'change' });
    }
    await inside.run(['ip', 'route', 'add', 'default', 'via', '198.51.100.1', 'dev', 'eth0'], {
      effect: 'change',
    });
  });
  afterAll(async () => {
    await root.run(['ip', 'netns', 'delete', ns], { effect: 'change', allowFailure: true });
    rmSync(dir, { recursive: true, force: true });
  });

  const slipIn = async (): Promise<string> => {
    const name = await liveSetName(inside, 's_vpn_ks4');
    await inside.run(['nft', 'add', 'element', 'inet', 'egressguard', name, '{ 203.0.113.0/24 }'], {
      effect: 'change',
    });
    const drifted = await cli(['status', '--json']);
    expect(drifted.exitCode).toBe(3);
    expect(JSON.parse(drifted.stdout)).toMatchObject({ condition: 'Drifted' });
    return name;
  };
  const listSet = async (name: string): Promise<string> =>
    (await inside.run(['nft', 'list', 'set', 'inet', 'egressguard', name], { effect: 'read' }))
      .stdout;

  it('is drift, and a plain apply puts the applied set back', async () => {
    expect((await cli(['apply', POLICY])).exitCode).toBe(0);
    expect((await cli(['status'])).exitCode).toBe(0);
    const name = await slipIn();
    expect((await cli(['apply', POLICY])).exitCode).toBe(0);
    // The class sets are refilled at every apply: the kept name does not keep the hole.
    expect(await listSet(name)).not.toContain('203.0.113.0/24');
    expect(await listSet(name)).toContain('192.168.0.0/16');
    expect((await cli(['status'])).exitCode).toBe(0);
  });

  it('is undone by apply --force too, which refills every set', async () => {
    const name = await slipIn();
    expect((await cli(['apply', POLICY, '--force'])).exitCode).toBe(0);
    expect(await listSet(name)).not.toContain('203.0.113.0/24');
    expect((await cli(['status'])).exitCode).toBe(0);
  });

  it('reads the same fingerprint from the whole listing and from the terse one with set listings', async () => {
    const both = async () => {
      const terse = await readLiveTable(inside, 'egressguard');
      const whole = await readLiveTable(inside, 'egressguard', { whole: true });
      expect(whole.present).toBe(true);
      expect(whole.hash).toBe(terse.hash);
      expect([...whole.counters.keys()]).toEqual([...terse.counters.keys()]);
      expect(whole.fingerprint).toBe(terse.fingerprint);
      return whole.fingerprint;
    };
    expect((await cli(['apply', POLICY])).exitCode).toBe(0);
    const clean = await both();
    const name = await slipIn();
    const drifted = await both();
    expect(drifted).not.toBe(clean);
    await inside.run(
      ['nft', 'delete', 'element', 'inet', 'egressguard', name, '{ 203.0.113.0/24 }'],
      {
        effect: 'change',
      },
    );
    expect(await both()).toBe(clean);
    await inside.run(['nft', 'delete', 'table', 'inet', 'egressguard'], { effect: 'change' });
    expect(await readLiveTable(inside, 'egressguard', { whole: true })).toMatchObject({
      present: false,
      fingerprint: null,
    });
  });
});
