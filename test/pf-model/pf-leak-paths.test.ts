import { existsSync, readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { readStatus, revertUnconfirmed } from '../../src/apply/index.js';
import { createMacosPfHost } from '../../sim/pf/create-macos-pf-host.js';
import { pfBackend } from '../../src/backends/pf/index.js';
import { LaunchctlModel } from '../../sim/pf/launchctl-model.js';
import type { PfForwarding } from '../../sim/pf/pf-evaluator.js';
import { formatAddress, parseIpv4 } from '../../src/core/index.js';
import { MACOS_TOOLS_ENV, readHostFacts, type HostFacts } from '../../src/facts/index.js';
import {
  applyPrepared,
  hostContext,
  prepareForFacts,
  requirePolicy,
} from '../../src/host/index.js';
import {
  createHostView,
  evaluatePacket,
  lowerForHost,
  parsePacketArguments,
  type PacketArguments,
} from '../../src/ir/index.js';
import {
  createPfModelHost,
  FACTS,
  modelInterfaces,
  RUNNER_CASE,
  type PfModelHost,
} from './support.js';

// Issue 20: the leak paths of the pf backend, each against the pfctl MODEL of a stock macOS host
// through the real apply layer, and each checked against `explain` (the IR evaluator) on the
// host as it is when the packet comes. Every test that applies here fails with the backend before
// the fix (its compiler, applier, inspector and stanza writer run against these models; the one
// test of the model alone passes either way): the read-back
// of an anchor naming `self` never converges on a host whose interfaces hold several addresses,
// and without the state kills the flows below pass by their states.
const RUNNER = requirePolicy(join(RUNNER_CASE, 'policy.yaml')).policy;
const VPN_CASE = join('testdata', 'policies', 'valid', 'macos-vpn-runner');
const VPN_FACTS: HostFacts = readHostFacts(join(VPN_CASE, 'facts.json'));
const VPN = requirePolicy(join(VPN_CASE, 'policy.yaml')).policy;
const VM = parseIpv4('192.168.64.5') as number;

const hosts: PfModelHost[] = [];
beforeEach(() => {
  vi.stubEnv(MACOS_TOOLS_ENV, '/models/pfctl-model');
});
afterEach(() => {
  vi.unstubAllEnvs();
  for (const h of hosts.splice(0)) h.cleanup();
});

function host(facts: HostFacts = FACTS): PfModelHost {
  const h = createPfModelHost({
    model: createMacosPfHost({ interfaces: modelInterfaces(facts) }),
    hostFacts: facts,
  });
  hosts.push(h);
  return h;
}

function withInterface(facts: HostFacts, name: string, addresses: string[]): HostFacts {
  return {
    ...facts,
    interfaces: facts.interfaces.map((i) => (i.name === name ? { ...i, addresses } : i)),
  };
}

/** The example policy with the cache's port 4001 open too, written beside the host's state. */
function openCachePort(h: PfModelHost): string {
  const path = join(h.dir, 'cache-4001.yaml');
  const text = readFileSync(join(RUNNER_CASE, 'policy.yaml'), 'utf8');
  writeFileSync(path, text.replace('ports: [4000]', 'ports: [4000, 4001]'));
  return path;
}

/** What `explain` says of a packet on the host as these facts describe it. */
function explain(policy: typeof RUNNER, facts: HostFacts, args: Record<string, string>) {
  const ir = lowerForHost(policy, facts);
  const packet = parsePacketArguments(args as unknown as PacketArguments);
  return evaluatePacket(ir, createHostView(facts), packet, { tunnel: 'up' });
}

function forward(
  h: PfModelHost,
  to: string,
  options: { port?: number; flags?: string; sourcePort?: number; egress?: string } = {},
): PfForwarding {
  return h.model.forwardPacket({
    family: 4,
    source: VM,
    destination: parseIpv4(to) as number,
    protocol: 6,
    sourcePort: options.sourcePort ?? 50_443,
    destinationPort: options.port ?? 443,
    tcpFlags: options.flags ?? 'S',
    ingress: 'bridge100',
    egress: options.egress ?? 'en0',
  });
}

describe('issue 20, item 1: `self` followed as interfaces are renumbered', () => {
  it('a VM tcp/22 to the uplink’s new address is the host’s (deny-host), as explain says, with nothing reloaded', async () => {
    const h = host();
    const prepared = h.prepare();
    await applyPrepared(h.target, prepared);
    const loads = h.model.state.log.filter((l) => l.argv.includes('-f')).length;

    // DHCP moves en0 from .20 to .37; the anchor is not loaded again.
    const renumbered = withInterface(FACTS, 'en0', ['198.51.100.37/24']);
    h.setInterface('en0', { up: true, addresses: ['198.51.100.37/24'] });
    const reference = explain(RUNNER, renumbered, {
      from: '192.168.64.5',
      to: '198.51.100.37',
      proto: 'tcp',
      port: '22',
    });
    expect([reference.verdict, reference.decidedBy.id]).toEqual(['deny', 'deny-host']);
    const local = h.model.sendPacket({
      direction: 'in',
      interface: 'bridge100',
      family: 4,
      source: VM,
      destination: parseIpv4('198.51.100.37') as number,
      protocol: 6,
      sourcePort: 50_022,
      destinationPort: 22,
    });
    expect([local.verdict, local.label]).toEqual(['block', 'deny-host']);

    // The old address is no longer the host's: forwarded by the uplink, as explain says.
    const old = explain(RUNNER, renumbered, {
      from: '192.168.64.5',
      to: '198.51.100.20',
      proto: 'tcp',
      port: '22',
    });
    const passed = forward(h, '198.51.100.20', { port: 22 });
    expect([passed.verdict, passed.outbound?.label ?? passed.inbound.label]).toEqual([
      old.verdict === 'allow' ? 'pass' : 'block',
      old.decidedBy.id,
    ]);

    // The re-converge on the new facts has nothing to load: the anchor does not name addresses.
    const again = await applyPrepared(
      h.target,
      prepareForFacts(h.target, { policy: RUNNER, facts: renumbered }),
    );
    expect(again.changed).toBe(false);
    expect(h.model.state.log.filter((l) => l.argv.includes('-f')).length).toBe(loads);
  });

  it('the model freezes `self` at load as pfctl does, and `(self)` matches nothing on macOS', () => {
    const model = createMacosPfHost({ interfaces: modelInterfaces() });
    const text =
      'pass in quick on bridge100 from any to self label "frozen"\npass in quick on bridge100 from any to (self) label "dynamic"\n';
    expect(model.run(['-a', 'com.apple/250.t', '-f', '-'], { stdin: text }).exitCode).toBe(0);
    const to = (address: string) => {
      model.state.states = []; // a new connection each time
      return model.sendPacket({
        direction: 'in',
        interface: 'bridge100',
        family: 4,
        source: VM,
        destination: parseIpv4(address) as number,
        protocol: 6,
        sourcePort: 50_000,
        destinationPort: 22,
      }).label;
    };
    expect(to('198.51.100.20')).toBe('frozen');
    model.setInterface('en0', ['198.51.100.37/24']);
    expect(to('198.51.100.37')).toBeNull(); // neither: `self` kept .20, `(self)` is empty
    expect(to('198.51.100.20')).toBe('frozen');
  });
});

describe('issue 20, items 2 and 8: states do not outlive a lockdown, a revert or a tunnel re-bind', () => {
  it('the lockdown kills the states of the class: an established flow stops, as the lockdown says', async () => {
    const h = host();
    const prepared = h.prepare();
    await applyPrepared(h.target, prepared);
    const syn = forward(h, '203.0.113.7');
    expect(syn.verdict).toBe('pass');
    expect(h.model.state.states.length).toBeGreaterThan(0);
    expect(forward(h, '203.0.113.7', { flags: 'A' }).outbound?.decidedBy).toBe('state');

    // A failed apply or a revert with nothing to go back to loads the class lockdown.
    const applier = pfBackend.createApplier(hostContext(h.target, pfBackend));
    await applier.lockdown(prepared.lockdown ?? '');
    expect(h.model.state.states.filter((s) => s.lan.address === '192.168.64.5')).toEqual([]);
    const next = forward(h, '203.0.113.7', { flags: 'A' });
    expect([next.verdict, next.inbound.decidedBy, next.inbound.label]).toEqual([
      'block',
      'rule',
      'egressguard-lockdown',
    ]);
  });

  it('a revert kills the states the reverted generation let through: the flow stops, as explain says of the policy restored', async () => {
    const h = host();
    const context = hostContext(h.target, pfBackend);
    const first = await applyPrepared(h.target, h.prepare());
    // The next generation opens the cache's port 4001 too, and is never confirmed.
    const opened = openCachePort(h);
    const second = await applyPrepared(h.target, h.prepare(opened), {
      confirm: {
        seconds: 30,
        revertCommand: (n) => ['egressguard', 'restore', '--unconfirmed', String(n)],
      },
    });
    const args = { from: '192.168.64.5', to: '10.42.0.10', proto: 'tcp', port: '4001' };
    const underSecond = explain(requirePolicy(opened).policy, FACTS, args);
    expect([underSecond.verdict, underSecond.decidedBy.id]).toEqual(['allow', 'allow-cache']);
    const syn = forward(h, '10.42.0.10', { port: 4001 });
    expect([syn.verdict, syn.inbound.label]).toEqual(['pass', 'allow-cache']);
    expect(forward(h, '10.42.0.10', { port: 4001, flags: 'A' }).inbound.decidedBy).toBe('state');

    // The confirm timer fires: the first generation is loaded again.
    const timer = second.pending?.timer;
    if (timer?.kind !== 'backend') throw new Error('no LaunchDaemon timer was scheduled');
    const argv = new LaunchctlModel(h.macos.launchd).fire(timer.id);
    const outcome = await revertUnconfirmed({ ...context, generation: Number(argv?.[3]) });
    expect(outcome).toMatchObject({ kind: 'reverted', restored: first.generation.number });

    // The established flow's next segment meets the restored rules, not its old state.
    const reference = explain(RUNNER, FACTS, args);
    expect([reference.verdict, reference.decidedBy.id]).toEqual(['deny', 'deny-private']);
    const next = forward(h, '10.42.0.10', { port: 4001, flags: 'A' });
    expect([next.verdict, next.inbound.decidedBy, next.inbound.label]).toEqual([
      'block',
      'rule',
      reference.decidedBy.id,
    ]);
  });

  it('a failed apply kills what the anchor it put back passed meanwhile: the flow stops, as explain says', async () => {
    const h = host();
    await applyPrepared(h.target, h.prepare());
    const opened = openCachePort(h);
    // A VM opens a flow the new anchor allows, then a step after the load fails: the applier
    // loads the previous anchor again.
    const hit = h.faults.hit.bind(h.faults);
    const syns: PfForwarding[] = [];
    h.faults.hit = async (point: string) => {
      if (point === 'after-pf-reference') {
        syns.push(forward(h, '10.42.0.10', { port: 4001 }));
        throw new Error('injected after the load');
      }
      await hit(point);
    };
    await expect(applyPrepared(h.target, h.prepare(opened))).rejects.toThrow(
      /the previous anchor was loaded again/,
    );
    expect(syns.map((s) => [s.verdict, s.inbound.label])).toEqual([['pass', 'allow-cache']]);
    const args = { from: '192.168.64.5', to: '10.42.0.10', proto: 'tcp', port: '4001' };
    const reference = explain(RUNNER, FACTS, args);
    expect([reference.verdict, reference.decidedBy.id]).toEqual(['deny', 'deny-private']);
    const next = forward(h, '10.42.0.10', { port: 4001, flags: 'A' });
    expect([next.verdict, next.inbound.decidedBy, next.inbound.label]).toEqual([
      'block',
      'rule',
      reference.decidedBy.id,
    ]);
  });

  it('a utun that comes back under its number with a new address gets the anchor reloaded and its NAT states killed', async () => {
    const h = host(VPN_FACTS);
    const first = prepareForFacts(h.target, { policy: VPN, facts: VPN_FACTS });
    await applyPrepared(h.target, first);
    const opened = forward(h, '203.0.113.7');
    expect(opened.leaving === null ? null : formatAddress(4, opened.leaving.source)).toBe(
      '10.8.0.2',
    );

    // The VPN drops and reconnects as utun3 again, with another address.
    h.setInterface('utun3', null);
    const readdressed = withInterface(VPN_FACTS, 'utun3', ['10.8.0.6/32']);
    h.setInterface('utun3', { up: true, addresses: ['10.8.0.6/32'], peer: '10.8.0.1' });
    const rebound = prepareForFacts(h.target, { policy: VPN, facts: readdressed });
    expect(rebound.hash).not.toBe(first.hash);
    const report = await applyPrepared(h.target, rebound);
    expect(report.changed).toBe(true);
    expect(h.model.state.states.filter((s) => s.gwy.address === '10.8.0.2')).toEqual([]);

    // The flow's next packet is judged again and leaves with the tunnel's address now, as
    // explain says of the re-bound host.
    const reference = explain(VPN, readdressed, {
      from: '192.168.64.5',
      to: '203.0.113.7',
      proto: 'tcp',
      port: '443',
    });
    const next = forward(h, '203.0.113.7');
    expect(next.verdict).toBe('pass');
    expect(next.egress).toBe(reference.via);
    expect(next.leaving === null ? null : formatAddress(4, next.leaving.source)).toBe(
      reference.egress,
    );
  });
});

describe('issue 20, item 4: status settles on a host with many addresses', () => {
  it('100 quiet ticks: InSync every time, no repair, no load, no state killed', async () => {
    // More than one address per interface, link-local ones included, as a real Mac has them.
    const busy: HostFacts = {
      ...FACTS,
      interfaces: FACTS.interfaces.map((i) =>
        i.name === 'en0'
          ? {
              ...i,
              addresses: [
                '198.51.100.20/24',
                '198.51.100.21/24',
                'fe80::1c2a:1/64',
                '2001:db8:51::20/64',
              ],
            }
          : i.name === 'bridge100'
            ? { ...i, addresses: ['192.168.64.1/22', 'fe80::bc:1/64'] }
            : i,
      ),
    };
    const h = host(busy);
    const prepared = prepareForFacts(h.target, { policy: RUNNER, facts: busy });
    await applyPrepared(h.target, prepared);
    const context = hostContext(h.target, pfBackend);
    const settled = h.model.state.log.length;
    let repairs = 0;
    for (let tick = 0; tick < 100; tick++) {
      h.model.tick(10);
      forward(h, '203.0.113.7', { sourcePort: 40_000 + tick }); // counters and states move
      const status = await readStatus({ ...context, desiredHash: prepared.hash });
      // What `run` and the fleet agent do at each tick: repair when not InSync.
      if (status.condition !== 'InSync') {
        repairs++;
        await applyPrepared(h.target, prepared, { force: true });
      }
      const again = await applyPrepared(h.target, prepared);
      expect(again.changed).toBe(false);
    }
    expect(repairs).toBe(0);
    const changes = h.model.state.log
      .slice(settled)
      .filter((l) => (l.argv.includes('-f') && !l.argv.includes('-n')) || l.argv.includes('-k'));
    expect(changes).toEqual([]);
  });
});

describe('issue 20, item 4: every example reads back as pfctl keeps it', () => {
  const VALID = join('testdata', 'policies', 'valid');
  const examples = readdirSync(VALID).filter((name) =>
    existsSync(join(VALID, name, 'expected.pf.anchor.pf')),
  );
  // Each interface gains an alias and a link-local address, as a real Mac's have them: pfctl
  // makes one rule per address of what it expands at load, and its default optimizer (basic)
  // merges what it may; read-back must count what it keeps.
  const aliased = (facts: HostFacts): HostFacts => ({
    ...facts,
    interfaces: facts.interfaces.map((i, n) =>
      i.addresses.length === 0
        ? i
        : { ...i, addresses: [...i.addresses, `198.18.${n}.9/24`, `fe80::${n + 1}:9/64`] },
    ),
  });

  it.each(examples)('%s: applied under the default optimizer, status is InSync', async (name) => {
    const facts = aliased(readHostFacts(join(VALID, name, 'facts.json')));
    const policy = requirePolicy(join(VALID, name, 'policy.yaml')).policy;
    const h = host(facts);
    const prepared = prepareForFacts(h.target, { policy, facts });
    await applyPrepared(h.target, prepared);
    expect(h.model.state.log.some((l) => l.argv.includes('-o'))).toBe(false);
    const status = await readStatus({
      ...hostContext(h.target, pfBackend),
      desiredHash: prepared.hash,
    });
    expect([status.condition, status.reasons]).toEqual(['InSync', []]);
  });
});

describe('issue 20, item 5: NAT on the uplink’s first address', () => {
  it('every connection leaves from en0’s first address, never its alias, as explain says', async () => {
    const aliased = withInterface(FACTS, 'en0', ['198.51.100.20/24', '198.51.100.99/24']);
    const h = host(aliased);
    await applyPrepared(h.target, prepareForFacts(h.target, { policy: RUNNER, facts: aliased }));
    const reference = explain(RUNNER, aliased, {
      from: '192.168.64.5',
      to: '203.0.113.7',
      proto: 'tcp',
      port: '443',
    });
    expect(reference.egress).toBe('198.51.100.20');
    const sources = new Set<string | null>();
    for (let i = 0; i < 6; i++) {
      const result = forward(h, '203.0.113.7', { sourcePort: 51_000 + i });
      sources.add(result.leaving === null ? null : formatAddress(4, result.leaving.source));
    }
    expect([...sources]).toEqual(['198.51.100.20']);
  });
});
