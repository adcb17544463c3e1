import { existsSync, readdirSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type TestPacket } from '../../src/backends/index.js';
import { nftablesBackend } from '../../src/backends/nftables/index.js';
import { generateBoundaryPackets } from '../../sim/conformance/boundary-packets.js';
import { checkConformance } from '../../sim/conformance/conformance.js';
import {
  createKernelHarness,
  unsendableReason,
  type KernelObserved,
} from '../../sim/nftables/nft-kernel-harness.js';
import {
  createHostTarget,
  prepareForFacts,
  requirePolicy,
  type Prepared,
} from '../../src/host/index.js';
import {
  AddressSet,
  formatAddress,
  parsePrefix,
  prefixEnd,
  type Prefix,
} from '../../src/core/index.js';
import {
  createHostView,
  evaluatePacket,
  REASSEMBLY_ID,
  type EvaluationState,
  type Explanation,
} from '../../src/ir/index.js';
import { readHostFacts } from '../../src/facts/index.js';
import {
  buildFactsTopology,
  labAccess,
  withLab,
  type FactsLab,
  type Lab,
} from '../../src/prove/index.js';
import { createRunner, type Runner } from '../../src/runner/index.js';

// The issue: for every valid example, at least 2,000 packets biased to boundaries, both families,
// GRE/ESP/SCTP besides TCP/UDP/ICMP; the evaluator's verdict and deciding rule id must equal what
// the kernel did, read from per-rule counters (and, per packet, from the kernel's trace).
const CASES = join('testdata', 'policies', 'valid');
const PACKETS = 2000;
const UNMANAGED = 100;
const SEED = 20_260_001;
const TABLE = 'egressguard';

const root = createRunner({ guard: true });

async function rootState(): Promise<string> {
  const links = await root.run(['ip', '-o', 'link', 'show'], { effect: 'read' });
  const rules = await root.run(['ip', 'rule', 'show'], { effect: 'read' });
  return `${links.stdout.replace(/^\d+: /gm, '').replace(/\\.*$/gm, '')}\n${rules.stdout}`;
}

let before = '';
beforeAll(async () => {
  before = await rootState();
});
afterAll(async () => {
  // The machine's own links and routing rules are as they were: everything happened in the lab.
  expect(await rootState()).toBe(before);
});

const cases = readdirSync(CASES)
  .filter((name) => existsSync(join(CASES, name, 'facts.json')))
  .sort();

describe('nft differential: the reference evaluator against the kernel', () => {
  it('has valid examples to run', () => {
    expect(cases.length).toBeGreaterThan(0);
  });

  for (const name of cases) {
    const dir = join(CASES, name);
    const skip =
      linuxSkipReason(join(dir, 'facts.json')) ?? forwardedSkipReason(join(dir, 'policy.yaml'));
    const title = skip === undefined ? name : `${name} (skipped: ${skip})`;
    // A hang bound, not a speed target: a case took 37 s at load 20 on 2 cores.
    (skip === undefined ? it : it.skip)(title, { timeout: 240_000 }, async () => {
      // The nftables compiler runs for the facts of any OS: the kernel judges its output.
      const prepared = prepareForFacts(
        createHostTarget({ backend: 'nftables', options: { table: TABLE } }),
        {
          policy: requirePolicy(join(dir, 'policy.yaml')).policy,
          facts: readHostFacts(join(dir, 'facts.json')),
        },
      );
      await runDifferential(name, prepared);
    });
  }
});

/**
 * Why an example has nothing for this test to send, or undefined: the boundary generator sends
 * forwarded packets of ingress classes only, and some examples give nftables host-originated
 * classes alone (k3s-vpn-egress: its pods are Cilium's, the cilium differential covers them).
 */
function forwardedSkipReason(policyFile: string): string | undefined {
  const { policy } = requirePolicy(policyFile);
  return policy.classes.some((c) => c.origin === 'forwarded')
    ? undefined
    : 'no forwarded class: its nftables classes are all host-originated';
}

/** Why an example cannot be built as a Linux lab, or undefined. The compiler runs for any OS. */
function linuxSkipReason(factsFile: string): string | undefined {
  const facts = readHostFacts(factsFile);
  const bad = facts.interfaces.filter((i) => !/^[A-Za-z0-9_][A-Za-z0-9_.-]{0,14}$/.test(i.name));
  if (bad.length > 0) {
    return `interface names ${bad.map((i) => `"${i.name}"`).join(', ')} are not Linux names`;
  }
  return undefined;
}

async function runDifferential(name: string, prepared: Prepared): Promise<void> {
  const started = performance.now();
  const { ir, facts } = prepared;
  const host = createHostView(facts);
  const plan = buildFactsTopology(ir, facts);
  const martian = martianCheck(facts.interfaces.flatMap((i) => i.addresses));
  const packets = choosePackets(prepared, plan, martian);

  await withLab(plan.topology, async (lab) => {
    const hostRunner = lab.runner(plan.host);
    const applier = nftablesBackend.createApplier({
      runner: hostRunner,
      options: { table: TABLE },
    });
    await applier.apply(prepared.artifacts, { previous: undefined });
    const harness = createKernelHarness({
      lab: labAccess(lab),
      node: plan.host,
      table: TABLE,
      senderFor: (ingress) => {
        const node = plan.peers.get(ingress);
        if (node === undefined) throw new Error(`No lab node behind "${ingress}"`);
        return node;
      },
      // Every workload node faces the host by eth0 (buildFactsTopology): IPv6 link-local and
      // multicast destinations are sent by that interface's scope.
      linkOf: () => 'eth0',
      enterState: (state) =>
        enterState(lab, plan, state, () =>
          applier.apply(prepared.artifacts, { previous: undefined, routingOnly: true }),
        ),
    });
    const run = await harness.measure(packets.sent);

    const expected = packets.sent.map((tp) => evaluatePacket(ir, host, tp.packet, tp.state));
    const problems: string[] = [];
    const compared: number[] = [];
    run.observed.forEach((o, i) => {
      const tp = packets.sent[i] as TestPacket;
      if (!o.vanished) compared.push(i);
      else if (martian(tp) === undefined) {
        problems.push(
          `routing dropped it before any hook of ours: ${describePacket(name, tp, expected[i], o)}`,
        );
      }
    });

    // The shared conformance suite decides verdict and rule id, on what reached our hooks.
    const disagreements = await checkConformance({
      ir,
      host,
      packets: compared.map((i) => packets.sent[i] as TestPacket),
      harness: {
        name: 'kernel (replayed)',
        observe: () => Promise.resolve(compared.map((i) => run.observed[i] as KernelObserved)),
      },
    });
    for (const d of disagreements) {
      const i = packets.sent.indexOf(d.packet);
      problems.push(
        `disagreement: ${describePacket(name, d.packet, expected[i], run.observed[i])}`,
      );
    }
    // The exit the evaluator names is the one the kernel routed to.
    for (const i of compared) {
      const e = expected[i] as Explanation;
      const o = run.observed[i] as KernelObserved;
      if (e.verdict !== 'allow' || e.class === null || o.verdict !== 'allow') continue;
      const kernelVia = o.hook === 'input' ? 'local' : o.oif;
      // No exit in the facts: the lab's catch-all route took it (the evaluator notes "no route").
      if (e.via !== null && kernelVia !== e.via) {
        problems.push(
          `exit "${kernelVia}" ≠ evaluator's "${e.via}": ${describePacket(name, packets.sent[i] as TestPacket, e, o)}`,
        );
      }
    }
    // The counter-based proof: each named counter moved by exactly the packets the evaluator
    // gives its id, per state (this also catches a trace parser that misreads a rule).
    for (const [state, deltas] of run.counterDeltas) {
      const want = new Map<string, number>();
      for (const i of compared) {
        const tp = packets.sent[i] as TestPacket;
        const id = (expected[i] as Explanation).decidedBy.id;
        if (tp.state.tunnel === state && id !== null) want.set(id, (want.get(id) ?? 0) + 1);
        // The reassembly counter counts every fragment before reassembly, several a datagram.
        if (tp.state.tunnel === state && tp.packet.fragment !== undefined && id !== REASSEMBLY_ID) {
          want.set(REASSEMBLY_ID, (want.get(REASSEMBLY_ID) ?? 0) + 1);
        }
      }
      for (const id of new Set([...deltas.keys(), ...want.keys()])) {
        const moved = deltas.get(id) ?? 0;
        const wanted = want.get(id) ?? 0;
        if (id === REASSEMBLY_ID ? moved < wanted : moved !== wanted) {
          problems.push(
            `counter of "${id}" moved by ${deltas.get(id) ?? 0} with the tunnel ${state}; the evaluator gives it ${want.get(id) ?? 0} packets`,
          );
        }
      }
    }
    if (run.strays.length > 0) {
      problems.push(
        `${run.strays.length} traced packets were not probes (lab noise): ${run.strays.slice(0, 3).join(' | ')}`,
      );
    }
    // With steering removed, the kill switch alone held: it decided, and routing had sent
    // those packets out of somewhere else than the tunnel.
    for (const cls of ir.classes) {
      // Only forwarded packets are sent: a host class's kill switch is measured in
      // test/netns/host-kill-switch.test.ts.
      if (cls.killSwitch === null || cls.selector.kind !== 'ingress') continue;
      const killed = compared.filter(
        (i) => (run.observed[i] as KernelObserved).decidedBy === cls.killSwitch?.id,
      );
      if (killed.length === 0) problems.push(`kill switch "${cls.killSwitch.id}" never decided`);
      for (const i of killed) {
        const o = run.observed[i] as KernelObserved;
        const tp = packets.sent[i] as TestPacket;
        // With the tunnel up only a link-local destination leaves by another interface: the
        // kernel looks it up on the link it came by, whatever the ip rules say.
        const linkLocal =
          tp.packet.family === 6 && (tp.packet.destination as bigint) >> 118n === 0x3fan;
        if (o.oif === cls.via.interface || (tp.state.tunnel !== 'down' && !linkLocal)) {
          problems.push(`kill switch decided a packet routed into the tunnel: ${o.trace[0] ?? ''}`);
        }
      }
    }

    report(name, {
      packets,
      observed: run.observed,
      compared,
      durationMs: Math.round(performance.now() - started),
      measureMs: run.durationMs,
    });
    const details = join(tmpdir(), `nft-differential-${name}.txt`);
    if (problems.length > 0) writeFileSync(details, problems.join('\n\n'));
    expect(problems.slice(0, 20), `${problems.length} problems, all in ${details}`).toEqual([]);
    const classPackets = compared.filter((i) =>
      plan.classInterfaces.includes((packets.sent[i] as TestPacket).packet.ingress ?? ''),
    );
    expect(classPackets.length).toBeGreaterThanOrEqual(PACKETS);
  });
}

interface ChosenPackets {
  readonly sent: readonly TestPacket[];
  /** Generated packets the lab sender cannot send, with why. */
  readonly unsendable: readonly string[];
}

/**
 * Boundary packets of the classes, each with its ingress mapped onto the lab's interfaces, until
 * PACKETS of them can be sent and are no martians (so the filter must decide them), then
 * UNMANAGED more that arrive on interfaces of no class.
 */
function choosePackets(
  prepared: Prepared,
  plan: FactsLab,
  martian: (tp: TestPacket) => string | undefined,
): ChosenPackets {
  const { ir, facts } = prepared;
  const hostAddresses = AddressSet.fromPrefixes(
    facts.interfaces
      .flatMap((i) => i.addresses)
      .map((a) => parsePrefix(a.split('/')[0] ?? ''))
      .filter((p): p is Prefix => p !== undefined && !isLoopback(p)),
  );
  // Linux removes a link's IPv6 addresses when it goes down (no keep_addr_on_down), so with the
  // tunnel down its IPv6 address is no longer the host's, while the IR's host view (the facts)
  // still takes it as the host's: such a packet has no agreed answer and is not sent (the pf
  // differential leaves out a down utun's addresses for the same reason).
  const tunnelOwn6 = AddressSet.fromPrefixes(
    facts.interfaces
      .filter((i) => ir.tunnels.some((t) => t.name === i.name))
      .flatMap((i) => i.addresses.map((a) => parsePrefix(a.split('/')[0] ?? '')))
      .filter((p): p is Prefix => p !== undefined && p.family === 6),
  );
  const sent: TestPacket[] = [];
  const unsendable: string[] = [];
  let judged = 0; // sent and no martian: the kernel's filter must decide them
  const take = (tp: TestPacket, ingress: string | undefined): void => {
    const mapped = { ...tp, packet: { ...tp.packet, ingress } };
    const reason =
      tp.state.tunnel === 'down' && tunnelOwn6.contains(tp.packet.family, tp.packet.destination)
        ? `destination ${formatAddress(6, tp.packet.destination)} is the down tunnel's own IPv6 address`
        : unsendableReason(mapped, { linkScoped: true });
    if (reason !== undefined) {
      unsendable.push(reason);
      return;
    }
    sent.push(mapped);
    if (martian(mapped) === undefined) judged++;
  };
  for (let round = 0; judged < PACKETS; round++) {
    const batch = generateBoundaryPackets(ir, {
      count: PACKETS - judged,
      seed: SEED + round,
      hostAddresses,
    });
    if (batch.length === 0) break; // no class with an ingress interface
    for (const tp of batch) take(tp, plan.resolveIngress(tp.packet.ingress ?? ''));
  }
  const unmanaged = plan.unmanagedInterfaces;
  if (unmanaged.length > 0) {
    generateBoundaryPackets(ir, { count: UNMANAGED, seed: SEED - 1, hostAddresses }).forEach(
      (tp, i) => {
        take(tp, unmanaged[i % unmanaged.length]);
      },
    );
  }
  return { sent, unsendable };
}

/** Tunnel up: the link up and steering applied. Down: the link down and steering removed. */
async function enterState(
  lab: Lab,
  plan: FactsLab,
  state: EvaluationState,
  applySteering: () => Promise<unknown>,
): Promise<void> {
  const host = lab.runner(plan.host);
  if (state.tunnel === 'up') {
    for (const tunnel of plan.tunnels) await lab.setLinkUp({ node: plan.host, iface: tunnel });
    await applySteering();
    return;
  }
  // Each layer proven alone: with our routing rules gone, class packets take the main table, so
  // nothing but the nft kill switch stands between them and the uplink.
  await removeOwnedRules(host);
  for (const tunnel of plan.tunnels) await lab.setLinkDown({ node: plan.host, iface: tunnel });
  for (const family of ['-4', '-6']) {
    const { stdout } = await host.run(['ip', family, 'rule', 'show'], { effect: 'read' });
    expect(stdout).not.toMatch(/proto 104/);
  }
}

async function removeOwnedRules(host: Runner): Promise<void> {
  for (const family of ['-4', '-6'] as const) {
    const { stdout } = await host.run(['ip', '-j', family, 'rule', 'show'], { effect: 'read' });
    const rules = JSON.parse(stdout) as {
      priority: number;
      src?: string;
      srclen?: number;
      table?: string;
      protocol?: string;
    }[];
    for (const rule of rules.filter((r) => r.protocol === '104')) {
      await host.run(
        [
          'ip',
          family,
          'rule',
          'del',
          'priority',
          String(rule.priority),
          'from',
          rule.src === undefined || rule.src === 'all'
            ? 'all'
            : `${rule.src}/${rule.srclen ?? (family === '-4' ? 32 : 128)}`,
          'lookup',
          rule.table ?? '',
          'proto',
          '104',
        ],
        { effect: 'change' },
      );
    }
  }
}

/**
 * Why the kernel drops a packet in routing, before any filter hook (the reference evaluator
 * does not model it): IPv4 martians (net/ipv4/route.c ip_route_input_slow and
 * fib_validate_source): a source that is one of the host's addresses or the broadcast of one
 * of its prefixes, or in 0/8, 127/8, 224/4 or 255.255.255.255; a destination in 0/8 or 127/8.
 */
function martianCheck(addresses: readonly string[]): (tp: TestPacket) => string | undefined {
  const own: Prefix[] = [];
  for (const text of addresses) {
    const prefix = parsePrefix(text);
    const address = parsePrefix(text.split('/')[0] ?? '');
    if (prefix === undefined || address === undefined || prefix.family !== 4) continue;
    own.push(address);
    if (prefix.length < 31) own.push({ ...address, start: prefixEnd(prefix), length: 32 });
  }
  const badSources = AddressSet.fromPrefixes(own).union(
    AddressSet.parse(['0.0.0.0/8', '127.0.0.0/8', '224.0.0.0/4', '255.255.255.255/32']),
  );
  const badDestinations = AddressSet.parse(['0.0.0.0/8', '127.0.0.0/8']);
  return (tp) => {
    const { family, source, destination } = tp.packet;
    if (family !== 4) return undefined;
    if (badSources.contains(4, source)) return `martian source ${formatAddress(4, source)}`;
    if (badDestinations.contains(4, destination))
      return `martian destination ${formatAddress(4, destination)}`;
    return undefined;
  };
}

function isLoopback(prefix: Prefix): boolean {
  return prefix.family === 4 ? (prefix.start as number) >>> 24 === 127 : prefix.start === 1n;
}

/** A packet as the explain command that reproduces it, with both sides' answers. */
function describePacket(
  name: string,
  tp: TestPacket,
  expected: Explanation | undefined,
  observed: KernelObserved | undefined,
): string {
  const p = tp.packet;
  const proto = typeof p.protocol === 'number' ? String(p.protocol) : p.protocol;
  const command = [
    `egressguard explain ${join(CASES, name, 'policy.yaml')}`,
    `--from ${formatAddress(p.family, p.source)} --to ${formatAddress(p.family, p.destination)}`,
    `--in ${p.ingress ?? '?'} --proto ${proto}`,
    ...(p.port === undefined ? [] : [`--port ${p.port}`]),
    ...(p.fragment === undefined ? [] : [`--fragment ${p.fragment}`]),
    `--tunnel ${tp.state.tunnel}`,
  ].join(' ');
  return [
    command,
    `expected ${expected?.verdict ?? '?'} by ${expected?.decidedBy.id ?? 'none'} (via ${expected?.via ?? '-'})`,
    `kernel ${observed?.verdict ?? '?'} by ${observed?.decidedBy ?? 'none'} (hook ${observed?.hook ?? '-'}, oif ${observed?.oif ?? '-'})`,
    ...(observed?.trace.slice(0, 8) ?? []),
  ].join('\n    ');
}

function report(
  name: string,
  r: {
    packets: ChosenPackets;
    observed: readonly KernelObserved[];
    compared: readonly number[];
    durationMs: number;
    measureMs: number;
  },
): void {
  const lines = [
    `nft differential "${name}": ${r.packets.sent.length} packets sent, ${r.packets.unsendable.length} generated but unsendable, ${r.observed.length - r.compared.length} dropped by routing (martians), ${r.measureMs} ms measuring, ${r.durationMs} ms in all`,
  ];
  for (const state of ['up', 'down'] as const) {
    const counts = new Map<string, number>();
    for (const i of r.compared) {
      if ((r.packets.sent[i] as TestPacket).state.tunnel !== state) continue;
      const o = r.observed[i] as KernelObserved;
      const key = `${o.decidedBy ?? 'unmanaged'} ${o.verdict}`;
      counts.set(key, (counts.get(key) ?? 0) + 1);
    }
    lines.push(
      `  tunnel ${state}: ${[...counts]
        .sort(([a], [b]) => a.localeCompare(b))
        .map(([k, n]) => `${k} ${n}`)
        .join(', ')}`,
    );
  }
  const reasons = new Map<string, number>();
  for (const reason of r.packets.unsendable) {
    const kind = reason.replace(/^(\S+) \S+ is /, '$1 is ');
    reasons.set(kind, (reasons.get(kind) ?? 0) + 1);
  }
  if (reasons.size > 0)
    lines.push(`  unsendable: ${[...reasons].map(([k, n]) => `${k} ${n}`).join(', ')}`);
  console.log(lines.join('\n'));
}
