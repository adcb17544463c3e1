import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { createFirewallEngine } from '../../src/agent/index.js';
import { readStatus, restoreGeneration, revertUnconfirmed } from '../../src/apply/index.js';
import { createMacosPfHost } from '../../sim/pf/create-macos-pf-host.js';
import { pfBackend } from '../../src/backends/pf/index.js';
import { formatAddress, parseIpv4 } from '../../src/core/index.js';
import { BUNDLE_FORMAT, createHostIrBinder } from '../../src/fleet/index.js';
import { MACOS_TOOLS_ENV, readHostFacts, type HostFacts } from '../../src/facts/index.js';
import {
  applyPrepared,
  hostContext,
  prepareForFacts,
  preparePolicy,
  requirePolicy,
} from '../../src/host/index.js';
import { createPfModelHost, modelInterfaces, type PfModelHost } from './support.js';

// A tunnel class on pf across a utun renumbering (DESIGN.md §4, pf: "utun names renumber on
// reconnect: identify a tunnel by address or peer and re-resolve on re-arm"), against the pfctl
// MODEL of a stock macOS host. The re-arm is what `run` does on every reconcile: facts read
// anew, the policy bound to them, applied when the hash changed.
const CASE = join('testdata', 'policies', 'valid', 'macos-vpn-runner');
const FACTS: HostFacts = readHostFacts(join(CASE, 'facts.json'));
const POLICY = requirePolicy(join(CASE, 'policy.yaml')).policy;
const UTUN = FACTS.interfaces.find((i) => i.name === 'utun3');
if (UTUN === undefined) throw new Error('no utun3 in the facts');

const hosts: PfModelHost[] = [];
beforeEach(() => {
  // `ifconfig` is the macOS host model's (the in-process runner runs it by name).
  vi.stubEnv(MACOS_TOOLS_ENV, '/models/pfctl-model');
});
afterEach(() => {
  vi.unstubAllEnvs();
  for (const h of hosts.splice(0)) h.cleanup();
});

function vmToInternet(h: PfModelHost, to = { address: '203.0.113.7', port: 443 }) {
  h.model.state.states = []; // a new connection each time
  const result = h.model.forwardPacket({
    family: 4,
    source: parseIpv4('192.168.64.5') as number,
    destination: parseIpv4(to.address) as number,
    protocol: 6,
    sourcePort: 50_443,
    destinationPort: to.port,
    ingress: 'bridge100',
    egress: 'en0',
  });
  return {
    verdict: result.verdict,
    egress: result.verdict === 'pass' ? result.egress : null,
    source: result.leaving === null ? null : formatAddress(4, result.leaving.source),
  };
}

function vmPacket(destination: string) {
  return {
    direction: 'in' as const,
    interface: 'bridge100',
    family: 4 as const,
    source: parseIpv4('192.168.64.5') as number,
    destination: parseIpv4(destination) as number,
    protocol: 6,
    sourcePort: 50_443,
    destinationPort: 443,
  };
}

describe('pf tunnel class: a renumbered utun is followed at re-arm', () => {
  it('routes into the utun that matches the peer, before and after renumbering', async () => {
    const h = createPfModelHost({
      model: createMacosPfHost({ interfaces: modelInterfaces(FACTS) }),
      hostFacts: FACTS,
    });
    hosts.push(h);
    const first = prepareForFacts(h.target, { policy: POLICY, facts: FACTS });
    await applyPrepared(h.target, first);
    expect(vmToInternet(h)).toEqual({ verdict: 'pass', egress: 'utun3', source: '10.8.0.2' });

    // The VPN reconnects as utun5; utun3 goes to another VPN with another peer.
    h.setInterface('utun3', null);
    h.setInterface('utun5', { up: true, addresses: [...UTUN.addresses], peer: '10.8.0.1' });
    h.setInterface('utun3', { up: true, addresses: ['172.31.0.2/32'], peer: '172.31.0.1' });
    // The anchor of before still names utun3: the class would go into the other VPN. This is
    // what re-resolving at re-arm is for.
    expect(vmToInternet(h).egress).toBe('utun3');

    const facts: HostFacts = {
      ...FACTS,
      interfaces: [
        ...FACTS.interfaces.filter((i) => i.name !== 'utun3'),
        { ...UTUN, name: 'utun5' },
        { name: 'utun3', up: true, addresses: ['172.31.0.2/32'], peer: '172.31.0.1' },
      ],
    };
    const rearmed = prepareForFacts(h.target, { policy: POLICY, facts });
    expect(rearmed.hash).not.toBe(first.hash);
    const anchor = rearmed.artifacts.find((a) => a.name === 'anchor.pf')?.content ?? '';
    expect(anchor).toContain('route-to utun5 ');
    // utun3 is the other VPN's now: one of the host's own interfaces (`(utun3)` among what the
    // host takes as its own), never a route-to target or a NAT interface.
    expect(anchor.replaceAll('(utun3)', '')).not.toContain('utun3');
    const report = await applyPrepared(h.target, rearmed);
    expect(report.changed).toBe(true);
    expect(report.generation.hash).toBe(rearmed.hash);
    expect(vmToInternet(h)).toEqual({ verdict: 'pass', egress: 'utun5', source: '10.8.0.2' });
    // The live states of the class were killed: the rules changed (pfctl -k per source prefix).
    expect(h.model.state.log.some((l) => l.argv.includes('-k'))).toBe(true);
  });

  it('drops the class while no utun matches, and follows the tunnel when it comes back', async () => {
    const h = createPfModelHost({
      model: createMacosPfHost({ interfaces: modelInterfaces(FACTS) }),
      hostFacts: FACTS,
    });
    hosts.push(h);
    await applyPrepared(h.target, prepareForFacts(h.target, { policy: POLICY, facts: FACTS }));
    // The VPN disconnects: its utun is destroyed.
    h.setInterface('utun3', null);
    expect(vmToInternet(h)).toEqual({ verdict: 'block', egress: null, source: null });
    const down: HostFacts = {
      ...FACTS,
      interfaces: FACTS.interfaces.filter((i) => i.name !== 'utun3'),
    };
    await applyPrepared(h.target, prepareForFacts(h.target, { policy: POLICY, facts: down }));
    expect(vmToInternet(h).verdict).toBe('block');
    // It reconnects as utun4.
    h.setInterface('utun4', { up: true, addresses: [...UTUN.addresses], peer: '10.8.0.1' });
    const back: HostFacts = {
      ...down,
      interfaces: [...down.interfaces, { ...UTUN, name: 'utun4' }],
    };
    await applyPrepared(h.target, prepareForFacts(h.target, { policy: POLICY, facts: back }));
    expect(vmToInternet(h)).toEqual({ verdict: 'pass', egress: 'utun4', source: '10.8.0.2' });
  });

  it('compiles kill-switch-only while no utun matches, and routes to the one that matches later', async () => {
    // Matched by its own address this time; the VPN is down when the policy is first bound.
    const byAddress = { ...POLICY, tunnelMatches: { vpn: { address: '10.8.0.2', peer: null } } };
    const down: HostFacts = {
      ...FACTS,
      interfaces: FACTS.interfaces.filter((i) => i.name !== 'utun3'),
    };
    const h = createPfModelHost({
      model: createMacosPfHost({ interfaces: modelInterfaces(down) }),
      hostFacts: down,
    });
    hosts.push(h);
    const warnings: string[] = [];
    const absent = prepareForFacts(h.target, {
      policy: byAddress,
      facts: down,
      warn: (m) => warnings.push(m),
    });
    expect(warnings).toEqual([expect.stringContaining('"vpn-vm" is compiled kill-switch-only')]);
    const anchor = absent.artifacts.find((a) => a.name === 'anchor.pf')?.content ?? '';
    expect(anchor).not.toMatch(/^pass .* route-to /m);
    // The model refuses a route-to interface it lacks, so this load passing is the point.
    await applyPrepared(h.target, absent);
    expect(vmToInternet(h)).toEqual({ verdict: 'block', egress: null, source: null });
    expect(h.model.sendPacket(vmPacket('203.0.113.7')).label).toBe('vpn-vm/kill-switch');
    // What the kill switch excepts is still judged by the class's rules: the LAN printer.
    expect(vmToInternet(h, { address: '192.168.1.40', port: 631 })).toEqual({
      verdict: 'pass',
      egress: 'en0',
      source: '192.168.64.5',
    });

    // The VPN connects as utun5 (it was utun3 before it went down).
    h.setInterface('utun5', { up: true, addresses: [...UTUN.addresses], peer: '10.8.0.1' });
    const up: HostFacts = { ...down, interfaces: [...down.interfaces, { ...UTUN, name: 'utun5' }] };
    const rearmed = prepareForFacts(h.target, { policy: byAddress, facts: up });
    expect(rearmed.notes).toEqual([]);
    const routed = rearmed.artifacts.find((a) => a.name === 'anchor.pf')?.content ?? '';
    expect(routed).toContain('route-to utun5 inet all');
    expect(routed).not.toContain('utun3');
    const report = await applyPrepared(h.target, rearmed);
    expect(report.changed).toBe(true);
    expect(vmToInternet(h)).toEqual({ verdict: 'pass', egress: 'utun5', source: '10.8.0.2' });
  });
});

// The boot restore and the per-minute re-converge of the LaunchDaemons (pf-units.ts): the
// re-converge runs `apply POLICY --facts facts.json --live-tunnels`, the reviewed facts with the
// tunnels read from `ifconfig` (here the macOS host model, kept in step with the pfctl model).
describe('pf tunnel class: re-resolved at the re-converge and at boot', () => {
  const FACTS_FILE = join(CASE, 'facts.json');
  const POLICY_FILE = join(CASE, 'policy.yaml');
  const UTUN_NOW = { up: true, addresses: [...UTUN.addresses], peer: '10.8.0.1' };
  const OTHER_VPN = { up: true, addresses: ['172.31.0.2/32'], peer: '172.31.0.1' };

  function vpnHost(): PfModelHost {
    const h = createPfModelHost({
      model: createMacosPfHost({ interfaces: modelInterfaces(FACTS) }),
      hostFacts: FACTS,
    });
    hosts.push(h);
    return h;
  }

  /** What the re-converge LaunchDaemon runs (apply POLICY --facts FILE --live-tunnels). */
  async function reconverge(h: PfModelHost, liveTunnels = true) {
    const prepared = await preparePolicy(h.target, {
      policy: POLICY_FILE,
      facts: FACTS_FILE,
      liveTunnels,
    });
    return { prepared, report: await applyPrepared(h.target, prepared) };
  }

  function renumber(h: PfModelHost): void {
    // The VPN reconnects as utun5; utun3 goes to another VPN with another peer.
    h.setInterface('utun3', null);
    h.setInterface('utun5', UTUN_NOW);
    h.setInterface('utun3', OTHER_VPN);
  }

  it('the re-converge follows the utun from live ifconfig; status says where the tunnel went', async () => {
    const h = vpnHost();
    const context = hostContext(h.target, pfBackend);
    const first = await reconverge(h);
    expect(first.report.generation.tunnels).toEqual([
      {
        declared: 'vpn',
        interface: 'utun3',
        present: true,
        match: { address: null, peer: '10.8.0.1' },
      },
    ]);
    renumber(h);
    expect(vmToInternet(h).egress).toBe('utun3'); // into the other VPN, until the re-converge

    const moved = await readStatus(context);
    expect(moved.condition).toBe('Drifted');
    expect(moved.reasons).toContain(
      'tunnel vpn is on "utun5" now, but the live state names "utun3"',
    );
    expect(moved.live.tunnels).toEqual([
      {
        name: 'utun3',
        state: 'up',
        declared: 'vpn',
        addresses: ['172.31.0.2/32'],
        peer: '172.31.0.1',
        matchesNow: 'utun5',
      },
    ]);

    // The reviewed facts alone still say utun3: nothing changes (what the daemon did before).
    expect((await reconverge(h, false)).report.changed).toBe(false);
    const second = await reconverge(h);
    expect(second.report.changed).toBe(true);
    const anchor = second.prepared.artifacts.find((a) => a.name === 'anchor.pf')?.content ?? '';
    expect(anchor).toContain('route-to utun5 inet all');
    expect(anchor).not.toContain('utun3');
    expect(vmToInternet(h)).toEqual({ verdict: 'pass', egress: 'utun5', source: '10.8.0.2' });
    const status = await readStatus(context);
    expect(status.condition, status.reasons.join('; ')).toBe('InSync');
    expect(status.live.tunnels).toEqual([
      {
        name: 'utun5',
        state: 'up',
        declared: 'vpn',
        addresses: UTUN.addresses,
        peer: '10.8.0.1',
        matchesNow: 'utun5',
      },
    ]);
  });

  it('a tunnel that is down is reported absent, not moved: the kill switch holds', async () => {
    const h = vpnHost();
    await reconverge(h);
    h.setInterface('utun3', null);
    const status = await readStatus(hostContext(h.target, pfBackend));
    expect(status.condition, status.reasons.join('; ')).toBe('InSync');
    expect(status.live.tunnels).toEqual([
      { name: 'utun3', state: 'absent', declared: 'vpn', matchesNow: null },
    ]);
  });

  it("without the generation's record of its tunnels, the inspector reports the anchor's route-to targets", async () => {
    const h = vpnHost();
    const { prepared } = await reconverge(h);
    const inspector = pfBackend.createInspector({ runner: h.runner, options: h.target.options });
    expect((await inspector.read(prepared.artifacts)).tunnels).toEqual([
      {
        name: 'utun3',
        state: 'up',
        declared: 'utun3',
        addresses: UTUN.addresses,
        peer: '10.8.0.1',
      },
    ]);
  });

  it('boot loads the lockdown when the utun moved, says so in status, and the re-converge brings the new one', async () => {
    const h = vpnHost();
    const context = hostContext(h.target, pfBackend);
    const first = await reconverge(h);
    // Reboot; the VPN comes back as utun5 and utun3 is another VPN's. The anchor of before
    // would load (utun3 exists) and route the class into the other VPN.
    h.model.reboot();
    h.model.run(['-f', '/etc/pf.conf'], { pid: 1, processName: 'launchd' });
    renumber(h);

    const outcome = await restoreGeneration(context);
    const reason = `Cannot load generation ${first.report.generation.number}: tunnel "vpn" (peer 10.8.0.1) was "utun3" when it was applied, and is "utun5" now`;
    expect(outcome).toEqual({ kind: 'lockdown', reason });
    expect(vmToInternet(h).verdict).toBe('block');
    const down = await readStatus(context);
    expect(down.condition).toBe('Drifted');
    expect(down.failure).toMatchObject({
      operation: 'restore',
      message: `the class lockdown was loaded instead: ${reason}`,
    });
    expect(down.reasons.at(-1)).toMatch(
      /^the last restore \(\d{4}-.+\): the class lockdown was loaded instead: Cannot load generation/,
    );

    await reconverge(h);
    expect(vmToInternet(h)).toEqual({ verdict: 'pass', egress: 'utun5', source: '10.8.0.2' });
    const status = await readStatus(context);
    expect(status.condition, status.reasons.join('; ')).toBe('InSync');
    expect(status.failure).toBeNull();
  });

  it('an apply whose facts name a utun the host lacks now is refused with the way out, not as a compiler bug', async () => {
    const h = vpnHost();
    // The VPN reconnected as utun5 since the reviewed facts (utun3) were read.
    h.setInterface('utun3', null);
    h.setInterface('utun5', UTUN_NOW);
    const refused = await reconverge(h, false).then(
      () => undefined,
      (error: unknown) => error as { message: string; hint?: string },
    );
    expect(refused?.message).toMatch(/routeto: unknown interface utun3/);
    expect(refused?.hint).toMatch(/--live-tunnels/);
    expect((await reconverge(h)).report.changed).toBe(true);
  });

  it('a fleet agent keeps the tunnels it bound, so boot refuses a utun renumbered since', async () => {
    const h = vpnHost();
    const binder = createHostIrBinder();
    const pushed = binder.preparePolicy({
      text: readFileSync(POLICY_FILE, 'utf8'),
      source: 'policy.yaml',
      pushId: 'p1',
      options: {},
    });
    if (!pushed.ok) throw new Error('the example policy does not validate');
    const bound = binder.bindHost(pushed.prepared, {
      hostName: FACTS.hostname,
      facts: FACTS,
      factsDigest: null,
      labels: {},
    });
    if (!bound.ok || bound.bundle.format !== BUNDLE_FORMAT) throw new Error('cannot bind');
    const engine = createFirewallEngine({ target: h.target });
    const prepared = await engine.prepare(bound.bundle, FACTS);
    if (!prepared.ok) throw new Error(prepared.message);
    expect(await engine.apply(prepared.prepared)).toMatchObject({ ok: true });
    h.model.reboot();
    h.model.run(['-f', '/etc/pf.conf'], { pid: 1, processName: 'launchd' });
    renumber(h);
    const outcome = await restoreGeneration(hostContext(h.target, pfBackend));
    expect(outcome).toMatchObject({ kind: 'lockdown' });
    expect(outcome.kind === 'lockdown' ? outcome.reason : '').toMatch(
      /tunnel "vpn" \(peer 10\.8\.0\.1\) was "utun3" when it was applied, and is "utun5" now/,
    );
    expect(vmToInternet(h).verdict).toBe('block');
  });

  it('restore --previous refuses a generation bound to a utun that is another VPN now, changing nothing', async () => {
    const h = vpnHost();
    const context = hostContext(h.target, pfBackend);
    const first = await reconverge(h);
    renumber(h);
    expect((await reconverge(h)).report.changed).toBe(true);
    const calls = h.runner.invocations.length;
    await expect(restoreGeneration({ ...context, from: 'previous.json' })).rejects.toThrow(
      `Cannot restore generation ${first.report.generation.number}: tunnel "vpn" (peer 10.8.0.1) was "utun3" when it was applied, and is "utun5" now`,
    );
    // Only reads (ifconfig): no anchor was loaded.
    const since = h.runner.invocations.slice(calls);
    expect(since.length).toBeGreaterThan(0);
    expect(since.filter((i) => i.argv.includes('-f'))).toEqual([]);
    expect(vmToInternet(h)).toEqual({ verdict: 'pass', egress: 'utun5', source: '10.8.0.2' });
  });

  it('an unconfirmed generation reverts to the lockdown, not into another VPN, when the one before it is bound to a moved utun', async () => {
    const h = vpnHost();
    const context = hostContext(h.target, pfBackend);
    const first = await reconverge(h);
    renumber(h);
    const prepared = await preparePolicy(h.target, {
      policy: POLICY_FILE,
      facts: FACTS_FILE,
      liveTunnels: true,
    });
    const second = await applyPrepared(h.target, prepared, {
      confirm: {
        seconds: 30,
        revertCommand: (n: number) => ['egressguard', 'restore', '--unconfirmed', String(n)],
      },
    });
    expect(second.pending).toBeDefined();
    const outcome = await revertUnconfirmed({ ...context, generation: second.generation.number });
    expect(outcome).toEqual({
      kind: 'lockdown',
      generation: second.generation.number,
      reason: `generation ${first.report.generation.number}, live before generation ${second.generation.number}, cannot be loaded: tunnel "vpn" (peer 10.8.0.1) was "utun3" when it was applied, and is "utun5" now: the class lockdown is loaded`,
    });
    expect(vmToInternet(h).verdict).toBe('block');
  });

  it('boot loads the lockdown while the utun it names is gone (real pfctl refuses such an anchor)', async () => {
    const h = vpnHost();
    const first = await reconverge(h);
    h.model.reboot();
    h.model.run(['-f', '/etc/pf.conf'], { pid: 1, processName: 'launchd' });
    h.setInterface('utun3', null); // the VPN is not up yet
    // The anchor of before, loaded as it was, is refused whole (parse.y's route_host check).
    const stale = first.prepared.artifacts.find((a) => a.name === 'anchor.pf')?.content ?? '';
    const refused = h.model.run(['-n', '-a', 'com.apple/250.egressguard', '-f', '-'], {
      stdin: stale,
    });
    expect(refused.exitCode).not.toBe(0);
    expect(refused.stderr).toContain('routeto: unknown interface utun3');
    const outcome = await restoreGeneration(hostContext(h.target, pfBackend));
    expect(outcome).toMatchObject({
      kind: 'lockdown',
      reason: expect.stringMatching(
        /tunnel "vpn" \(peer 10\.8\.0\.1\) was "utun3" when it was applied, and matches no interface now$/,
      ) as unknown,
    });
    expect(vmToInternet(h).verdict).toBe('block');
  });

  it('boot loads a generation compiled while the tunnel was absent, wherever the tunnel is now', async () => {
    const h = vpnHost();
    h.setInterface('utun3', null);
    const absent = await reconverge(h); // kill-switch-only: no route-to to move
    expect(absent.report.generation.tunnels?.[0]).toMatchObject({ present: false });
    h.model.reboot();
    h.model.run(['-f', '/etc/pf.conf'], { pid: 1, processName: 'launchd' });
    h.setInterface('utun5', UTUN_NOW);
    const context = hostContext(h.target, pfBackend);
    expect(await restoreGeneration(context)).toMatchObject({ kind: 'restored' });
    expect(vmToInternet(h).verdict).toBe('block'); // as the kill switch says, until the re-arm
    const status = await readStatus(context);
    expect(status.condition).toBe('Drifted');
    expect(status.reasons).toContain(
      'tunnel vpn is on "utun5" now, but the live state names "vpn"',
    );
    await reconverge(h);
    expect(vmToInternet(h)).toEqual({ verdict: 'pass', egress: 'utun5', source: '10.8.0.2' });
  });

  it('boot loads the generation when the utun is where it was', async () => {
    const h = vpnHost();
    const first = await reconverge(h);
    h.model.reboot();
    h.model.run(['-f', '/etc/pf.conf'], { pid: 1, processName: 'launchd' });
    const context = hostContext(h.target, pfBackend);
    expect(await restoreGeneration(context)).toMatchObject({
      kind: 'restored',
      generation: first.report.generation.number,
    });
    expect(vmToInternet(h)).toEqual({ verdict: 'pass', egress: 'utun3', source: '10.8.0.2' });
    expect((await readStatus(context)).failure).toBeNull();
  });

  it('a generation pfctl refuses at boot: the lockdown, and status says why', async () => {
    const h = vpnHost();
    await reconverge(h);
    h.model.reboot();
    h.model.run(['-f', '/etc/pf.conf'], { pid: 1, processName: 'launchd' });
    h.faults.set('before-pf-load', 'fail'); // the generation's load fails; the lockdown's does not
    const context = hostContext(h.target, pfBackend);
    const outcome = await restoreGeneration(context);
    expect(outcome).toMatchObject({ kind: 'lockdown' });
    const status = await readStatus(context);
    expect(status.failure?.message).toMatch(
      /^the class lockdown was loaded instead: Cannot load generation \d+: Fault injected at "before-pf-load"$/,
    );
  });
});
