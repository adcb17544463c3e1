import { existsSync, readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { createDoctorContext, diagnose } from './nft-doctor.js';
import type { DoctorContext, DoctorSnapshot } from './nft-doctor-snapshot.js';
import { classifyChains } from './nft-doctor-chains.js';
import {
  classifyNetworkd,
  NETWORKD_DROP_IN,
  orderNetworkdConfig,
  readNetworkdBoolean,
} from './nft-doctor-networkd.js';
import { classifyRouting } from './nft-doctor-routing.js';
import { classifyTopology, parseXfrmPolicies } from './nft-doctor-topology.js';

// Listings captured from nft 1.0.6, iproute2 6.1 and tc on Debian 12 by
// testdata/doctor/capture.sh, in throwaway namespaces.
function loadSnapshot(name: 'busy-host' | 'clean-host'): DoctorSnapshot {
  const dir = new URL(`../../../testdata/doctor/${name}/`, import.meta.url);
  const json = (file: string): unknown => JSON.parse(readFileSync(new URL(file, dir), 'utf8'));
  const filters = ['ingress', 'egress'].flatMap((direction) => {
    const file = new URL(`filters.eth0-peer.${direction}.json`, dir);
    return existsSync(file)
      ? [
          {
            dev: 'eth0-peer',
            direction: direction as 'ingress' | 'egress',
            filters: json(file.href),
          },
        ]
      : [];
  });
  return {
    ruleset: json('ruleset.json'),
    rules: { 4: json('rules4.json'), 6: json('rules6.json') },
    routes: { 4: json('routes4.json'), 6: json('routes6.json') },
    links: json('links.json'),
    tcFilters: filters,
    xfrmPolicies: readFileSync(new URL('xfrm-policy.txt', dir), 'utf8'),
    bridgeNetfilter: null,
    legacyIptables: { 4: [], 6: [] },
    networkd: null,
  };
}

const busy = loadSnapshot('busy-host');
const clean = loadSnapshot('clean-host');
const noPolicy = (uplink: string): DoctorContext =>
  createDoctorContext({ table: 'egressguard', uplink });
const vpnSteering = {
  protocol: 104,
  tunnels: [{ name: 'tun0', table: 7350, priority: 7350 }],
  rules: [],
  routes: [],
};

describe('diagnose', () => {
  it('has nothing to say about a host with only our table and steering', () => {
    const report = diagnose(clean, noPolicy('eth0'));
    expect(report.findings).toEqual([]);
    expect(report.summary).toEqual({ errors: 0, warnings: 0, infos: 0 });
  });

  it('reports everything on a busy host, grouped by area, errors first', () => {
    const report = diagnose(busy, noPolicy('br0'));
    expect(report.findings.map((f) => `${f.area} ${f.severity} ${f.code}`)).toEqual([
      'nftables warning foreign-base-chain', // firewalld filter_INPUT
      'nftables warning foreign-base-chain', // Docker's FORWARD
      'nftables warning foreign-base-chain', // firewalld filter_FORWARD
      'nftables warning foreign-base-chain', // ip6 mesh output (verdict map)
      'nftables warning foreign-base-chain', // ip6 mesh postrouting
      'nftables info foreign-base-chain', // firewalld prerouting: drops before routing
      'nftables info foreign-base-chain', // inet audit: only counts
      'nftables info foreign-base-chain', // firewalld filter_OUTPUT
      'nftables info foreign-base-chain', // Docker's nat POSTROUTING
      'nftables info foreign-base-chain', // firewalld nat_POSTROUTING
      'routing error rule-priority-collision',
      'routing error route-table-collision',
      'routing warning tailscale-routing',
      'routing info wg-quick-routing',
      'topology warning uplink-bridged',
      'topology warning xdp-program',
      'topology warning macvlan-link',
      'topology warning tc-bpf-program',
      'topology warning ipsec-without-interface',
      'topology info tc-classic-bpf',
    ]);
    expect(report.summary).toEqual({ errors: 2, warnings: 11, infos: 7 });
    for (const finding of report.findings) {
      expect(finding.message).not.toMatch(/\.$/);
      expect(finding.hint).not.toBe('');
    }
  });

  it('fails a class that selects ports of the bridge the uplink is in', () => {
    const context: DoctorContext = {
      ...noPolicy('br0'),
      classes: [{ name: 'vm', interfaces: ['vnet*'] }],
    };
    const codes = diagnose(busy, context).findings.filter((f) => f.area === 'topology');
    expect(codes.filter((f) => f.severity === 'error').map((f) => f.message)).toEqual([
      'The uplink "br0" is a bridge with ports "eth0", "vnet0": workloads on those ports reach the outside at layer 2, so netfilter\'s forward hook never sees their packets and egressguard\'s class rules never apply to them. Class "vm" selects interfaces on it',
      'Class "vm" selects "vnet0", a port of bridge "br0": routed packets from it arrive on "br0", so the class never matches and its traffic is not filtered',
    ]);
  });

  it('derives our tables and priorities from the steering the compiler builds', () => {
    const context = createDoctorContext({
      table: 'egressguard',
      uplink: 'eth0',
      steering: {
        ...vpnSteering,
        tunnels: [
          { name: 'tun0', table: 7350, priority: 7350 },
          { name: 'tun1', table: 7351, priority: 7351 },
        ],
      },
    });
    expect(context.steering).toEqual({
      tables: [7350, 7351],
      priorities: [7350, 7351],
      protocol: 104,
      inUse: true,
    });
    expect(createDoctorContext({ table: 'x', uplink: null }).steering.inUse).toBeNull();
  });
});

describe('foreign base chains', () => {
  const { foreignChains } = classifyChains(busy.ruleset, { table: 'egressguard' });

  it('lists each with table, family, hook, priority, policy and order against ours', () => {
    const docker = foreignChains.find((c) => c.table === 'filter' && c.chain === 'FORWARD');
    expect(docker).toEqual({
      family: 'ip',
      table: 'filter',
      chain: 'FORWARD',
      hook: 'forward',
      type: 'filter',
      priority: 0,
      policy: 'drop',
      order: 'same-priority',
      canDrop: true,
      // The drop in DOCKER-ISOLATION-STAGE-2 is reached by a jump through STAGE-1.
      dropReasons: ['policy drop', 'drop in chain "DOCKER-ISOLATION-STAGE-2", rule handle 8'],
    });
    expect(
      foreignChains.map((c) => `${c.hook} ${c.family} ${c.table} ${c.chain} ${c.order}`),
    ).toEqual([
      'prerouting inet firewalld filter_PREROUTING before',
      'input inet firewalld filter_INPUT after',
      'forward inet audit watch before',
      'forward ip filter FORWARD same-priority',
      'forward inet firewalld filter_FORWARD after',
      'output ip6 mesh out before',
      'output inet firewalld filter_OUTPUT after',
      'postrouting ip6 mesh post before',
      'postrouting ip nat POSTROUTING same-priority',
      'postrouting inet firewalld nat_POSTROUTING after',
    ]);
  });

  it('follows gotos, verdict maps inline and named, and leaves chains that only accept', () => {
    const byName = new Map(foreignChains.map((c) => [`${c.table}/${c.chain}`, c]));
    expect(byName.get('firewalld/filter_INPUT')?.dropReasons).toEqual([
      'drop in rule handle 20',
      'reject in rule handle 22',
    ]);
    expect(byName.get('mesh/out')?.dropReasons).toEqual([
      'verdict map @verdicts in rule handle 4, whose elements are not listed',
    ]);
    expect(byName.get('mesh/post')?.dropReasons).toEqual(['drop in rule handle 6']);
    expect(byName.get('firewalld/filter_OUTPUT')?.canDrop).toBe(false);
    expect(byName.get('audit/watch')?.canDrop).toBe(false);
    // Prerouting chains are listed only when they can drop.
    expect(byName.has('nat/PREROUTING')).toBe(false);
    expect(byName.has('firewalld/mangle_PREROUTING')).toBe(false);
  });

  it('treats a table of our name in another family, or another name, as foreign', () => {
    const renamed = classifyChains(busy.ruleset, { table: 'eg2' });
    expect(renamed.foreignChains.filter((c) => c.table === 'egressguard')).toHaveLength(4);
    expect(renamed.findings.map((f) => f.code)).toContain('table-absent');
  });

  it('warns about legacy iptables, which nft cannot list', () => {
    const { findings } = classifyChains(clean.ruleset, {
      table: 'egressguard',
      legacyIptables: { 4: ['filter', 'nat'], 6: [] },
    });
    expect(findings).toEqual([
      expect.objectContaining({
        severity: 'warning',
        code: 'iptables-legacy',
        message: expect.stringContaining('(iptables: filter, nat)') as string,
      }),
    ]);
  });
});

describe('routing collisions', () => {
  const ours = { tables: [7350], priorities: [7350], protocol: 104, inUse: true };

  it('leaves our own rules and routes (proto 104) alone', () => {
    expect(classifyRouting(clean, ours)).toEqual([]);
  });

  it('reports a foreign rule at our priority and a foreign route in our table', () => {
    const findings = classifyRouting(busy, ours).filter((f) => f.severity === 'error');
    expect(findings.map((f) => [f.code, f.message])).toEqual([
      [
        'rule-priority-collision',
        'Routing rule "7350: from 10.20.0.0/24 lookup 100" (IPv4) is not ours and sits at priority 7350, which egressguard uses for steering',
      ],
      [
        'route-table-collision',
        'Routing table 7350, which egressguard owns, holds a route that is not ours: "10.99.0.0/16 dev vwl0 proto boot" (IPv4)',
      ],
    ]);
  });

  it('reports a foreign rule that looks up our table', () => {
    const findings = classifyRouting(busy, { ...ours, tables: [100] });
    expect(findings.map((f) => f.code)).toContain('rule-table-collision');
  });

  it("refuses ids of wg-quick's and Tailscale's", () => {
    const findings = classifyRouting(clean, { ...ours, tables: [51820, 52], priorities: [5250] });
    expect(findings.map((f) => f.message)).toEqual([
      "egressguard's routing table 51820 is the one wg-quick uses",
      "egressguard's routing table 52 is the one Tailscale uses",
      "egressguard's rule priority 5250 is within Tailscale's range 5210–5270",
    ]);
  });

  it('warns about a catch-all rule before ours whose table has a default route', () => {
    const rules = { 4: [{ priority: 100, src: 'all', table: '200' }], 6: [] };
    const routes = { 4: [{ dst: 'default', dev: 'ppp0', table: '200' }], 6: [] };
    expect(classifyRouting({ rules, routes }, ours)).toEqual([
      expect.objectContaining({ severity: 'warning', code: 'rule-preempts-steering' }),
    ]);
    const narrowed = { 4: [{ priority: 100, src: 'all', fwmark: '0x1', table: '200' }], 6: [] };
    expect(classifyRouting({ rules: narrowed, routes }, ours)).toEqual([]);
  });

  it('says only "info" while the policy has no tunnel class', () => {
    const findings = classifyRouting(busy, { ...ours, inUse: false });
    expect(findings.every((f) => f.severity === 'info')).toBe(true);
    expect(findings[0]?.message).toMatch(/the policy has no tunnel class/);
  });
});

describe('systemd-networkd', () => {
  const steering = { tables: [7350], priorities: [7350], protocol: 104, inUse: true };
  const stock = {
    path: '/etc/systemd/networkd.conf',
    text: '[Network]\n#SpeedMeter=no\n#ManageForeignRoutingPolicyRules=yes\n',
  };

  it('warns when it runs with the default, and prints the drop-in to ship', () => {
    const [finding] = classifyNetworkd({ running: true, enabled: true, files: [stock] }, steering);
    expect(finding).toMatchObject({ severity: 'warning', code: 'networkd-foreign-rules' });
    expect(finding?.message).toMatch(/ManageForeignRoutingPolicyRules=yes \(the default\)/);
    expect(finding?.hint).toContain(
      '/etc/systemd/networkd.conf.d/egressguard.conf, then `systemctl restart systemd-networkd`:\n[Network]\nManageForeignRoutingPolicyRules=no\n',
    );
  });

  it('is satisfied by our drop-in, and silent when networkd is neither running nor enabled', () => {
    const files = [stock, { path: NETWORKD_DROP_IN.path, text: NETWORKD_DROP_IN.content }];
    expect(classifyNetworkd({ running: true, enabled: true, files }, steering)).toEqual([]);
    expect(classifyNetworkd({ running: false, enabled: false, files: [stock] }, steering)).toEqual(
      [],
    );
  });

  it('reads settings like systemd: later files win, other sections and bad values are ignored', () => {
    const files = [
      { path: 'a', text: '[Network]\nManageForeignRoutingPolicyRules=no\n' },
      { path: 'b', text: '[DHCPv4]\nManageForeignRoutingPolicyRules=yes\n' },
      { path: 'c', text: '[Network]\nManageForeignRoutingPolicyRules = maybe\n' },
    ];
    expect(readNetworkdBoolean(files, 'ManageForeignRoutingPolicyRules')).toBe(false);
    expect(
      readNetworkdBoolean(
        [...files, { path: 'd', text: ' [Network] \n; c\nManageForeignRoutingPolicyRules=on' }],
        'ManageForeignRoutingPolicyRules',
      ),
    ).toBe(true);
  });

  it('orders drop-ins by name, /etc masking /usr/lib', () => {
    expect(
      orderNetworkdConfig('/etc/systemd/networkd.conf', [
        { dir: '/usr/lib/systemd/networkd.conf.d', name: '50-vendor.conf' },
        { dir: '/usr/lib/systemd/networkd.conf.d', name: '90-x.conf' },
        { dir: '/etc/systemd/networkd.conf.d', name: '90-x.conf' },
        { dir: '/run/systemd/networkd.conf.d', name: '10-run.conf' },
        { dir: '/etc/systemd/networkd.conf.d', name: 'README' },
      ]),
    ).toEqual([
      '/etc/systemd/networkd.conf',
      '/run/systemd/networkd.conf.d/10-run.conf',
      '/usr/lib/systemd/networkd.conf.d/50-vendor.conf',
      '/etc/systemd/networkd.conf.d/90-x.conf',
    ]);
  });
});

describe('topology', () => {
  const context = {
    uplink: 'br0',
    uplinkProblem: null,
    classes: [],
    tunnels: [],
    missingIngress: [],
  };

  it('is quiet about a plain uplink and veth class interfaces', () => {
    expect(classifyTopology(clean, { ...context, uplink: 'eth0' })).toEqual([]);
  });

  it('warns of an ingress interface the host does not have (a typo filters nothing)', () => {
    const findings = classifyTopology(clean, {
      ...context,
      uplink: 'eth0',
      missingIngress: [
        { class: 'containers', interface: 'docker1', suggestion: ' (did you mean "docker0"?)' },
      ],
    });
    expect(findings).toEqual([
      expect.objectContaining({
        severity: 'warning',
        code: 'ingress-missing',
        message:
          'Class "containers" names ingress "docker1", which this host does not have (did you mean "docker0"?): the class filters nothing until it appears, and workloads behind another interface leave unfiltered',
      }),
    ]);
  });

  it('sees the uplink bridged whether the bridge or its port carries the default route', () => {
    const asPort = classifyTopology(busy, { ...context, uplink: 'eth0' });
    expect(asPort.find((f) => f.code === 'uplink-bridged')?.message).toMatch(
      /^The uplink "eth0" is a port of bridge "br0", beside "vnet0"/,
    );
  });

  it('explains br_netfilter when it is loaded', () => {
    const findings = classifyTopology({ ...busy, bridgeNetfilter: true }, context);
    expect(findings.find((f) => f.code === 'uplink-bridged')?.message).toMatch(
      /br_netfilter is loaded/,
    );
  });

  it('warns that the uplink is unknown instead of guessing', () => {
    const findings = classifyTopology(clean, {
      ...context,
      uplink: null,
      uplinkProblem: 'default routes leave by "eth0" and "eth1"',
    });
    expect(findings).toEqual([expect.objectContaining({ code: 'uplink-unresolved' })]);
  });

  it('says which checks could not run instead of passing them', () => {
    const findings = classifyTopology(
      { ...clean, tcFilters: null, xfrmPolicies: null },
      {
        ...context,
        uplink: 'eth0',
      },
    );
    expect(findings.map((f) => [f.severity, f.code, f.message])).toEqual([
      [
        'info',
        'check-skipped',
        'tc is not installed or could not list qdiscs: tc eBPF filters were not checked',
      ],
      ['info', 'check-skipped', '`ip xfrm policy show` failed: IPsec policies were not checked'],
    ]);
  });

  it('reads xfrm policies from text, skipping per-socket ones', () => {
    // `ip xfrm policy show` prints socket policies as "socket in|out" (iproute2 ip/ipxfrm.c).
    const text = [
      'src 0.0.0.0/0 dst 0.0.0.0/0 ',
      '\tsocket in priority 0 ptype main ',
      busy.xfrmPolicies ?? '',
    ].join('\n');
    expect(parseXfrmPolicies(text)).toEqual([
      { selector: 'src 10.99.0.0/16 dst 10.10.0.0/24', dir: 'fwd' },
      { selector: 'src 10.10.0.0/24 dst 10.99.0.0/16', dir: 'out' },
    ]);
  });
});
