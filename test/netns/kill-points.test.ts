import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  createNonce,
  startObserver,
  type Lab,
  type Observer,
  type PacketSpec,
} from '../../src/prove/index.js';
import {
  DST4,
  DST6,
  FACTS,
  HOST,
  POLICY_A,
  TUNNEL,
  UPLINK_FAR,
  apply,
  cli,
  createGatewayLab,
  createTempDir,
  hashOf,
  routingListing,
  startTraffic,
  status,
  target,
  writePolicyB,
} from './support/vpn-gateway-lab.js';

// Kill points (DESIGN.md §5): egressguard SIGKILLed by its own fault hooks at each step of an
// apply from one policy to the other (A and B, B excepting one more network from the kill
// switch). The next `status` tells the truth (Interrupted, with the hash that is really live),
// the next `apply` converges, and all along not one nonce'd packet of the vpn class leaves by the
// uplink while the tunnel is down. One lab; each point starts from the generation the previous
// one converged to, so the direction alternates (A→B, B→A, …) and no apply is spent going back.

type Point = 'before-nft-commit' | 'after-nft-commit' | 'after-routes' | 'before-state-write';
type Side = 'A' | 'B';

/** Which side is live after a kill at each point: the table's, and the routing's. */
const LIVE_AFTER_KILL: Readonly<Record<Point, { table: 'from' | 'to'; routing: 'from' | 'to' }>> = {
  'before-nft-commit': { table: 'from', routing: 'from' },
  'after-nft-commit': { table: 'to', routing: 'from' },
  'after-routes': { table: 'to', routing: 'to' },
  'before-state-write': { table: 'to', routing: 'to' },
};
const POINTS = Object.keys(LIVE_AFTER_KILL) as Point[];

// Policy B's extra exception: one more throw route in table 7350.
const B_ROUTE = 'throw 172.16.0.0/12 proto 104';

describe('apply killed at each step', () => {
  let lab: Lab;
  const state = createTempDir('egtest-kill-points');
  const policies: Record<Side, string> = { A: POLICY_A, B: '' };
  const hashes: Record<Side, string> = { A: '', B: '' };
  const nonce = createNonce();
  let uplink: Observer;
  let traffic: ReturnType<typeof startTraffic>[] = [];
  let live: { side: Side; generation: number } = { side: 'A', generation: 0 };

  beforeAll(async () => {
    lab = await createGatewayLab();
    policies.B = writePolicyB(state.path);
    // The tunnel is down throughout: only egressguard keeps the vpn class off the uplink.
    await lab.setLinkDown(TUNNEL);
    const [first, planned] = await Promise.all([
      apply(lab, state.path, policies.A),
      hashOf(lab, state.path, policies.B),
    ]);
    hashes.A = first.hash;
    hashes.B = planned;
    expect(hashes.B).not.toBe(hashes.A);
    expect(first).toMatchObject({
      generation: 1,
      deferred: [
        { what: 'route 0.0.0.0/0 dev tun0 table 7350', waitingFor: 'tun0' },
        { what: 'route ::/0 dev tun0 table 7350', waitingFor: 'tun0' },
      ],
    });
    live = { side: 'A', generation: 1 };
    uplink = await startObserver(lab, {
      ...UPLINK_FAR,
      nonce,
      // Along the forward path: class internet leaves by the uplink under both policies.
      control: { from: 'inetwl', dst: '203.0.113.99' },
    });
    await uplink.armed();
    const vpn = (dst: string): PacketSpec[] => [
      { kind: 'udp', dst, dport: 5000, count: 100, intervalMs: 10 },
    ];
    traffic = [DST4, DST6].map((dst) =>
      startTraffic(lab, { node: 'vpnwl', nonce, packets: vpn(dst), maxMs: 60_000 }),
    );
    // The senders are up: every kill happens under traffic.
    await Promise.all(traffic.map((t) => t.flowing()));
  });

  afterAll(async () => {
    await lab.destroy();
    state.dispose();
  });

  it.each(POINTS)('tells the truth and converges after a SIGKILL at %s', async (point) => {
    const from = live.side;
    const to: Side = from === 'A' ? 'B' : 'A';
    const killed = await cli(
      ['apply', policies[to], '--facts', FACTS, '--json', ...target(lab, state.path)],
      { faults: `${point}=kill` },
    );
    expect(killed).toMatchObject({ signal: 'SIGKILL', stdout: '' });

    const expected = LIVE_AFTER_KILL[point];
    const tableSide = expected.table === 'from' ? from : to;
    const truth = await status(lab, state.path);
    expect(truth).toMatchObject({
      condition: 'Interrupted',
      exitCode: 3,
      liveHash: hashes[tableSide],
      appliedHash: hashes[from],
      generation: live.generation,
      attempt: { hash: hashes[to], outcome: 'in-progress' },
    });
    expect(truth.reasons.join('\n')).toContain(`live hash is ${hashes[tableSide].slice(0, 12)}`);
    const routing = await routingListing(lab, 7350);
    if ((expected.routing === 'from' ? from : to) === 'B') expect(routing).toContain(B_ROUTE);
    else expect(routing).not.toContain(B_ROUTE);
    // Whatever the step, the blackholes and the rules never left.
    expect(routing).toContain('blackhole default proto 104 metric 4000000000');
    expect(routing).toContain('blackhole default dev lo proto 104 metric 4000000000');
    expect(routing).toContain('7350:\tfrom 10.10.0.0/24 lookup 7350 proto 104');
    expect(routing).toContain('7350:\tfrom 2001:db8:10::/64 lookup 7350 proto 104');

    const converged = await apply(lab, state.path, policies[to]);
    expect(converged).toMatchObject({
      changed: true,
      generation: live.generation + 1,
      hash: hashes[to],
    });
    expect(await status(lab, state.path)).toMatchObject({
      condition: 'InSync',
      exitCode: 0,
      liveHash: hashes[to],
      appliedHash: hashes[to],
      attempt: null,
    });
    live = { side: to, generation: converged.generation };
  });

  it('clears what a dead apply staged, and its marker, at the next apply', async () => {
    const other: Side = live.side === 'A' ? 'B' : 'A';
    const sets = async (): Promise<number> =>
      (
        await lab
          .runner(HOST)
          .run(['nft', '-t', 'list', 'table', 'inet', 'egressguard'], { effect: 'read' })
      ).stdout
        .split('\n')
        .filter((l) => l.startsWith('\tset ')).length;
    const before = await sets();
    const killed = await cli(
      ['apply', policies[other], '--facts', FACTS, ...target(lab, state.path)],
      { faults: 'before-nft-commit=kill' },
    );
    expect(killed.signal).toBe('SIGKILL');
    expect(await status(lab, state.path)).toMatchObject({ condition: 'Interrupted' });
    // Killed between staging and swap: the other policy's new sets are in the table, and
    // nothing refers to them. Re-applying what is live removes them.
    expect(await sets()).toBeGreaterThan(before);
    const again = await apply(lab, state.path, policies[live.side]);
    expect(again).toMatchObject({ changed: true, hash: hashes[live.side] });
    live = { side: live.side, generation: again.generation };
    expect(await sets()).toBe(before);
    expect(await status(lab, state.path)).toMatchObject({
      condition: 'InSync',
      liveHash: hashes[live.side],
      attempt: null,
    });
  });

  it('let not one vpn packet out by the uplink meanwhile', async () => {
    const totals = await Promise.all(traffic.map((t) => t.stop()));
    const seen = await uplink.stop();
    const sent = totals.reduce((sum, t) => sum + t.sent, 0);
    console.info(`kill points: ${sent} vpn packets sent, ${seen.packets.length} on the uplink`);
    expect(sent).toBeGreaterThan(500);
    expect(seen.packets).toEqual([]);
  });
});
