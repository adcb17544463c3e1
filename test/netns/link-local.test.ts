import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { DEFAULT_TABLE } from '../../src/backends/nftables/index.js';
import { createKernelHarness, type KernelObserved } from '../../sim/nftables/nft-kernel-harness.js';
import { gatherFacts, type HostFacts } from '../../src/facts/index.js';
import {
  createHostView,
  evaluatePacket,
  lowerForHost,
  parsePacketArguments,
  type Explanation,
  type PacketArguments,
} from '../../src/ir/index.js';
import { loadPolicy } from '../../src/policy/index.js';
import { labAccess, type Lab } from '../../src/prove/index.js';
import type { RunningCommand } from '../../src/runner/index.js';
import {
  cli,
  createGatewayLab,
  createTempDir,
  HOST,
  POLICY_A,
  target,
} from './support/vpn-gateway-lab.js';

// Issue 8, §4: explain disagreed with the kernel on link-local traffic. An ICMPv6 echo to the
// host's link-local address is no neighbour discovery (only RS/NS/NA with hop limit 255 are), UDP
// to it can only be judged in the input hook, DHCPv6 from a workload stays open like DHCPv4, and a
// link-local address that is not the host's goes back out of its link through the forward hook.
// Each packet goes through the real kernel, whose trace names the hook and the rule that decided.

let lab: Lab;
let facts: HostFacts;
let listener: RunningCommand | undefined;
const state = createTempDir('egtest-linklocal');

beforeAll(async () => {
  lab = await createGatewayLab();
  const applied = await cli(['apply', POLICY_A, '--json', ...target(lab, state.path)]);
  expect(applied.stderr).toBe('');
  facts = await gatherFacts(lab.runner(HOST), { tools: false });
  // A DHCPv6 server joins All_DHCP_Relay_Agents_and_Servers; without one the host drops what is
  // sent there before any hook (nothing listens).
  listener = lab
    .runner(HOST)
    .start(
      [
        'python3',
        '-c',
        [
          'import socket, struct, time',
          's = socket.socket(socket.AF_INET6, socket.SOCK_DGRAM)',
          's.bind(("::", 547))',
          'group = socket.inet_pton(socket.AF_INET6, "ff02::1:2")',
          's.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_JOIN_GROUP, group + struct.pack("@I", socket.if_nametoindex("vwl0")))',
          'print("joined", flush=True)',
          'time.sleep(120)',
        ].join('\n'),
      ],
      { effect: 'change' },
    );
  for await (const line of listener.lines) if (line === 'joined') break;
});

afterAll(async () => {
  await listener?.stop();
  await lab.destroy();
  state.dispose();
});

function hostLinkLocal(): string {
  const address = facts.interfaces
    .find((i) => i.name === 'vwl0')
    ?.addresses.find((a) => a.startsWith('fe80:'));
  if (address === undefined) throw new Error('vwl0 of the lab host has no link-local address');
  return address.split('/')[0] ?? '';
}

/** The solicited-node multicast address of an IPv6 address (RFC 4291 §2.7.1). */
function solicitedNode(address: string): string {
  const groups = address.split(':');
  const last = groups.at(-1) ?? '0';
  const beforeLast = (groups.at(-2) ?? '0').padStart(4, '0');
  return `ff02::1:ff${beforeLast.slice(2)}:${last}`;
}

describe('explain agrees with the kernel on link-local traffic', () => {
  it('judges each case as the kernel does: the hook, the verdict and the rule', async () => {
    const parsed = loadPolicy(POLICY_A);
    if (parsed.policy === undefined) throw new Error(JSON.stringify(parsed.issues));
    const ir = lowerForHost(parsed.policy, facts);
    const view = createHostView(facts);
    const own = hostLinkLocal();
    const cases: { name: string; args: PacketArguments; want: Partial<Explanation> }[] = [
      {
        name: 'an echo request to the host is no neighbour discovery',
        args: { from: 'fe80::5', to: own, proto: 'icmp' },
        want: {
          verdict: 'deny',
          hook: 'input',
          decidedBy: { kind: 'anti-spoofing', id: 'vpn/anti-spoofing' },
        },
      },
      {
        name: 'a neighbour solicitation to its solicited-node address',
        args: { from: 'fe80::5', to: solicitedNode(own), proto: 'icmp', icmpType: '135' },
        want: {
          verdict: 'allow',
          hook: 'input',
          decidedBy: { kind: 'neighbour-discovery', id: 'vpn/neighbour-discovery' },
        },
      },
      {
        name: 'UDP to the host, judged in the input hook',
        args: { from: 'fe80::5', to: own, proto: 'udp', port: '9' },
        want: {
          verdict: 'deny',
          hook: 'input',
          decidedBy: { kind: 'anti-spoofing', id: 'vpn/anti-spoofing' },
        },
      },
      {
        name: 'DHCPv6 to All_DHCP_Relay_Agents_and_Servers',
        args: { from: 'fe80::5', to: 'ff02::1:2', proto: 'udp', port: '547' },
        want: { verdict: 'allow', hook: 'input', decidedBy: { kind: 'dhcp', id: 'vpn/dhcp' } },
      },
      {
        // Routed back out of vwl0 through the forward hook, where its link-local source fails
        // anti-spoofing.
        name: 'a link-local address that is not the host',
        args: { from: 'fe80::5', to: 'fe80::99', proto: 'udp', port: '9' },
        want: {
          verdict: 'deny',
          hook: 'forward',
          decidedBy: { kind: 'anti-spoofing', id: 'vpn/anti-spoofing' },
        },
      },
    ];
    const packets = cases.map((c) => ({
      packet: parsePacketArguments({ ...c.args, in: 'vwl0' }),
      state: { tunnel: 'up' as const },
    }));
    const explained = packets.map((tp) => evaluatePacket(ir, view, tp.packet, tp.state));
    cases.forEach((c, i) => {
      expect(explained[i], c.name).toMatchObject(c.want);
    });

    // The sender's kernel would resolve each link-local destination by neighbour discovery, and
    // fe80::99 never answers: tell it the host's MAC for both, as a confused workload might.
    const { stdout } = await lab.runner(HOST).run(['ip', '-j', 'link', 'show', 'vwl0'], {
      effect: 'read',
    });
    const mac = (JSON.parse(stdout) as { address: string }[])[0]?.address ?? '';
    for (const address of [own, 'fe80::99']) {
      await lab
        .runner('vpnwl')
        .run(
          [
            'ip',
            '-6',
            'neigh',
            'replace',
            address,
            'lladdr',
            mac,
            'dev',
            'eth0',
            'nud',
            'permanent',
          ],
          {
            effect: 'change',
          },
        );
    }
    const harness = createKernelHarness({
      lab: labAccess(lab),
      node: HOST,
      table: DEFAULT_TABLE,
      senderFor: () => 'vpnwl',
      linkOf: () => 'eth0',
      enterState: () => Promise.resolve(),
    });
    const observed = await harness.observe(packets);
    cases.forEach((c, i) => {
      const o = observed[i] as KernelObserved;
      const e = explained[i] as Explanation;
      expect({ verdict: o.verdict, decidedBy: o.decidedBy, hook: o.hook }, c.name).toEqual({
        verdict: e.verdict,
        decidedBy: e.decidedBy.id,
        hook: e.hook,
      });
    });
  });
});
