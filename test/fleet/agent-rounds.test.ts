import { randomBytes } from 'node:crypto';
import { getEventListeners } from 'node:events';
import { writeFileSync } from 'node:fs';
import { createServer, connect, type Server, type Socket } from 'node:net';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  createFirewallEngine,
  createRecordingEngine,
  createBundleHasher,
  runAgent,
  type AgentClock,
  type AgentEnd,
  type FirewallGeneration,
  type HostEngine,
} from '../../src/agent/index.js';
import type { ResidentPass } from '../../src/apply/index.js';
import type { HostView } from '../../src/fleet/index.js';
import { createHostTarget } from '../../src/host/index.js';
import { createRunner } from '../../src/runner/index.js';
import type { RunningServer } from '../../src/server/index.js';
import { StateDir } from '../../src/state/index.js';
import { createScratch, factsFor, startTestServer, waitFor } from './support/fleet-lab.js';

// The agent's rounds between the watchers and the controller (review findings): a link event the
// watchers see ends the round's long poll, never the backoff after a failed one (with the
// controller down the agent would call it at every event); and a round leaves nothing behind on
// the agent's long-lived stop signal (AbortSignal.any did, one combined signal per round:
// nodejs/node#55351). Real agents in this process: the firewall engine in a network namespace of
// the test's own, with real links and the resident mode's real watchers, and the recording
// engine where only the protocol matters; both against a real controller.

/** One call of the agent's clock to wait, as the test sees it. */
interface Sleep {
  readonly ms: number;
  ended: boolean;
  /** Ends it now, as its timer would. */
  end(): void;
}

/** The system clock, whose every sleep the test can see and end early. */
function createWatchedClock(): { clock: AgentClock; sleeps: Sleep[] } {
  const sleeps: Sleep[] = [];
  const clock: AgentClock = {
    now: () => Date.now(),
    sleep: (ms, signal) =>
      new Promise((resolve) => {
        const entry: Sleep = { ms, ended: false, end: () => undefined };
        const timer = setTimeout(done, ms);
        function done(): void {
          if (entry.ended) return;
          entry.ended = true;
          clearTimeout(timer);
          signal.removeEventListener('abort', done);
          resolve();
        }
        entry.end = done;
        sleeps.push(entry);
        if (signal.aborted) done();
        else signal.addEventListener('abort', done, { once: true });
      }),
  };
  return { clock, sleeps };
}

/**
 * A TCP relay in front of the controller, so the test can take it away and count what the agent
 * does meanwhile: while down, every connection is refused (closed at once) and counted.
 */
async function startRelay(upstreamPort: number): Promise<{
  readonly port: number;
  readonly refused: number;
  setDown(down: boolean): void;
  close(): Promise<void>;
}> {
  let down = false;
  let refused = 0;
  const open = new Set<Socket>();
  const server: Server = createServer((socket) => {
    if (down) {
      refused += 1;
      socket.destroy();
      return;
    }
    const upstream = connect(upstreamPort, '127.0.0.1');
    for (const s of [socket, upstream]) {
      open.add(s);
      s.on('error', () => undefined);
      s.on('close', () => {
        open.delete(s);
        socket.destroy();
        upstream.destroy();
      });
    }
    socket.pipe(upstream).pipe(socket);
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const address = server.address();
  return {
    port: typeof address === 'object' && address !== null ? address.port : 0,
    get refused() {
      return refused;
    },
    setDown(next) {
      down = next;
      if (down) for (const s of open) s.destroy();
    },
    close: () =>
      new Promise((resolve) => {
        for (const s of open) s.destroy();
        server.close(() => {
          resolve();
        });
      }),
  };
}

/**
 * The combined signals a signal keeps for AbortSignal.any: Node's own set, read as
 * nodejs/node#55351 reads it (0 where this Node keeps none).
 */
function dependantsOf(signal: AbortSignal): number {
  const key = Object.getOwnPropertySymbols(signal).find(
    (s) => s.description === 'kDependantSignals',
  );
  if (key === undefined) return 0;
  const set = (signal as unknown as Record<symbol, ReadonlySet<unknown> | undefined>)[key];
  return set?.size ?? 0;
}

async function bootstrapToken(server: RunningServer, dir: string, name: string): Promise<string> {
  const { token } = await server.controller.createBootstrapToken(
    { ttlMs: 3_600_000, uses: 1 },
    'test',
  );
  const file = join(dir, `${name}.token`);
  writeFileSync(file, `${token}\n`, { mode: 0o600 });
  return file;
}

describe('with the controller down, watcher wakeups do not shorten the reconnect backoff', () => {
  const scratch = createScratch();
  const root = createRunner();
  const ns = `egtest-rounds-${randomBytes(3).toString('hex')}`;
  const ipInNs = (argv: string[]) => root.run(['ip', '-n', ns, ...argv], { effect: 'change' });
  let running: RunningServer | undefined;
  let relay: Awaited<ReturnType<typeof startRelay>> | undefined;
  const stop = new AbortController();
  let outcome: Promise<AgentEnd> | undefined;
  const log: string[] = [];
  const passes: ResidentPass[] = [];
  const { clock, sleeps } = createWatchedClock();
  const server = (): RunningServer => {
    if (running === undefined) throw new Error('the controller did not start');
    return running;
  };
  const host = async (): Promise<HostView | undefined> =>
    (await server().controller.listHosts()).find((h) => h.name === 'host-r');
  const explain = (error: unknown): never => {
    throw new Error(`${(error as Error).message}\n--- agent log\n${log.join('\n').slice(-4000)}`);
  };
  /** The backoff after a failed request: the only sleep this long (every jitter here is 0). */
  const backoffSleeps = () => sleeps.filter((s) => s.ms >= 100_000);

  beforeAll(async () => {
    const dir = scratch.dir('agent-rounds');
    running = await startTestServer({
      store: `sqlite:${join(dir, 'fleet.db')}`,
      stateDir: join(dir, 'server'),
      pollIntervalMs: 600_000,
      graceMs: 1_200_000,
    });
    relay = await startRelay(Number(new URL(running.url).port));
    await root.run(['ip', 'netns', 'add', ns], { effect: 'change' });
    await ipInNs(['link', 'set', 'lo', 'up']);
    // The kernel here has no dummy links: every interface is one end of a veth pair.
    for (const [name, address] of [
      ['eth0', '198.51.100.10/24'],
      ['tun0', '10.200.0.2/32'],
    ] as const) {
      await ipInNs(['link', 'add', name, 'type', 'veth', 'peer', 'name', `${name}p`]);
      await ipInNs(['address', 'add', address, 'dev', name]);
      await ipInNs(['link', 'set', name, 'up']);
      await ipInNs(['link', 'set', `${name}p`, 'up']);
    }
    await ipInNs(['route', 'add', 'default', 'via', '198.51.100.1', 'dev', 'eth0']);
    const firewall = createFirewallEngine({
      target: createHostTarget({ netns: ns, stateDir: join(dir, 'agent'), options: {} }),
      hostname: 'host-r',
      labels: () => ({}),
    });
    if (firewall.watch === undefined) throw new Error('the firewall engine has no watchers');
    const watch = firewall.watch.bind(firewall);
    // The real engine; the test only hears of its watchers' passes too.
    const engine: HostEngine<FirewallGeneration> = {
      ...firewall,
      watch: (input) =>
        watch({
          ...input,
          onPass: (pass) => {
            input.onPass(pass);
            passes.push(pass);
          },
        }),
    };
    outcome = runAgent({
      serverUrl: `https://127.0.0.1:${relay.port}`,
      tokenFile: await bootstrapToken(running, dir, 'host-r'),
      stateDir: new StateDir({ root: join(dir, 'agent-state') }),
      engine,
      hostname: 'host-r',
      agentVersion: 'test',
      signal: stop.signal,
      clock,
      random: () => 0.5,
      startJitterMs: 0,
      pollJitterMs: 0,
      // Half of ten minutes at every failure (full jitter at 0.5): a backoff that ends before the
      // test releases it was cut short.
      connectBackoff: { baseMs: 600_000, capMs: 600_000 },
      log: (line) => log.push(line),
    });
    await waitFor(
      'host-r to enroll and check in, its watchers running',
      async () =>
        (await host())?.lastCheckinAt != null && log.some((l) => l.startsWith('watcher watching'))
          ? true
          : undefined,
      60_000,
    ).catch(explain);
  }, 180_000);

  afterAll(async () => {
    stop.abort();
    await outcome?.catch(() => undefined);
    await relay?.close();
    await root.run(['ip', 'netns', 'delete', ns], { effect: 'change', allowFailure: true });
    await running?.close();
    scratch.cleanup();
  }, 60_000);

  it('calls the controller once per backoff however many link events wake it', async () => {
    if (relay === undefined) throw new Error('no relay');
    const down = relay;
    down.setDown(true);
    // The long poll it was in is cut: one failure, then the backoff.
    const first = await waitFor(
      'the agent to back off',
      () => backoffSleeps().find((s) => !s.ended),
      60_000,
    ).catch(explain);
    const attempts = down.refused;
    expect(log.join('\n')).toMatch(/enforcing what is applied, trying again in 300 s/);

    // Three times down and up: link events, each pass of the watchers a wakeup of the round.
    const linkPasses = () => passes.filter((p) => p.trigger === 'link').length;
    for (let n = 1; n <= 3; n++) {
      for (const state of ['down', 'up']) {
        const seen = linkPasses();
        await ipInNs(['link', 'set', 'tun0', state]);
        await waitFor(`the watchers to see tun0 ${state} (${n})`, () =>
          linkPasses() > seen ? true : undefined,
        ).catch(explain);
      }
    }
    // A wakeup ends the sleep it is given at once (an abort listener): none has.
    expect(first.ended).toBe(false);
    expect(backoffSleeps()).toHaveLength(1);
    expect(down.refused).toBe(attempts);

    // Its backoff over, the agent calls once, fails, and backs off again.
    first.end();
    const second = await waitFor(
      'the agent to back off again',
      () => backoffSleeps().find((s) => !s.ended),
      60_000,
    ).catch(explain);
    expect(down.refused).toBe(attempts + 1);

    // Back: the next attempt reaches the controller.
    const backAt = Date.now();
    down.setDown(false);
    second.end();
    await waitFor(
      'host-r to check in again',
      async () => ((await host())?.lastCheckinAt ?? 0) >= backAt || undefined,
      60_000,
    ).catch(explain);
    expect(down.refused).toBe(attempts + 1);
  }, 180_000);
});

describe('a round leaves nothing on the agent stop signal', () => {
  const scratch = createScratch();
  let running: RunningServer | undefined;

  afterAll(async () => {
    await running?.close();
    scratch.cleanup();
  });

  it('keeps the stop signal’s listeners and combined signals bounded over hundreds of rounds', async () => {
    const dir = scratch.dir('agent-signal');
    // A long poll that the controller answers at once: a round is a few milliseconds.
    running = await startTestServer({
      store: `sqlite:${join(dir, 'fleet.db')}`,
      stateDir: join(dir, 'server'),
      pollIntervalMs: 1,
      graceMs: 600_000,
    });
    const ROUNDS = 300;
    const stop = new AbortController();
    const samples: { listeners: number; dependants: number }[] = [];
    // Each round ends with the poll's jitter (0 here): sample the stop signal there.
    const clock: AgentClock = {
      now: () => Date.now(),
      sleep: () => {
        samples.push({
          listeners: getEventListeners(stop.signal, 'abort').length,
          dependants: dependantsOf(stop.signal),
        });
        if (samples.length >= ROUNDS) stop.abort();
        return new Promise((resolve) => setImmediate(resolve));
      },
    };
    const log: string[] = [];
    const outcome = await runAgent({
      serverUrl: running.url,
      tokenFile: await bootstrapToken(running, dir, 'host-s'),
      stateDir: new StateDir({ root: join(dir, 'agent') }),
      engine: createRecordingEngine({
        facts: factsFor('host-s'),
        hashBundle: createBundleHasher(),
      }),
      hostname: 'host-s',
      agentVersion: 'test',
      signal: stop.signal,
      clock,
      random: () => 0.5,
      startJitterMs: 0,
      pollJitterMs: 0,
      log: (line) => log.push(line),
    });
    expect(outcome, log.join('\n')).toBe('stopped');
    expect(samples.length).toBeGreaterThanOrEqual(ROUNDS);
    // The agent's own listener for its watchers and the round's: never one per round.
    expect(Math.max(...samples.map((s) => s.listeners))).toBeLessThanOrEqual(3);
    expect(samples.at(-1)?.listeners).toBe(samples[10]?.listeners);
    expect(Math.max(...samples.map((s) => s.dependants))).toBeLessThanOrEqual(2);
    expect(getEventListeners(stop.signal, 'abort')).toHaveLength(0);
  }, 180_000);
});
