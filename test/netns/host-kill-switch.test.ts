import { randomBytes } from 'node:crypto';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { nftablesBackend } from '../../src/backends/nftables/index.js';
import { readHostFacts } from '../../src/facts/index.js';
import { lowerForHost } from '../../src/ir/index.js';
import { loadPolicy } from '../../src/policy/index.js';
import { createRunner } from '../../src/runner/index.js';
import { REPO } from '../e2e-cli/run-cli.js';

// A host-originated class with a kill switch, in the real kernel (a namespace of our own): what
// it sends to the host itself leaves by "lo", not by the tunnel, so the output hook's kill switch
// must let it reach the class's `to: self` rules, as explain says (linux-host-tunnel).

const CASE = join(REPO, 'testdata/policies/valid/linux-host-tunnel');
const ns = `egtest-hostks-${randomBytes(4).toString('hex')}`;
const root = createRunner();
const host = root.inNamespace(ns);
const TABLE = 'egtest_hostks';

const facts = readHostFacts(join(CASE, 'facts.json'));
const parsed = loadPolicy(join(CASE, 'policy.yaml'));
if (parsed.policy === undefined) throw new Error(JSON.stringify(parsed.issues));
const artifacts = nftablesBackend
  .createCompiler()
  .compile(lowerForHost(parsed.policy, facts), { options: { table: TABLE } });
const inspector = nftablesBackend.createInspector({ runner: host, options: { table: TABLE } });

async function ip(...args: string[]): Promise<void> {
  await host.run(['ip', ...args], { effect: 'change' });
}

/** One ping from the class's source address; whether it was answered. */
async function ping(to: string): Promise<boolean> {
  const result = await host.run(['ping', '-n', '-c', '1', '-W', '1', '-I', '10.8.0.2', to], {
    effect: 'read',
    allowFailure: true,
  });
  return result.exitCode === 0;
}

async function counters(): Promise<Map<string, number>> {
  const live = await inspector.read(artifacts);
  return new Map(live.counters.map((c) => [c.id, c.packets]));
}

describe('the kill switch of a host-originated class', () => {
  beforeAll(async () => {
    await root.run(['ip', 'netns', 'add', ns], { effect: 'change' });
    await ip('link', 'set', 'lo', 'up');
    for (const iface of facts.interfaces) {
      if (iface.name === 'lo') continue;
      await ip('link', 'add', iface.name, 'type', 'veth', 'peer', 'name', `${iface.name}p`);
      await ip('link', 'set', iface.name, 'up');
      await ip('link', 'set', `${iface.name}p`, 'up');
      for (const address of iface.addresses) await ip('addr', 'add', address, 'dev', iface.name);
    }
    await ip('route', 'add', 'default', 'via', '198.51.100.1', 'dev', 'eth0');
    await nftablesBackend
      .createApplier({ runner: host, options: { table: TABLE } })
      .apply(artifacts, { previous: undefined });
  });

  afterAll(async () => {
    await root.run(['ip', 'netns', 'delete', ns], { effect: 'change', allowFailure: true });
  });

  it.each(['up', 'down'] as const)(
    'lets it reach the host itself with the tunnel %s, decided by its own rule',
    async (state) => {
      await ip('link', 'set', 'tun0', state);
      const before = await counters();
      // The tunnel's own address, and the host's LAN address: both over "lo".
      expect(await ping('10.8.0.2')).toBe(true);
      expect(await ping('192.168.1.1')).toBe(true);
      const after = await counters();
      const moved = (id: string): number => (after.get(id) ?? 0) - (before.get(id) ?? 0);
      // Each echo request and each reply passes the output hook from 10.8.0.2.
      expect(moved('host-vpn-local-ping')).toBeGreaterThanOrEqual(2);
      expect(moved('host-vpn/kill-switch')).toBe(0);
    },
  );

  it('still kills what would leave by the uplink with the tunnel down', async () => {
    await ip('link', 'set', 'tun0', 'down');
    // The nft layer alone: without our routing rule the blackhole no longer refuses it first,
    // and the main table sends it out eth0.
    await ip(
      'rule',
      'del',
      'from',
      '10.8.0.2',
      'lookup',
      '7350',
      'priority',
      '7350',
      'proto',
      '104',
    );
    const before = await counters();
    expect(await ping('198.51.100.1')).toBe(false);
    const after = await counters();
    expect(
      (after.get('host-vpn/kill-switch') ?? 0) - (before.get('host-vpn/kill-switch') ?? 0),
    ).toBe(1);
  });
});
