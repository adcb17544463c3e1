import { randomInt } from 'node:crypto';
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
  HOST,
  POLICY_A,
  TUNNEL,
  TUNNEL_FAR,
  UPLINK_FAR,
  createGatewayLab,
  createTempDir,
  hashOf,
  liveStamp,
  pollUntil,
  routingListing,
  startArrivalClock,
  startResident,
  startTraffic,
  status,
  statusInProcess,
  type Resident,
} from './support/vpn-gateway-lab.js';

// Recovery (DESIGN.md §4, §5): with `egressguard run` resident, vpn traffic flows through the
// tunnel again after the tunnel goes down and comes back, and after it is deleted and recreated
// (a new ifindex), and not one nonce'd packet crosses the uplink meanwhile; a deleted table is
// repaired. The target (within 2 s) is a benchmark figure (scripts/bench-recovery.mjs,
// docs/benchmarks.md); here the times are printed, and the bound is generous, for a loaded
// machine. Times run from the moment the test starts restoring the link (the lab's own commands
// included) to tcpdump's stamp on the first packet at the tunnel's far side.

/** Long enough for a machine under heavy load; the 2 s target is the benchmark's. */
const BOUND_MS = 30_000;

describe('run: re-converges after tunnel faults and a deleted table', () => {
  let lab: Lab;
  const state = createTempDir('egtest-resident');
  let resident: Resident;
  let hashA = '';
  const nonce = createNonce();
  const dport = randomInt(20_000, 30_000);
  let uplink: Observer;
  let traffic: ReturnType<typeof startTraffic>[] = [];
  let clock: ReturnType<typeof startArrivalClock>;
  let tunnelSeen = 0;
  const measured: Record<string, number> = {};

  /** A tunnel observer counts until the tunnel's far end is deleted with it. */
  const observeTunnel = async (): Promise<Observer> => {
    const observer = await startObserver(lab, {
      ...TUNNEL_FAR,
      nonce,
      control: { from: 'vpnwl', dst: '203.0.113.99' }, // the vpn class's own path
    });
    await observer.armed();
    return observer;
  };

  /** Milliseconds from `since` to the first packet of each family at the tunnel's far side. */
  const recovery = async (label: string, since: number): Promise<void> => {
    for (const family of [4, 6] as const) {
      const first = await clock.firstAfter(since, family, BOUND_MS);
      expect(first, `${label}: no IPv${family} packet through the tunnel in time`).toBeDefined();
      measured[`${label} IPv${family}`] = Math.round((first ?? Infinity) - since);
    }
  };

  beforeAll(async () => {
    lab = await createGatewayLab();
    hashA = await hashOf(lab, state.path, POLICY_A);
    resident = startResident(lab, state.path, { policy: POLICY_A, tickMs: 500 });
    expect(await resident.waitFor('watching', 0, 15_000)).toBeDefined();
    expect(await status(lab, state.path)).toMatchObject({ condition: 'InSync', liveHash: hashA });

    uplink = await startObserver(lab, {
      ...UPLINK_FAR,
      nonce,
      control: { from: 'inetwl', dst: '203.0.113.99' }, // along the forward path
    });
    await uplink.armed();
    clock = startArrivalClock(lab, { ...TUNNEL_FAR, dport });
    const vpn = (dst: string): PacketSpec[] => [
      { kind: 'udp', dst, dport, count: 100, intervalMs: 20 },
    ];
    // About 100 packets/s per family in two staggered lanes, until the last test stops it (the
    // bound only keeps a test that died from sending for ever).
    traffic = [DST4, DST6].map((dst) =>
      startTraffic(lab, { node: 'vpnwl', nonce, packets: vpn(dst), maxMs: 600_000, lanes: 2 }),
    );
  });

  afterAll(async () => {
    await Promise.all(traffic.map((t) => t.stop()));
    await lab.destroy();
    state.dispose();
    console.info(`resident recovery (ms): ${JSON.stringify(measured)}`);
  });

  it('flows through the tunnel before any fault', async () => {
    const observer = await observeTunnel();
    expect(await clock.firstAfter(0, 4, BOUND_MS)).toBeDefined();
    expect(await clock.firstAfter(0, 6, BOUND_MS)).toBeDefined();
    tunnelSeen += (await observer.stop()).packets.length;
  });

  it('re-adds the tunnel routes after the tunnel goes down and comes back', async () => {
    const observer = await observeTunnel();
    await lab.setLinkDown(TUNNEL);
    // The kernel drops the routes through a link that goes down; only the blackhole is left.
    expect(await routingListing(lab, 7350)).not.toContain('default dev tun0');
    // Traffic ran while it was down (what leaked would be seen on the uplink).
    await Promise.all(traffic.map((t) => t.flowing()));
    const upAt = Date.now();
    await lab.setLinkUp(TUNNEL);
    await recovery('down/up', upAt);
    expect(await resident.waitFor('readded-routes', upAt, BOUND_MS)).toBeDefined();
    tunnelSeen += (await observer.stop()).packets.length;
  });

  it('re-adds them after the tunnel is deleted and recreated', async () => {
    const before = await lab.linkState(TUNNEL);
    await lab.deleteLink(TUNNEL);
    expect(await routingListing(lab, 7350)).not.toContain('default dev tun0');
    await Promise.all(traffic.map((t) => t.flowing()));
    const recreatedAt = Date.now();
    await lab.recreateLink(TUNNEL, { routes: 'none' });
    await recovery('delete/recreate', recreatedAt);
    expect((await lab.linkState(TUNNEL)).ifindex).not.toBe(before.ifindex);
    const observer = await observeTunnel();
    tunnelSeen += (await observer.stop()).packets.length;
  });

  it('repairs a deleted table', async () => {
    const deletedAt = Date.now();
    await lab
      .runner(HOST)
      .run(['nft', 'delete', 'table', 'inet', 'egressguard'], { effect: 'change' });
    // Polled in this process: the CLI's status function, without a node start-up per poll.
    const back = await pollUntil(
      async () => ((await liveStamp(lab)) === hashA ? Date.now() : undefined),
      { timeoutMs: BOUND_MS, everyMs: 20 },
    );
    const inSync = await pollUntil(
      async () =>
        (await statusInProcess(lab, state.path)).condition === 'InSync' ? Date.now() : undefined,
      { timeoutMs: BOUND_MS, everyMs: 20 },
    );
    measured['table back'] = Math.round((back ?? Infinity) - deletedAt);
    measured['status InSync'] = Math.round((inSync ?? Infinity) - deletedAt);
    expect(back, 'the table was not repaired').toBeDefined();
    expect(inSync, 'status did not say InSync again').toBeDefined();
    expect(await resident.waitFor('repaired-table', deletedAt, BOUND_MS)).toBeDefined();
    // And the CLI agrees, with its exit code.
    expect(await status(lab, state.path)).toMatchObject({ condition: 'InSync', exitCode: 0 });
  });

  it('let not one vpn packet out by the uplink, and left rules in place when stopped', async () => {
    const totals = await Promise.all(traffic.map((t) => t.stop()));
    const sent = totals.reduce((sum, t) => sum + t.sent, 0);
    const seen = await uplink.stop();
    measured['vpn sent'] = sent;
    measured['through the tunnel'] = tunnelSeen;
    measured['on the uplink'] = seen.packets.length;
    expect(seen.packets).toEqual([]);
    expect(tunnelSeen).toBeGreaterThan(0);

    const stopped = await resident.stop();
    expect(stopped).toMatchObject({ code: 0, signal: null });
    expect(await status(lab, state.path)).toMatchObject({
      condition: 'InSync',
      liveHash: hashA,
    });
    expect(await routingListing(lab, 7350)).toContain('default dev tun0 proto 104');
  });

  it(
    'recompiles when the default route moves to another uplink, not at the tick',
    { timeout: 120_000 },
    async () => {
      const live = startResident(lab, state.path, {
        policy: POLICY_A,
        tickMs: 60_000,
        liveFacts: true,
      });
      const host = lab.runner(HOST);
      const moveDefault = (via: string, dev: string) =>
        host.run(['ip', 'route', 'replace', 'default', 'via', via, 'dev', dev], {
          effect: 'change',
        });
      try {
        expect(await live.waitFor('watching', 0, BOUND_MS)).toBeDefined();
        // The pass at start reads live facts too: one that straddled the move below would
        // reapply as a "periodic check". Move only once it is done.
        expect(await live.waitFor('checked', 0, BOUND_MS)).toBeDefined();
        // One uplink for both families: lan0 has no IPv6, so IPv6 loses its default route first;
        await host.run(['ip', '-6', 'route', 'del', 'default'], { effect: 'change' });
        const movedAt = Date.now();
        await moveDefault('192.168.1.10', 'lan0');
        // The tick is a minute: a reapply before it came from watching the route.
        const at = await live.waitFor('reapplied', movedAt, BOUND_MS);
        expect(at, 'no reapply after the default route moved').toBeDefined();
        // Before the tick, so from the route event (the one that moved the default, or the one of
        // the deleted IPv6 default when its reconcile ran after the move: either is the watch).
        expect((at ?? Infinity) - movedAt).toBeLessThan(60_000);
        const entry = live.log.find((e) => e.action === 'reapplied' && e.at >= movedAt);
        expect(entry?.message).toMatch(/\(route: /);
        measured['uplink moved, reapplied'] = Math.round((at ?? Infinity) - movedAt);
      } finally {
        await moveDefault('198.51.100.1', 'eth0');
        await host.run(['ip', '-6', 'route', 'replace', 'default', 'via', '2001:db8:ffff::1'], {
          effect: 'change',
        });
        expect(await live.stop()).toMatchObject({ code: 0, signal: null });
      }
    },
  );
});
