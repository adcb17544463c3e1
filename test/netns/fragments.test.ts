import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { compileWithHash, type Artifact } from '../../src/backends/index.js';
import { nftablesBackend } from '../../src/backends/nftables/index.js';
import { gatherFacts, type HostFacts } from '../../src/facts/index.js';
import {
  createHostView,
  evaluatePacket,
  lowerForHost,
  parsePacketArguments,
  type FragmentPart,
} from '../../src/ir/index.js';
import { loadPolicy } from '../../src/policy/index.js';
import {
  createLab,
  createNonce,
  sendPackets,
  startObserver,
  type Lab,
  type ObservedPacket,
  type PacketSpec,
  type Topology,
} from '../../src/prove/index.js';

// Issue 8, §1: without reassembly before our hooks, non-first fragments of a datagram to a denied
// port passed the `th dport` rule (they carry no transport header) and the class default let them
// out, in both families; the mirror image (default deny, an allowed port) lost a datagram's tail.
// Fragments must be judged like the datagram they belong to, as the evaluator says.

const TABLE = 'egtest_frag';
const topology: Topology = {
  nodes: {
    wl: {
      sysctls: { 'net.ipv4.ip_nonlocal_bind': 1, 'net.ipv6.ip_nonlocal_bind': 1 },
      routes: [
        { to: 'default', via: '100.70.0.1' },
        { to: 'default', via: '2001:db8:70::1' },
      ],
    },
    host: {
      forwarding: true,
      routes: [
        { to: 'default', via: '198.51.100.1' },
        { to: 'default', via: '2001:db8:51::1' },
      ],
    },
    internet: {
      routes: [
        { to: '100.70.0.0/24', via: '198.51.100.2' },
        { to: '2001:db8:70::/64', via: '2001:db8:51::2' },
      ],
    },
  },
  links: [
    {
      a: { node: 'host', iface: 'vwl0', addresses: ['100.70.0.1/24', '2001:db8:70::1/64'] },
      b: { node: 'wl', iface: 'eth0', addresses: ['100.70.0.5/24', '2001:db8:70::5/64'] },
    },
    {
      a: { node: 'host', iface: 'eth0', addresses: ['198.51.100.2/24', '2001:db8:51::2/64'] },
      b: { node: 'internet', iface: 'eth0', addresses: ['198.51.100.1/24', '2001:db8:51::1/64'] },
    },
  ],
};

/** The issue's policy: port-scoped denies, default allow, no NAT (conntrack was off then). */
const DENY_PORTS = `
apiVersion: egressguard/v1
metadata: { name: fragments-deny }
interfaces: { uplink: eth0 }
classes:
  wl:
    ingress: [vwl0]
    sources: [100.70.0.0/24, '2001:db8:70::/64']
    via: uplink
    rules:
      - { id: deny-mdns, action: deny, to: any, proto: udp, ports: [5353] }
      - { id: deny-alt, action: deny, to: any, proto: tcp, ports: [8443] }
    default: allow
`;
/** The mirror image: default deny, one UDP port allowed. */
const ALLOW_PORT = `
apiVersion: egressguard/v1
metadata: { name: fragments-allow }
interfaces: { uplink: eth0 }
classes:
  wl:
    ingress: [vwl0]
    sources: [100.70.0.0/24, '2001:db8:70::/64']
    via: uplink
    rules:
      - { id: allow-app, action: allow, to: any, proto: udp, ports: [9999] }
    default: deny
`;

const FAR = { 4: '198.51.100.1', 6: '2001:db8:51::1' } as const;
const SRC = { 4: '100.70.0.5', 6: '2001:db8:70::5' } as const;
const FRAGMENT_SIZE = 512;
const LENGTH = 1400; // three fragments of IP payload

let lab: Lab;
let facts: HostFacts;
let dir: string;

beforeAll(async () => {
  lab = await createLab(topology);
  facts = await gatherFacts(lab.runner('host'), { tools: false });
  dir = mkdtempSync(join(tmpdir(), 'egtest-frag-'));
});

afterAll(async () => {
  await lab.destroy();
  rmSync(dir, { recursive: true, force: true });
});

interface Compiled {
  readonly artifacts: readonly Artifact[];
  readonly explain: (args: {
    family: 4 | 6;
    proto: string;
    port: number;
    fragment: FragmentPart;
  }) => { verdict: string; rule: string | null };
}

async function applyPolicy(text: string, name: string): Promise<Compiled> {
  const file = join(dir, `${name}.yaml`);
  writeFileSync(file, text);
  const { policy, issues } = loadPolicy(file);
  if (policy === undefined) throw new Error(JSON.stringify(issues));
  const ir = lowerForHost(policy, facts);
  const { artifacts } = compileWithHash(nftablesBackend, {
    ir,
    options: { table: TABLE },
    versions: { compiler: 'test', agent: 'test' },
  });
  await nftablesBackend
    .createApplier({ runner: lab.runner('host'), options: { table: TABLE } })
    .apply(artifacts, { previous: undefined });
  const view = createHostView(facts);
  return {
    artifacts,
    explain: ({ family, proto, port, fragment }) => {
      const packet = parsePacketArguments({
        from: SRC[family],
        to: FAR[family],
        in: 'vwl0',
        proto,
        port: String(port),
        fragment,
      });
      const result = evaluatePacket(ir, view, packet, { tunnel: 'up' });
      return { verdict: result.verdict, rule: result.decidedBy.id };
    },
  };
}

/** Sends the datagram in fragments (all, or only the non-first) and returns what arrived. */
async function sendFragmented(spec: {
  family: 4 | 6;
  kind: 'udp' | 'tcp';
  dport: number;
  fragment: 'all' | 'non-first';
}): Promise<readonly ObservedPacket[]> {
  const nonce = createNonce();
  const observer = await startObserver(lab, { node: 'internet', iface: 'eth0', nonce });
  await observer.armed();
  const packet: PacketSpec = {
    kind: spec.kind,
    src: SRC[spec.family],
    dst: FAR[spec.family],
    dport: spec.dport,
    count: 3,
    fragment: spec.fragment,
    fragmentSize: FRAGMENT_SIZE,
    length: LENGTH,
  };
  await sendPackets(lab.runner('wl'), { nonce, packets: [packet] });
  return (await observer.stop()).packets;
}

describe.each([4, 6] as const)('fragments of IPv%d are judged like their datagram', (family) => {
  it('drops every fragment of a datagram to a denied port, and a non-first fragment alone', async () => {
    const compiled = await applyPolicy(DENY_PORTS, 'deny');
    for (const [kind, dport] of [
      ['udp', 5353],
      ['tcp', 8443],
    ] as const) {
      for (const fragment of ['first', 'non-first'] as const) {
        expect(compiled.explain({ family, proto: kind, port: dport, fragment })).toEqual({
          verdict: 'deny',
          rule: kind === 'udp' ? 'deny-mdns' : 'deny-alt',
        });
      }
      expect(compiled.explain({ family, proto: kind, port: dport, fragment: 'alone' })).toEqual({
        verdict: 'deny',
        rule: 'egressguard/reassembly',
      });
      const whole = await sendFragmented({ family, kind, dport, fragment: 'all' });
      expect(whole, `${kind}/${dport}: fragments beyond the uplink`).toEqual([]);
      const alone = await sendFragmented({ family, kind, dport, fragment: 'non-first' });
      expect(alone, `${kind}/${dport}: lone non-first fragments beyond the uplink`).toEqual([]);
    }
  });

  it('lets every fragment of a datagram to an allowed port through, and holds a lone one', async () => {
    const compiled = await applyPolicy(ALLOW_PORT, 'allow');
    for (const fragment of ['first', 'non-first'] as const) {
      expect(compiled.explain({ family, proto: 'udp', port: 9999, fragment })).toEqual({
        verdict: 'allow',
        rule: 'allow-app',
      });
    }
    const whole = await sendFragmented({ family, kind: 'udp', dport: 9999, fragment: 'all' });
    // Three datagrams, each forwarded whole: its first fragment and its tail, all 1,400 bytes.
    const header = family === 4 ? 20 : 48;
    const payload = whole.reduce((sum, p) => sum + p.length - header, 0);
    expect(whole.filter((p) => p.fragment === 'first')).toHaveLength(3);
    expect(whole.filter((p) => p.fragment === 'non-first').length).toBeGreaterThanOrEqual(3);
    expect(payload).toBe(3 * (8 + LENGTH));
    const alone = await sendFragmented({ family, kind: 'udp', dport: 9999, fragment: 'non-first' });
    expect(alone, 'a datagram that never completes leaves nothing').toEqual([]);
    expect(compiled.explain({ family, proto: 'udp', port: 9999, fragment: 'alone' })).toEqual({
      verdict: 'deny',
      rule: 'egressguard/reassembly',
    });
  });
});
