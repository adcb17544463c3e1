import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { createInterface } from 'node:readline';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createRunner } from '../../src/runner/index.js';
import {
  countPackets,
  createLab,
  createNonce,
  reapStaleLabs,
  sendPackets,
  startObserver,
  withLab,
  type PacketKind,
  type PacketSpec,
  type Topology,
} from '../../src/prove/index.js';
import { labPython } from '../../src/prove/lab/lab-python.js';
import {
  labScript,
  missingLinkAddresses,
  restoreLinkAddresses,
  startService,
} from '../../src/prove/lab-services.js';
import { startStream } from '../../src/prove/traffic-stream.js';

// Every address beyond the host is from the documentation ranges (RFC 5737, RFC 3849); the
// workload and tunnel sides use private ranges. None of it exists outside the lab's namespaces.
const DST4 = '203.0.113.10';
const DST6 = '2001:db8:113::10';

const topology: Topology = {
  nodes: {
    workload: {
      routes: [
        { to: 'default', via: '10.10.0.1' },
        { to: 'default', via: 'fd00:10::1' },
      ],
    },
    host: {
      forwarding: true,
      sysctls: { 'net.ipv4.ip_nonlocal_bind': 1, 'net.ipv6.ip_nonlocal_bind': 1 },
      routes: [
        { to: 'default', via: '198.51.100.1' },
        { to: 'default', via: '2001:db8:51::1' },
        { to: 'default', via: '10.200.0.2', table: 100 },
      ],
    },
    internet: {
      routes: [
        { to: '10.10.0.0/24', via: '198.51.100.2' },
        { to: 'fd00:10::/64', via: '2001:db8:51::2' },
      ],
    },
    'tunnel-peer': { routes: [{ to: '10.10.0.0/24', via: '10.200.0.1' }] },
    lan: {},
  },
  links: [
    {
      a: { node: 'host', iface: 'vwl0', addresses: ['10.10.0.1/24', 'fd00:10::1/64'] },
      b: { node: 'workload', iface: 'eth0', addresses: ['10.10.0.2/24', 'fd00:10::2/64'] },
    },
    {
      a: { node: 'host', iface: 'up0', addresses: ['198.51.100.2/24', '2001:db8:51::2/64'] },
      b: { node: 'internet', iface: 'eth0', addresses: ['198.51.100.1/24', '2001:db8:51::1/64'] },
    },
    {
      a: { node: 'host', iface: 'tun0', addresses: ['10.200.0.1/30'] },
      b: { node: 'tunnel-peer', iface: 'tun0', addresses: ['10.200.0.2/30'] },
      mtu: 1420,
    },
    {
      a: { node: 'host', iface: 'vlan0', addresses: ['192.168.50.1/24'] },
      b: { node: 'lan', iface: 'eth0', addresses: ['192.168.50.2/24'] },
    },
  ],
};

const root = createRunner({ guard: true });

async function labNamespaces(): Promise<string[]> {
  const { stdout } = await root.run(['ip', 'netns', 'list'], { effect: 'read' });
  return stdout
    .split('\n')
    .map((line) => line.split(' ')[0] ?? '')
    .filter((name) => name.startsWith('eglab-'));
}

async function rootLinks(): Promise<string> {
  const { stdout } = await root.run(['ip', '-o', 'link', 'show'], { effect: 'read' });
  return stdout
    .split('\n')
    .map((line) => line.split(':')[1]?.trim())
    .sort()
    .join(' ');
}

let linksBefore = '';
beforeAll(async () => {
  linksBefore = await rootLinks();
});

afterAll(async () => {
  // Nothing of this process's labs is left, and the machine's own links are as they were.
  const own = `eglab-${process.pid.toString(36)}-`;
  expect((await labNamespaces()).filter((ns) => ns.startsWith(own))).toEqual([]);
  expect(await rootLinks()).toBe(linksBefore);
});

describe('lab kit: sender and observer', () => {
  it('counts every kind of probe, both families, exactly on the far side of the uplink', async () => {
    await withLab(topology, async (lab) => {
      const nonce = createNonce();
      const observer = await startObserver(lab, {
        node: 'internet',
        iface: 'eth0',
        nonce,
        // The control takes the probes' path: workload → host → internet.
        control: { from: 'workload', dst: '198.51.100.1' },
      });
      await observer.armed();
      const n = 5;
      const kinds: { kind: PacketKind; dport?: number; protocol?: number }[] = [
        { kind: 'tcp', dport: 443 },
        { kind: 'udp', dport: 5000 },
        { kind: 'dns' },
        { kind: 'icmp' },
        { kind: 'gre' },
        { kind: 'esp' },
        { kind: 'sctp', dport: 5000 },
        { kind: 'ip', protocol: 99 }, // "any private encryption scheme"
      ];
      const packets: PacketSpec[] = [DST4, DST6].flatMap((dst) =>
        kinds.map((k) => ({ ...k, dst, count: n })),
      );
      const sent = await sendPackets(lab.runner('workload'), { nonce, packets });
      expect(sent).toMatchObject({ sent: packets.length * n, failed: 0 });

      const seen = await observer.stop();
      for (const { kind } of kinds) {
        expect(countPackets(seen.packets, { kind, family: 4, src: '10.10.0.2', dst: DST4 })).toBe(
          n,
        );
        expect(countPackets(seen.packets, { kind, family: 6, src: 'fd00:10::2', dst: DST6 })).toBe(
          n,
        );
        expect(seen.counts[kind]).toBe(2 * n);
      }
      expect(seen.packets).toHaveLength(packets.length * n);
      expect(countPackets(seen.packets, { kind: 'dns' })).toBe(
        seen.packets.filter((p) => p.dstPort === 53).length,
      );
      expect(seen.packets.filter((p) => p.kind === 'sctp').map((p) => p.dstPort)).toEqual(
        new Array<number>(2 * n).fill(5000),
      );
    });
  });

  it('sends from a source address that is not on the sender, and the far side sees it', async () => {
    await withLab(topology, async (lab) => {
      const nonce = createNonce();
      const observer = await startObserver(lab, { node: 'internet', iface: 'eth0', nonce });
      await observer.armed(); // the default control: host → internet's own address
      await sendPackets(lab.runner('workload'), {
        nonce,
        packets: [
          { kind: 'udp', src: '10.99.0.7', dst: DST4, dport: 9, count: 3 },
          { kind: 'tcp', src: 'fd00:99::7', dst: DST6, dport: 443, count: 3 },
        ],
      });
      const seen = await observer.stop();
      expect(countPackets(seen.packets, { kind: 'udp', src: '10.99.0.7' })).toBe(3);
      expect(countPackets(seen.packets, { kind: 'tcp', src: 'fd00:99::7' })).toBe(3);
      expect(seen.packets).toHaveLength(6);
    });
  });

  it('refuses to arm an observer whose interface the positive control does not cross', async () => {
    await withLab(topology, async (lab) => {
      const observer = await startObserver(lab, {
        node: 'lan',
        iface: 'eth0',
        nonce: createNonce(),
        control: { from: 'workload', dst: DST4, timeoutMs: 600 },
      });
      await expect(observer.armed()).rejects.toThrow(
        /Cannot arm the observer on "eth0" of lab node "lan": its positive control \(UDP from node "workload" to 203\.0\.113\.10\) was not seen in 600 ms/,
      );
      await expect(observer.stop()).rejects.toThrow(/it was never armed/);
    });
  });

  it('names the interfaces a node has when asked to observe one it lacks', async () => {
    await withLab(topology, async (lab) => {
      await expect(
        startObserver(lab, { node: 'internet', iface: 'eth9', nonce: createNonce() }),
      ).rejects.toThrow(
        /Cannot observe "eth9" in lab node "internet": no such interface; it has "lo", "eth0"/,
      );
    });
  });

  it('builds echo requests past sequence 65,535 (a stream at 150 rounds/s gets there in 7 min)', () => {
    // A long reapply-under-traffic run once crashed its streams here: the echo sequence field is
    // 16 bits, and the stream's round counter is not.
    const script = [
      'import ipaddress, sys',
      `sys.path.insert(0, ${JSON.stringify(join(import.meta.dirname, '../../scripts/lab'))})`,
      'import sender',
      'for src, dst in (("10.0.0.1", "203.0.113.10"), ("2001:db8::1", "2001:db8:113::10")):',
      '    m = sender.icmp_message(ipaddress.ip_address(src), ipaddress.ip_address(dst), 70000, b"x")',
      '    print(int.from_bytes(m[6:8], "big"))',
    ].join('\n');
    const result = spawnSync('python3', ['-c', script], { encoding: 'utf8' });
    expect(result.stderr).toBe('');
    expect(result.stdout.trim().split('\n')).toEqual([
      String(70000 & 0xffff),
      String(70000 & 0xffff),
    ]);
  });
});

describe('lab kit: link faults', () => {
  it('takes links down, removes carrier, renames, deletes and recreates them', async () => {
    await withLab(topology, async (lab) => {
      const tun = { node: 'host', iface: 'tun0' };
      const host = lab.runner('host');
      const tableRoutes = async (): Promise<string> =>
        (await host.run(['ip', 'route', 'show', 'table', '100'], { effect: 'read' })).stdout;
      expect(await tableRoutes()).toContain('default via 10.200.0.2 dev tun0');
      const original = await lab.linkState(tun);
      expect(original).toMatchObject({ isUp: true, hasCarrier: true });

      await lab.setCarrierOff(tun);
      expect(await lab.linkState(tun)).toMatchObject({ isUp: true, hasCarrier: false });
      expect(await tableRoutes()).toContain('linkdown'); // the route stays, flagged
      await lab.setCarrierOn(tun);
      expect(await lab.linkState(tun)).toMatchObject({ isUp: true, hasCarrier: true });

      await lab.renameLink(tun, 'tun9');
      expect(lab.peerOf({ node: 'tunnel-peer', iface: 'tun0' })).toEqual({
        node: 'host',
        iface: 'tun9',
      });
      expect(await lab.linkState({ node: 'host', iface: 'tun9' })).toMatchObject({
        ifindex: original.ifindex,
        isUp: true,
      });

      await lab.deleteLink({ node: 'host', iface: 'tun9' });
      const links = await host.run(['ip', '-o', 'link', 'show'], { effect: 'read' });
      expect(links.stdout).not.toMatch(/tun[09]/);

      await lab.recreateLink({ node: 'host', iface: 'tun9' });
      const recreated = await lab.linkState(tun);
      expect(recreated.ifindex).not.toBe(original.ifindex);
      expect(recreated).toMatchObject({ isUp: true, hasCarrier: true });
      // The kernel dropped the host's route through the deleted tunnel and nothing brought it
      // back; the peer's routes were restored.
      expect(await tableRoutes()).toBe('');
      const peerRoutes = await lab
        .runner('tunnel-peer')
        .run(['ip', 'route', 'show'], { effect: 'read' });
      expect(peerRoutes.stdout).toContain('10.10.0.0/24 via 10.200.0.1 dev tun0');

      await lab.setLinkDown(tun);
      expect(await lab.linkState(tun)).toMatchObject({ isUp: false });
      await lab.setLinkUp(tun);
      expect(await lab.linkState(tun)).toMatchObject({ isUp: true });
    });
  });
});

describe('lab kit: the services and probes prove relies on', () => {
  it('gives a link brought back its IPv6 address, which the kernel flushed when it went down', async () => {
    await withLab(topology, async (lab) => {
      const vwl = { node: 'host', iface: 'vwl0' };
      await lab.setLinkDown(vwl);
      await lab.setLinkUp(vwl);
      // net.ipv6.conf.*.keep_addr_on_down is 0: the IPv6 address went, the IPv4 one stayed.
      expect(await missingLinkAddresses(lab, vwl)).toEqual(['fd00:10::1/64']);
      await restoreLinkAddresses(lab, vwl);
      expect(await missingLinkAddresses(lab, vwl)).toEqual([]);
    });
  });

  it('answers a TCP client that a busy CPU held for seconds between connect and send', async () => {
    await withLab(topology, async (lab) => {
      await startService(lab, 'internet', [
        ...['serve', 'internet', '--tcp', '443', '--udp', '9', '--addresses', '198.51.100.1'],
      ]);
      // The pause stands in for a descheduled client thread; the server gave up after 2 s.
      const client = [
        'import socket, time',
        's = socket.create_connection(("198.51.100.1", 443), timeout=5)',
        'time.sleep(2.5)',
        's.sendall(b"egressguard egtest tcp\\n")',
        'print(s.recv(2048).decode().strip() or "closed without an answer")',
      ].join('\n');
      const workload = lab.runner('workload');
      const { stdout } = await workload.run([await labPython(workload), '-c', client], {
        effect: 'read',
      });
      expect(JSON.parse(stdout)).toMatchObject({ node: 'internet', src: '10.10.0.2' });
    });
  });

  it('ends a traffic stream on SIGTERM wherever it lands: the signal is waited for, never handled', async () => {
    await withLab(topology, async (lab) => {
      const specs = [{ tag: 's0', kind: 'udp' as const, src: '10.10.0.2', dst: DST4, dport: 9 }];
      // A handler that set a threading.Event once deadlocked the stream when SIGTERM landed while
      // it held the Event's lock: stop() waited for ever. Now no handler is installed (the signal
      // is blocked and waited for; the kernel lifts the block only inside that wait).
      const nonce = createNonce();
      const probe = startStream(lab, 'workload', { nonce, rate: 200, specs });
      await probe.sending();
      const { stdout: pids } = await lab
        .runner('workload')
        .run(['pgrep', '-f', `probe.py stream .*${nonce}`], { effect: 'read' });
      const status = readFileSync(`/proc/${pids.trim().split('\n')[0] ?? ''}/status`, 'utf8');
      const caught = /^SigCgt:\s*([0-9a-f]+)$/m.exec(status)?.[1];
      expect(caught).toMatch(/^[0-9a-f]{16}$/);
      const sigterm = 1n << 14n;
      expect(BigInt(`0x${caught ?? ''}`) & sigterm).toBe(0n);
      expect((await probe.stop()).results).toMatchObject([{ tag: 's0', failed: 0 }]);
      // Stopped at other moments of its round: each ends and reports what it sent.
      for (let i = 0; i < 8; i++) {
        const stream = startStream(lab, 'workload', { nonce: createNonce(), rate: 150 + i, specs });
        await stream.sending();
        const result = await stream.stop();
        expect(result.results[0]?.sent).toBeGreaterThan(0);
      }
      // And a helper that ignores SIGTERM is killed once the grace is over: stop() never hangs.
      const deaf = lab
        .runner('workload')
        .start(['sh', '-c', "trap '' TERM; echo ready; while :; do sleep 1; done"], {
          effect: 'change',
        });
      for await (const line of deaf.lines) if (line === 'ready') break;
      await deaf.stop(100);
      await expect(deaf.exited).resolves.toBeNull(); // ended by a signal: SIGKILL
    });
  });

  it("keeps crafted packets' source ports below every node's ephemeral ports", async () => {
    await withLab(topology, async (lab) => {
      const workload = lab.runner('workload');
      const { stdout: range } = await workload.run(
        ['sysctl', '-n', 'net.ipv4.ip_local_port_range'],
        { effect: 'read' },
      );
      const [ephemeralLow] = range.trim().split(/\s+/).map(Number);
      const { stdout: raw } = await workload.run(
        [
          await labPython(workload),
          '-c',
          `import sys; sys.path.insert(0, ${JSON.stringify(dirname(labScript('sender.py')))}); import sender; print(*sender.RAW_SOURCE_PORTS)`,
        ],
        { effect: 'read' },
      );
      const [rawLow, rawHigh] = raw.trim().split(' ').map(Number);
      expect(rawLow).toBeGreaterThan(1023);
      expect(ephemeralLow).toBe(32768);
      expect(rawHigh).toBeLessThanOrEqual(ephemeralLow ?? 0);
    });
  });

  it("counts the host's own sends its blackhole route refuses as refused, not failed", async () => {
    await withLab(topology, async (lab) => {
      const host = lab.runner('host');
      await host.run(['ip', 'route', 'add', 'blackhole', '203.0.113.99/32'], { effect: 'change' });
      const request = {
        nonce: createNonce(),
        timeoutMs: 300,
        probes: [
          { tag: 'h0', kind: 'udp', src: '198.51.100.2', dst: '203.0.113.99', port: 53, count: 3 },
        ],
      };
      const { stdout } = await host.run(
        [await labPython(host), labScript('probe.py'), 'probe', JSON.stringify(request)],
        { effect: 'read' },
      );
      const [result] = (JSON.parse(stdout) as { results: unknown[] }).results;
      expect(result).toMatchObject({
        client: { outcome: 'unreachable', error: 'Invalid argument (errno 22)' },
        raw: { sent: 0, refused: 3, failed: 0, error: 'Invalid argument (errno 22)' },
      });
    });
  });
});

describe('lab kit: lifecycle', () => {
  it('gives each node its own namespace and deletes them all on destroy, twice safely', async () => {
    const lab = await createLab(topology);
    const names = lab.nodes.map((node) => lab.ns(node));
    expect(names).toEqual(
      ['workload', 'host', 'internet', 'tunnel-peer', 'lan'].map((n) => `eglab-${lab.id}-${n}`),
    );
    expect(await labNamespaces()).toEqual(expect.arrayContaining(names));
    const forwarding = await lab
      .runner('host')
      .run(['sysctl', '-n', 'net.ipv4.ip_forward', 'net.ipv6.conf.all.forwarding'], {
        effect: 'read',
      });
    expect(forwarding.stdout.split('\n').slice(0, 2)).toEqual(['1', '1']);
    await lab.destroy();
    await lab.destroy();
    expect((await labNamespaces()).filter((ns) => ns.includes(lab.id))).toEqual([]);
  });

  it('tears the lab down when the function given to withLab throws', async () => {
    let id = '';
    await expect(
      withLab(topology, (lab) => {
        id = lab.id;
        return Promise.reject(new Error('probe failed'));
      }),
    ).rejects.toThrow('probe failed');
    expect(id).not.toBe('');
    expect((await labNamespaces()).filter((ns) => ns.includes(id))).toEqual([]);
  });

  it('reaps the labs of a killed process and leaves those of a live one alone', async () => {
    const runDir = mkdtempSync(join(tmpdir(), 'eglab-run-'));
    const small: Topology = {
      nodes: { a: {}, b: {} },
      links: [
        {
          a: { node: 'a', iface: 'eth0', addresses: ['10.0.0.1/30'] },
          b: { node: 'b', iface: 'eth0', addresses: ['10.0.0.2/30'] },
        },
      ],
    };
    // The doomed owner runs a capture in its lab: killing the owner leaves that tcpdump behind.
    const doomed = await holdLab(small, runDir, { node: 'b', iface: 'eth0' });
    const alive = await holdLab(small, runDir);
    try {
      doomed.child.kill('SIGKILL');
      await new Promise((resolve) => doomed.child.once('exit', resolve));
      expect(await labNamespaces()).toEqual(expect.arrayContaining(doomed.namespaces));
      const orphans = await pidsIn(doomed.namespaces[1] ?? '');
      expect(orphans).not.toEqual([]);

      const result = await reapStaleLabs({ runDir });
      expect(result.reaped).toEqual(expect.arrayContaining(doomed.namespaces));
      expect(result.kept).toEqual(expect.arrayContaining(alive.namespaces));
      const left = await labNamespaces();
      expect(left).toEqual(expect.arrayContaining(alive.namespaces));
      expect(left.filter((ns) => doomed.namespaces.includes(ns))).toEqual([]);
      expect(await stillRunning(orphans)).toEqual([]);

      // SIGTERM: the live owner tears its own lab down, then ends as the signal says.
      const exited = new Promise((resolve) => {
        alive.child.once('exit', (_code, signal) => {
          resolve(signal);
        });
      });
      alive.child.kill('SIGTERM');
      expect(await exited).toBe('SIGTERM');
      expect((await labNamespaces()).filter((ns) => alive.namespaces.includes(ns))).toEqual([]);
    } finally {
      await Promise.all([end(doomed.child), end(alive.child)]);
      await reapStaleLabs({ runDir });
      rmSync(runDir, { recursive: true, force: true });
    }
  });
});

/** Starts a process that creates a lab (optionally with an armed observer) and holds it. */
async function holdLab(
  lab: Topology,
  runDir: string,
  observe?: { node: string; iface: string },
): Promise<{ child: ChildProcess; namespaces: string[] }> {
  const fixture = new URL('fixtures/hold-lab.mjs', import.meta.url).pathname;
  const args = [fixture, JSON.stringify(lab), runDir];
  if (observe !== undefined) args.push(observe.node, observe.iface);
  const child = spawn(process.execPath, args, {
    stdio: ['ignore', 'pipe', 'inherit'],
  });
  const lines = createInterface({ input: child.stdout });
  for await (const line of lines) {
    return { child, namespaces: (JSON.parse(line) as { namespaces: string[] }).namespaces };
  }
  throw new Error(`The lab holder exited with ${child.exitCode} before creating its lab`);
}

async function pidsIn(ns: string): Promise<number[]> {
  const { stdout } = await root.run(['ip', 'netns', 'pids', ns], { effect: 'read' });
  return stdout.split('\n').filter(Boolean).map(Number);
}

/** Whether a process runs; a zombie does not (its parent died, and pid 1 may not reap it). */
function isRunning(pid: number): boolean {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    return stat.slice(stat.lastIndexOf(')') + 2, stat.lastIndexOf(')') + 3) !== 'Z';
  } catch {
    return false;
  }
}

/** The pids still running after up to 30 s: a SIGKILL is delivered asynchronously. */
async function stillRunning(pids: readonly number[]): Promise<number[]> {
  // A bound on a hang, not a deadline: a loaded machine can take its time to reap them.
  for (let waited = 0; waited < 30_000; waited += 20) {
    if (!pids.some(isRunning)) return [];
    await new Promise((resolve) => setTimeout(resolve, 20));
  }
  return pids.filter(isRunning);
}

async function end(child: ChildProcess): Promise<void> {
  if (child.exitCode !== null || child.signalCode !== null) return;
  const exited = new Promise((resolve) => child.once('exit', resolve));
  child.kill('SIGKILL');
  await exited;
}
