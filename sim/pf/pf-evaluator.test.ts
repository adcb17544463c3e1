import { describe, expect, it } from 'vitest';
import { parseAddress } from '../../src/core/index.js';
import {
  expandPfConf,
  listChildAnchors,
  type PfAnchorLoad,
  type PfInterfaces,
} from '../../src/backends/pf/expand-pf-rules.js';
import { parsePfConf } from '../../src/backends/pf/parse-pf-conf.js';
import {
  createPfStateTable,
  evaluateForwardedPfPacket,
  evaluatePfPacket,
  findPfRule,
  type PfKernelView,
  type PfPacket,
} from './pf-evaluator.js';

const INTERFACES: PfInterfaces = new Map([
  ['en0', [{ family: 4, value: addr('203.0.113.10'), length: 24 }]],
  ['bridge100', [{ family: 4, value: addr('192.168.64.1'), length: 22 }]],
  ['utun3', [{ family: 4, value: addr('10.8.0.2'), length: 32 }]],
  ['lo0', [{ family: 4, value: addr('127.0.0.1'), length: 8 }]],
]);

function addr(text: string): number {
  const parsed = parseAddress(text);
  if (parsed?.family !== 4) throw new Error(text);
  return parsed.value;
}

/** A kernel view from anchor texts ('' = main ruleset). */
function viewOf(
  anchors: Record<string, string>,
  options: { skip?: string[]; statePolicy?: 'floating' | 'if-bound' } = {},
): PfKernelView {
  const loads = new Map<string, PfAnchorLoad>();
  for (const [path, text] of Object.entries(anchors)) {
    const parsed = parsePfConf(text, { file: path || 'main' });
    expect(parsed.problems).toEqual([]);
    const expanded = expandPfConf(parsed.conf, {
      file: path,
      anchorPath: path,
      interfaces: INTERFACES,
    });
    expect(expanded.problems).toEqual([]);
    loads.set(path, expanded.load);
  }
  return {
    anchors: loads,
    interfaces: INTERFACES,
    skip: options.skip ?? [],
    statePolicy: options.statePolicy ?? 'floating',
  };
}

function packet(
  overrides: Omit<Partial<PfPacket>, 'source' | 'destination'> & {
    source: string;
    destination: string;
  },
): PfPacket {
  return {
    direction: 'in',
    interface: 'bridge100',
    family: 4,
    protocol: 6,
    sourcePort: 40000,
    destinationPort: 443,
    ...overrides,
    source: addr(overrides.source),
    destination: addr(overrides.destination),
  };
}

const VM = '192.168.64.5';
const STOCK_MAIN = 'nat-anchor "com.apple/*"\nrdr-anchor "com.apple/*"\nanchor "com.apple/*"\n';

describe('pf evaluator: filtering (pf.conf.5:1250, :1433-1437)', () => {
  it('the last matching rule wins without quick; quick decides at once; default is pass', () => {
    const view = viewOf({
      '': 'block in all label "b1"\npass in from 192.168.64.0/22 label "p2"\nblock in to 198.51.100.0/24 label "b3"\n',
    });
    const decide = (destination: string): string | null =>
      evaluatePfPacket(view, createPfStateTable(), packet({ source: VM, destination })).label;
    expect(decide('192.0.2.1')).toBe('p2');
    expect(decide('198.51.100.1')).toBe('b3');
    const quick = viewOf({
      '': 'pass in quick from 192.168.64.0/22 label "q"\nblock in all label "b"\n',
    });
    const result = evaluatePfPacket(
      quick,
      createPfStateTable(),
      packet({ source: VM, destination: '198.51.100.1' }),
    );
    expect([result.verdict, result.label]).toEqual(['pass', 'q']);
    const empty = evaluatePfPacket(
      viewOf({ '': '' }),
      createPfStateTable(),
      packet({ source: VM, destination: '192.0.2.1' }),
    );
    expect([empty.verdict, empty.decidedBy]).toEqual(['pass', 'default']);
  });

  it('a quick match inside an anchor ends evaluation of everything after it', () => {
    const view = viewOf({
      '': `${STOCK_MAIN}block in all label "main-after"\n`,
      'com.apple/250.egressguard': 'pass in quick on bridge100 from 192.168.64.0/22 label "ours"\n',
    });
    const result = evaluatePfPacket(
      view,
      createPfStateTable(),
      packet({ source: VM, destination: '192.0.2.1' }),
    );
    expect(result.label).toBe('ours');
    expect(result.rule).toEqual({
      anchor: 'com.apple/250.egressguard',
      ruleset: 'filter',
      index: 0,
    });
    // A non-quick match inside an anchor is just the last match so far.
    const soft = viewOf({
      '': `${STOCK_MAIN}block in all label "main-after"\n`,
      'com.apple/250.egressguard': 'pass in on bridge100 from 192.168.64.0/22 label "ours"\n',
    });
    expect(
      evaluatePfPacket(soft, createPfStateTable(), packet({ source: VM, destination: '192.0.2.1' }))
        .label,
    ).toBe('main-after');
  });

  it('anchor "x/*" evaluates the children of x in name order, not x itself', () => {
    const anchors = {
      '': STOCK_MAIN,
      'com.apple': 'block in quick all label "com.apple itself"\n',
      'com.apple/250.egressguard': 'block in quick on bridge100 all label "ours"\n',
      'com.apple/200.AirDrop': '',
      'com.apple/0.first': 'pass in quick on bridge100 all label "first"\n',
    };
    expect(listChildAnchors(Object.keys(anchors), 'com.apple')).toEqual([
      'com.apple/0.first',
      'com.apple/200.AirDrop',
      'com.apple/250.egressguard',
    ]);
    const result = evaluatePfPacket(
      viewOf(anchors),
      createPfStateTable(),
      packet({ source: VM, destination: '192.0.2.1' }),
    );
    expect(result.label).toBe('first');
    expect(result.evaluated.map((r) => r.anchor)).not.toContain('com.apple/250.egressguard');
    const withoutFirst = Object.fromEntries(
      Object.entries(anchors).filter(([path]) => path !== 'com.apple/0.first'),
    );
    expect(
      evaluatePfPacket(
        viewOf(withoutFirst),
        createPfStateTable(),
        packet({ source: VM, destination: '192.0.2.1' }),
      ).label,
    ).toBe('ours');
  });

  it('tables: longest prefix wins, a negated entry excludes, an anchor falls back to the main table', () => {
    const view = viewOf({
      '': `table <shared> { 10.0.0.0/8 }\n${STOCK_MAIN}`,
      'com.apple/250.egressguard': [
        'table <allowed> { 198.51.100.0/24 !198.51.100.128/25 198.51.100.200 }',
        'block in quick on bridge100 to <shared> label "shared"',
        'pass in quick on bridge100 to <allowed> label "allowed"',
        'block in quick on bridge100 all label "default-deny"',
      ].join('\n'),
    });
    const decide = (destination: string): string | null =>
      evaluatePfPacket(view, createPfStateTable(), packet({ source: VM, destination })).label;
    expect(decide('198.51.100.1')).toBe('allowed');
    expect(decide('198.51.100.130')).toBe('default-deny');
    expect(decide('198.51.100.200')).toBe('allowed');
    expect(decide('10.1.2.3')).toBe('shared');
  });

  it('a negated item in a list matches everything, as pfctl expands lists', () => {
    const view = viewOf({
      '': 'block in quick to { ! 198.51.100.7, 198.51.100.0/24 } label "list"\n',
    });
    const decide = (destination: string): string =>
      evaluatePfPacket(view, createPfStateTable(), packet({ source: VM, destination })).verdict;
    expect(decide('198.51.100.7')).toBe('block');
    expect(decide('192.0.2.1')).toBe('block');
  });

  it('matches ports, ICMP types, TCP flags, self, dynamic interfaces, and skips set-skip interfaces', () => {
    const view = viewOf(
      {
        '': [
          'block in all',
          'pass in proto tcp to port 8000:8080 label "range"',
          'pass in proto tcp to port 1 >< 3 label "exclusive"',
          'pass in inet proto icmp all icmp-type echoreq label "ping"',
          'pass in proto tcp to self port 22 label "self"',
          'pass in proto tcp to (en0) port 25 label "dynamic"',
        ].join('\n'),
      },
      { skip: ['lo0'] },
    );
    const label = (p: PfPacket): string | null =>
      evaluatePfPacket(view, createPfStateTable(), p).label;
    expect(label(packet({ source: VM, destination: '192.0.2.1', destinationPort: 8080 }))).toBe(
      'range',
    );
    expect(
      label(packet({ source: VM, destination: '192.0.2.1', destinationPort: 8081 })),
    ).toBeNull();
    expect(label(packet({ source: VM, destination: '192.0.2.1', destinationPort: 2 }))).toBe(
      'exclusive',
    );
    expect(label(packet({ source: VM, destination: '192.0.2.1', destinationPort: 3 }))).toBeNull();
    expect(label(packet({ source: VM, destination: '192.0.2.1', protocol: 1, icmpType: 8 }))).toBe(
      'ping',
    );
    expect(
      label(packet({ source: VM, destination: '192.0.2.1', protocol: 1, icmpType: 0 })),
    ).toBeNull();
    expect(label(packet({ source: VM, destination: '192.168.64.1', destinationPort: 22 }))).toBe(
      'self',
    );
    expect(label(packet({ source: VM, destination: '203.0.113.10', destinationPort: 25 }))).toBe(
      'dynamic',
    );
    // flags S/SA (the default on pass rules) does not match a packet without SYN.
    expect(
      label(packet({ source: VM, destination: '192.0.2.1', destinationPort: 8080, tcpFlags: 'A' })),
    ).toBeNull();
    const skipped = evaluatePfPacket(
      view,
      createPfStateTable(),
      packet({ interface: 'lo0', source: '127.0.0.1', destination: '127.0.0.1' }),
    );
    expect([skipped.verdict, skipped.decidedBy]).toEqual(['pass', 'skip']);
  });
});

describe('pf evaluator: translation (pf.conf.5:1180-1200, TRANSLATION)', () => {
  const natView = viewOf({
    '': STOCK_MAIN,
    'com.apple/250.egressguard': [
      'table <vm_sources> { 192.168.64.0/22 }',
      'table <blocked> { 198.51.100.0/24 }',
      'no nat on en0 inet from <vm_sources> to 192.0.2.99',
      'nat on en0 inet from <vm_sources> to any -> (en0)',
      'nat on en0 inet from any to any -> 203.0.113.99',
      'rdr on en0 inet proto tcp from any to 203.0.113.10 port 8443 -> 192.168.64.5 port 443',
      'block out quick on en0 inet from <vm_sources> to <blocked> label "out-from-vm"',
      'block out quick on en0 inet from 203.0.113.10 to <blocked> label "out-from-host"',
    ].join('\n'),
  });
  const forward = (destination: string, states = createPfStateTable()) =>
    evaluateForwardedPfPacket(natView, states, {
      family: 4,
      source: addr(VM),
      destination: addr(destination),
      protocol: 6,
      sourcePort: 40000,
      destinationPort: 443,
      ingress: 'bridge100',
      egress: 'en0',
    });

  it('translates first, first match wins, and `no nat` stops the search', () => {
    const natted = forward('192.0.2.1');
    expect(natted.leaving?.source).toBe(addr('203.0.113.10'));
    const rule = natted.outbound?.translation?.rule;
    expect(rule === null || rule === undefined ? '' : findPfRule(natView, rule)?.kind).toBe('nat');
    expect(rule?.index).toBe(1);
    expect(forward('192.0.2.99').leaving?.source).toBe(addr(VM));
    // Only on the named interface: nothing is translated on the way in on the bridge.
    expect(natted.inbound.translation).toBeNull();
  });

  it('filters the outbound packet after NAT: a block on the VM source never matches on the uplink', () => {
    const result = forward('198.51.100.7');
    expect(result.verdict).toBe('block');
    expect(result.outbound?.label).toBe('out-from-host');
    const refs = result.outbound?.evaluated ?? [];
    const vmRule = refs.find((r) => {
      const rule = findPfRule(natView, r);
      return rule?.kind === 'filter' && rule.label === 'out-from-vm';
    });
    expect(vmRule).toBeDefined(); // evaluated…
    expect(result.outbound?.rule).not.toEqual(vmRule); // …and never the match
  });

  it('rdr translates the destination on the way in, before filtering', () => {
    const result = evaluatePfPacket(
      natView,
      createPfStateTable(),
      packet({
        interface: 'en0',
        source: '192.0.2.50',
        destination: '203.0.113.10',
        destinationPort: 8443,
      }),
    );
    expect(result.translation?.kind).toBe('rdr');
    expect(result.packet.destination).toBe(addr('192.168.64.5'));
    expect(result.packet.destinationPort).toBe(443);
  });

  it('states: the next packet and the replies match the state before any rule, NAT reversed', () => {
    const states = createPfStateTable();
    const first = forward('192.0.2.1', states);
    // Passed by default, not by a rule: no state on the way in. NAT keeps one on the way out
    // ("a stateful connection is automatically created", pf.conf(5) TRANSLATION).
    expect(first.inbound.stateCreated).toBeNull();
    expect(first.outbound?.stateCreated?.boundTo).toBeNull(); // floating by default
    expect(first.outbound?.stateCreated?.gwy.address).toBe('203.0.113.10');
    const second = forward('192.0.2.1', states);
    expect(second.inbound.decidedBy).toBe('default');
    expect(second.outbound?.decidedBy).toBe('state');
    expect(second.outbound?.evaluated).toEqual([]); // no rule was looked at
    expect(second.leaving?.source).toBe(addr('203.0.113.10'));
    const reply = evaluatePfPacket(
      natView,
      states,
      packet({
        interface: 'en0',
        source: '192.0.2.1',
        destination: '203.0.113.10',
        sourcePort: 443,
        destinationPort: 40000,
      }),
    );
    expect(reply.decidedBy).toBe('state');
    expect(reply.packet.destination).toBe(addr(VM));
    const back = evaluatePfPacket(natView, states, {
      ...reply.packet,
      direction: 'out',
      interface: 'bridge100',
    });
    expect(back.decidedBy).toBe('default');
  });
});

describe('pf evaluator: tags, route-to and bound states (pf.conf.5:511-519, :1831-1841)', () => {
  const tunnelView = viewOf({
    '': STOCK_MAIN,
    'com.apple/250.egressguard': [
      'table <vpn_vms> { 192.168.64.0/24 }',
      'pass in on bridge100 all tag EG_seen',
      'pass in quick on bridge100 route-to (utun3 10.8.0.1) inet from <vpn_vms> to any tagged EG_seen tag EG_vpn keep state (if-bound) label "vpn"',
      'block out quick on ! utun3 inet all tagged EG_vpn label "backstop"',
    ].join('\n'),
  });

  it('route-to sends the packet out the tunnel, tagged; the backstop blocks it anywhere else', () => {
    const result = evaluateForwardedPfPacket(tunnelView, createPfStateTable(), {
      family: 4,
      source: addr('192.168.64.5'),
      destination: addr('192.0.2.1'),
      protocol: 17,
      sourcePort: 5000,
      destinationPort: 53,
      ingress: 'bridge100',
      egress: 'en0',
    });
    expect(result.inbound.label).toBe('vpn'); // `tagged EG_seen` saw the tag of a non-last match
    expect(result.inbound.routeTo).toEqual({ interface: 'utun3', address: '10.8.0.1' });
    expect(result.egress).toBe('utun3');
    expect(result.verdict).toBe('pass');
    const leak = evaluatePfPacket(tunnelView, createPfStateTable(), {
      ...result.inbound.packet,
      direction: 'out',
      interface: 'en0',
    });
    expect([leak.verdict, leak.label]).toEqual(['block', 'backstop']);
  });

  it('the bare form `route-to utun3` sends the packet out the utun to its own destination', () => {
    const view = viewOf({
      '': STOCK_MAIN,
      'com.apple/250.egressguard':
        'pass in quick on bridge100 route-to utun3 inet all tag EG_vpn keep state (if-bound) label "vpn"\n' +
        'block out quick on ! utun3 inet all tagged EG_vpn label "backstop"\n',
    });
    const result = evaluateForwardedPfPacket(view, createPfStateTable(), {
      family: 4,
      source: addr('192.168.64.5'),
      destination: addr('192.0.2.1'),
      protocol: 6,
      sourcePort: 5000,
      destinationPort: 443,
      ingress: 'bridge100',
      egress: 'en0',
    });
    expect(result.inbound.routeTo).toEqual({ interface: 'utun3', address: null });
    expect([result.verdict, result.egress]).toEqual(['pass', 'utun3']);
    expect(result.leaving?.destination).toBe(addr('192.0.2.1'));
  });

  it('route-to an interface that is gone drops the packet: the utun of a disconnected VPN', () => {
    const gone = new Map(tunnelView.interfaces);
    gone.delete('utun3');
    const view = { ...tunnelView, interfaces: gone };
    const packet = {
      family: 4,
      source: addr('192.168.64.5'),
      destination: addr('192.0.2.1'),
      protocol: 6,
      sourcePort: 5000,
      destinationPort: 443,
      ingress: 'bridge100',
      egress: 'en0',
    } as const;
    const result = evaluateForwardedPfPacket(view, createPfStateTable(), packet);
    // The rule passed it (its counters move), pf_route found no interface: nothing leaves.
    expect(result.inbound.verdict).toBe('pass');
    expect(result.inbound.label).toBe('vpn');
    expect([result.verdict, result.routeFailed, result.outbound, result.leaving]).toEqual([
      'block',
      true,
      null,
      null,
    ]);
    // The same rule with the tunnel back sends it through, as before.
    const back = evaluateForwardedPfPacket(tunnelView, createPfStateTable(), packet);
    expect([back.verdict, back.egress, back.routeFailed]).toEqual(['pass', 'utun3', false]);
  });

  it('an if-bound state matches only on its interface; a floating one on any', () => {
    const states = createPfStateTable();
    const first = evaluatePfPacket(
      tunnelView,
      states,
      packet({ source: '192.168.64.5', destination: '192.0.2.1' }),
    );
    expect(first.stateCreated?.boundTo).toBe('bridge100');
    const elsewhere = evaluatePfPacket(
      tunnelView,
      states,
      packet({ interface: 'en0', source: '192.168.64.5', destination: '192.0.2.1' }),
    );
    expect(elsewhere.decidedBy).not.toBe('state');
    const again = evaluatePfPacket(
      tunnelView,
      states,
      packet({ source: '192.168.64.5', destination: '192.0.2.1' }),
    );
    expect(again.decidedBy).toBe('state');
    expect(again.routeTo).toEqual({ interface: 'utun3', address: '10.8.0.1' });

    const floating = viewOf(
      { '': 'pass in all keep state (floating)\n' },
      { statePolicy: 'if-bound' },
    );
    const table = createPfStateTable();
    evaluatePfPacket(floating, table, packet({ source: VM, destination: '192.0.2.1' }));
    expect(
      evaluatePfPacket(
        floating,
        table,
        packet({ interface: 'en0', source: VM, destination: '192.0.2.1' }),
      ).decidedBy,
    ).toBe('state');
    const policy = viewOf({ '': 'pass in all\n' }, { statePolicy: 'if-bound' });
    expect(
      evaluatePfPacket(
        policy,
        createPfStateTable(),
        packet({ source: VM, destination: '192.0.2.1' }),
      ).stateCreated?.boundTo,
    ).toBe('bridge100');
  });

  it('keeps IPv6 states too: the reply matches the state created on the way in', () => {
    const view = viewOf({
      '': 'block in all\npass in quick on bridge100 inet6 from 2001:db8:64::/64\n',
    });
    const states = createPfStateTable();
    const v6 = (text: string): bigint => {
      const parsed = parseAddress(text);
      if (parsed?.family !== 6) throw new Error(text);
      return parsed.value;
    };
    const out = evaluatePfPacket(view, states, {
      direction: 'in',
      interface: 'bridge100',
      family: 6,
      source: v6('2001:db8:64::5'),
      destination: v6('2001:db8:1::1'),
      protocol: 17,
      sourcePort: 5353,
      destinationPort: 53,
    });
    expect(out.stateCreated?.ext.address).toBe('2001:db8:64::5');
    const reply = evaluatePfPacket(view, states, {
      direction: 'out',
      interface: 'bridge100',
      family: 6,
      source: v6('2001:db8:1::1'),
      destination: v6('2001:db8:64::5'),
      protocol: 17,
      sourcePort: 53,
      destinationPort: 5353,
    });
    expect(reply.decidedBy).toBe('state');
    expect(reply.packet.destination).toBe(v6('2001:db8:64::5'));
  });

  it('no state and block rules create no state; block return is reported', () => {
    const view = viewOf({ '': 'pass in all no state\nblock return in to 198.51.100.0/24\n' });
    const states = createPfStateTable();
    expect(
      evaluatePfPacket(view, states, packet({ source: VM, destination: '192.0.2.1' })).stateCreated,
    ).toBeNull();
    const blocked = evaluatePfPacket(
      view,
      states,
      packet({ source: VM, destination: '198.51.100.1' }),
    );
    expect([blocked.verdict, blocked.returned]).toEqual(['block', true]);
    expect(states.states).toHaveLength(0);
  });
});
