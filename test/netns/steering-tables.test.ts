import { randomBytes } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Artifact } from '../../src/backends/index.js';
import { nftablesBackend } from '../../src/backends/nftables/index.js';
import { parseHostFacts } from '../../src/facts/index.js';
import { lowerForHost } from '../../src/ir/index.js';
import { parsePolicy } from '../../src/policy/index.js';
import { createRunner } from '../../src/runner/index.js';

// Policy routing across several owned tables, in the real kernel (a namespace of our own; the
// root namespace is never touched): one table per tunnel and kill-switch group (DESIGN.md §4),
// a class without a kill switch that falls back to main with its tunnel down, and apply and
// remove that find our routes by their proto tag in every table, not only in table 7350.

const ns = `egtest-steer-${randomBytes(4).toString('hex')}`;
const root = createRunner();
const host = root.inNamespace(ns);
const TABLE = 'egtest_steer';
const LINKS = ['eth0', 'vwl0', 'iwl0', 'ewl0', 'tun0', 'tun1'];

const FACTS = parseHostFacts(
  {
    schema: 'egressguard/facts/v1',
    hostname: 'steer',
    os: 'linux',
    interfaces: [
      { name: 'lo', up: true, addresses: ['127.0.0.1/8', '::1/128'] },
      { name: 'eth0', up: true, addresses: ['198.51.100.2/24'] },
      { name: 'vwl0', up: true, addresses: ['10.10.0.1/24'] },
      { name: 'iwl0', up: true, addresses: ['10.10.1.1/24'] },
      { name: 'ewl0', up: true, addresses: ['10.10.2.1/24'] },
      { name: 'tun0', up: true, addresses: ['10.200.0.2/32'] },
      { name: 'tun1', up: true, addresses: ['10.201.0.2/32'] },
    ],
    routes: [
      { destination: 'default', interface: 'eth0', gateway: '198.51.100.1' },
      { destination: '198.51.100.0/24', interface: 'eth0' },
    ],
  },
  'facts',
);

function compile(classes: string): readonly Artifact[] {
  const parsed = parsePolicy(
    `apiVersion: egressguard/v1
metadata: { name: steer }
interfaces:
  tunnels: { tun0: {}, tun1: {} }
classes:
${classes}`,
    'policy.yaml',
  );
  if (parsed.policy === undefined) throw new Error(JSON.stringify(parsed.issues));
  return nftablesBackend
    .createCompiler()
    .compile(lowerForHost(parsed.policy, FACTS), { options: { table: TABLE } });
}

const VPN = `  vpn:
    ingress: [vwl0]
    sources: [10.10.0.0/24, '2001:db8:10::/64']
    via: tun0
    killSwitch: {}
    default: allow
`;
/** Two tunnels; on tun0 a class with a kill switch and one without: three owned tables. */
const WIDE = compile(`${VPN}  office:
    ingress: [iwl0]
    sources: [10.10.1.0/24]
    via: tun1
    killSwitch: {}
    default: allow
  loose:
    ingress: [ewl0]
    sources: [10.10.2.0/24]
    via: tun0
    default: allow
`);
/** One tunnel, one class: table 7350 only. */
const NARROW = compile(VPN);

const applier = nftablesBackend.createApplier({ runner: host, options: { table: TABLE } });
const inspector = nftablesBackend.createInspector({ runner: host, options: { table: TABLE } });

async function ip(...args: string[]): Promise<string> {
  return (await host.run(['ip', ...args], { effect: 'change' })).stdout;
}

/** Every route tagged with our protocol, in every table, both families, as `ip` prints them. */
async function ownedRoutes(): Promise<string[]> {
  const lines: string[] = [];
  for (const family of ['-4', '-6']) {
    const { stdout } = await host.run(
      // Without -N: route types by name (with it, a blackhole prints as "6").
      ['ip', family, 'route', 'show', 'table', 'all', 'proto', '104'],
      { effect: 'read' },
    );
    lines.push(...stdout.split('\n').filter((l) => l.trim() !== ''));
  }
  return lines.map((l) => l.trim().replace(/\s+/g, ' '));
}

async function ownedRules(): Promise<string[]> {
  const lines: string[] = [];
  for (const family of ['-4', '-6']) {
    const { stdout } = await host.run(['ip', '-N', family, 'rule', 'show'], { effect: 'read' });
    lines.push(...stdout.split('\n').filter((l) => l.includes('proto 104')));
  }
  return lines.map((l) => l.trim().replace(/\s+/g, ' '));
}

/** Which way the kernel routes a forwarded packet of a class, or its refusal. */
async function routeOf(from: string, iif: string): Promise<string> {
  const result = await host.run(['ip', 'route', 'get', '203.0.113.7', 'from', from, 'iif', iif], {
    effect: 'read',
    allowFailure: true,
  });
  return result.exitCode === 0
    ? (result.stdout.split('\n')[0]?.trim() ?? '')
    : result.stderr.trim();
}

describe('steering across owned routing tables', () => {
  beforeAll(async () => {
    await root.run(['ip', 'netns', 'add', ns], { effect: 'change' });
    await ip('link', 'set', 'lo', 'up');
    for (const link of LINKS) {
      await ip('link', 'add', link, 'type', 'veth', 'peer', 'name', `${link}p`);
      await ip('link', 'set', link, 'up');
      await ip('link', 'set', `${link}p`, 'up');
    }
    for (const iface of FACTS.interfaces) {
      if (iface.name === 'lo') continue;
      for (const address of iface.addresses) await ip('addr', 'add', address, 'dev', iface.name);
    }
    await ip('route', 'add', 'default', 'via', '198.51.100.1', 'dev', 'eth0');
    await host.run(['sysctl', '-qw', 'net.ipv4.ip_forward=1'], { effect: 'change' });
  });

  afterAll(async () => {
    await root.run(['ip', 'netns', 'delete', ns], { effect: 'change', allowFailure: true });
  });

  it('gives each tunnel and kill-switch group its own table and priority', async () => {
    await applier.apply(WIDE, { previous: undefined });
    expect((await ownedRules()).sort()).toEqual([
      '7350: from 10.10.0.0/24 lookup 7350 proto 104',
      '7350: from 2001:db8:10::/64 lookup 7350 proto 104',
      '7351: from 10.10.2.0/24 lookup 7351 proto 104',
      '7352: from 10.10.1.0/24 lookup 7352 proto 104',
    ]);
    const routes = await ownedRoutes();
    expect(routes.filter((r) => r.includes('blackhole'))).toEqual([
      'blackhole default table 7350 metric 4000000000',
      'blackhole default table 7352 metric 4000000000',
      'blackhole default dev lo table 7350 metric 4000000000 pref medium',
    ]);
    // The inspector reports each tunnel once, though tun0 steers two groups.
    const live = await inspector.read(WIDE);
    expect(live.tunnels).toEqual([
      { name: 'tun0', state: 'up' },
      { name: 'tun1', state: 'up' },
    ]);
    expect(live.missing).toEqual([]);
    expect(live.unexpected).toEqual([]);
  });

  it('with the tunnel down, blackholes the kill-switch class and lets the other fall back to main', async () => {
    expect(await routeOf('10.10.0.5', 'vwl0')).toMatch(/dev tun0 table 7350/);
    expect(await routeOf('10.10.2.5', 'ewl0')).toMatch(/dev tun0 table 7351/);
    await ip('link', 'set', 'tun0', 'down');
    try {
      // The blackhole refuses it (EINVAL from the route lookup).
      expect(await routeOf('10.10.0.5', 'vwl0')).toMatch(/Invalid argument/);
      expect(await routeOf('10.10.2.5', 'ewl0')).toBe(
        '203.0.113.7 from 10.10.2.5 via 198.51.100.1 dev eth0',
      );
    } finally {
      await ip('link', 'set', 'tun0', 'up');
      // Routes through a tunnel vanish with its link: put them back as the resident would.
      await applier.apply(WIDE, { previous: undefined, routingOnly: true });
    }
    expect((await inspector.read(WIDE)).missing).toEqual([]);
  });

  it('deletes the routes of tables a shrunk policy no longer uses', async () => {
    await applier.apply(NARROW, { previous: WIDE });
    expect(await ownedRoutes()).not.toContainEqual(expect.stringMatching(/table 735[12]/));
    expect((await ownedRules()).sort()).toEqual([
      '7350: from 10.10.0.0/24 lookup 7350 proto 104',
      '7350: from 2001:db8:10::/64 lookup 7350 proto 104',
    ]);
    const live = await inspector.read(NARROW);
    expect(live.unexpected).toEqual([]);
    expect(live.missing).toEqual([]);
  });

  it('reports an owned route in a table the policy does not use, and remove deletes it', async () => {
    await applier.apply(WIDE, { previous: NARROW });
    // Left behind by an apply with another first table id (--route-table 9000), say.
    await ip('route', 'add', '192.0.2.0/24', 'dev', 'tun1', 'table', '9000', 'proto', '104');
    // Not ours: another protocol in another table, a rule at another priority.
    await ip('route', 'add', '192.0.2.0/24', 'dev', 'eth0', 'table', '100');
    await ip('rule', 'add', 'from', '192.0.2.0/24', 'lookup', '100', 'priority', '100');
    expect((await inspector.read(WIDE)).unexpected).toEqual([
      { what: 'ip route 192.0.2.0/24 dev tun1 table 9000 metric 0', waitingFor: null },
    ]);

    const { removed } = await applier.remove();
    expect(removed).toContain('ip route unicast 192.0.2.0/24 table 9000');
    expect(removed).toContain('ip route blackhole 0.0.0.0/0 table 7352');
    expect(await ownedRoutes()).toEqual([]);
    expect(await ownedRules()).toEqual([]);
    const foreign = await host.run(['ip', 'route', 'show', 'table', '100'], { effect: 'read' });
    expect(foreign.stdout).toContain('192.0.2.0/24 dev eth0');
    const rules = await host.run(['ip', 'rule', 'show'], { effect: 'read' });
    expect(rules.stdout).toContain('100:\tfrom 192.0.2.0/24 lookup 100');
  });

  it('reads protocols as numbers, so an rt_protos name for 104 cannot make ours foreign', async () => {
    const before = host.invocations.length;
    await inspector.read(WIDE);
    const listings = host.invocations
      .slice(before)
      .map((i) => i.argv)
      // Listings run as `ip -batch -` per family, their commands on stdin; -N covers them all.
      .filter((argv) => argv.includes('rule') || argv.includes('route') || argv.includes('-batch'));
    expect(listings.length).toBeGreaterThan(0);
    for (const argv of listings) expect(argv, argv.join(' ')).toContain('-N');
    // One batch per family answered every listing: none fell back to a process of its own.
    expect(listings.map((argv) => argv.includes('-batch'))).toEqual([true, true]);
  });
});
