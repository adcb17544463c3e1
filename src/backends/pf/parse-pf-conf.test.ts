import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { expandPfConf, type PfInterfaces } from './expand-pf-rules.js';
import { formatPfRule } from './format-pf-rule.js';
import { formatPfConfProblems, parsePfConf } from './parse-pf-conf.js';
import { PF_RULESET_NAMES, type PfKernelRule } from './pf-rules.js';

const FIXTURES = new URL('./fixtures/', import.meta.url);
// A host with only a loopback: `self` stands for its addresses (F93 ifa_lookup).
const LOOPBACK_ONLY: PfInterfaces = new Map([
  [
    'lo0',
    [
      { family: 4, value: 0x7f000001, length: 8 },
      { family: 6, value: 1n, length: 128 },
    ],
  ],
]);

function problemsOf(text: string): string {
  return formatPfConfProblems(parsePfConf(text, { file: 'pf.conf' }).problems);
}

function kernelRules(text: string, anchorPath = '', interfaces = LOOPBACK_ONLY): PfKernelRule[] {
  const parsed = parsePfConf(text, { file: 'pf.conf' });
  expect(parsed.problems).toEqual([]);
  const expanded = expandPfConf(parsed.conf, { file: 'pf.conf', anchorPath, interfaces });
  expect(expanded.problems).toEqual([]);
  return PF_RULESET_NAMES.flatMap((name) => [...expanded.load.rulesets[name]]);
}

describe('parsePfConf: the stock macOS files', () => {
  for (const file of [
    'macos-stock/pf.conf',
    'macos-stock/pf.anchors/com.apple',
    'macos-stock-legacy/pf.conf',
    'macos-stock-legacy/pf.anchors/com.apple',
  ]) {
    it(`parses ${file} without a problem`, () => {
      const text = readFileSync(new URL(file, FIXTURES), 'utf8');
      const parsed = parsePfConf(text, { file });
      expect(parsed.problems).toEqual([]);
      expect(parsed.conf.rules.length).toBeGreaterThan(1);
    });
  }

  it('reads the current stock pf.conf as pfctl -sr / -sn print it', () => {
    const text = readFileSync(new URL('macos-stock/pf.conf', FIXTURES), 'utf8');
    const parsed = parsePfConf(text, { file: 'pf.conf' });
    expect(parsed.conf.loadAnchors).toEqual([
      { line: 27, anchor: 'com.apple', file: '/etc/pf.anchors/com.apple' },
    ]);
    expect(kernelRules(text).map(formatPfRule)).toEqual([
      'scrub-anchor "com.apple/*" all fragment reassemble',
      'anchor "com.apple/*" all',
      'nat-anchor "com.apple/*" all',
      'rdr-anchor "com.apple/*" all',
      'dummynet-anchor "com.apple/*" all',
    ]);
    const comApple = readFileSync(new URL('macos-stock/pf.anchors/com.apple', FIXTURES), 'utf8');
    const anchors = kernelRules(comApple, 'com.apple');
    expect(anchors.map((r) => (r.kind === 'anchor' ? r.path : ''))).toEqual([
      'com.apple/200.AirDrop',
      'com.apple/250.ApplicationFirewall',
    ]);
  });
});

describe('parsePfConf: what macOS rejects, as pfctl reports it', () => {
  it.each([
    ['match out on en0 nat-to (en0)', 'pf.conf:1: syntax error\n'],
    ['pass out on en0 from any to any nat-to (en0)', 'pf.conf:1: syntax error\n'],
    ['pass in on en0 proto tcp to port 80 rdr-to 10.0.0.1', 'pf.conf:1: syntax error\n'],
    ['pass in on en0 inet6 from any to any af-to inet from 192.0.2.1', 'pf.conf:1: syntax error\n'],
    ['pass out received-on bridge100', 'pf.conf:1: syntax error\n'],
    ['nat on en0 from any to any -> (en0) label "eg:r1"', 'pf.conf:1: syntax error\n'],
    [
      'rdr on en0 proto tcp from any to any port 80 -> 10.0.0.1 label "x"',
      'pf.conf:1: syntax error\n',
    ],
    // route-to comes before the hosts in this grammar (NOTES §1)
    ['pass in on bridge100 from any to any route-to (utun3 10.0.0.1)', 'pf.conf:1: syntax error\n'],
    ['pass in all label', 'pf.conf:1: syntax error\n'],
    ['nat on en0 from any to any', "pf.conf:1: translation rule requires '-> address'\n"],
    [
      'no nat on en0 from any to any -> (en0)',
      "pf.conf:1: translation rule with 'no' does not need '->'\n",
    ],
    ['pass out proto tcp from $vms', "pf.conf:1: macro 'vms' not defined\n"],
    [
      'anchor "_reserved"',
      "pf.conf:1: anchor names beginning with '_' are reserved for internal use\n",
    ],
    [
      'anchor "x" {\npass\n}',
      // `pass` alone is a valid rule; the closing brace is not
      'pf.conf:1: not modelled: inline anchors (anchor … { rules })\npf.conf:3: syntax error\n',
    ],
    ['pass out proto tcp from any port 10.1 to any', 'pf.conf:1: unknown port 10.1\n'],
    ['pass out proto bogus', 'pf.conf:1: unknown protocol bogus\n'],
    // F93 parse.y table_opts: host_list entries are checked by type.
    [
      'table <t> { 10.0.0.1 - 10.0.0.9 }',
      'pf.conf:1: address ranges are not permitted inside tables\n',
    ],
    ['table <t> { (en0) }', 'pf.conf:1: dynamic addresses are not permitted inside tables\n'],
  ])('%s', (text, expected) => {
    expect(problemsOf(text)).toBe(expected);
  });

  it('refuses `route-to (ifname)` without an address, in every routing keyword', () => {
    // parse.y route_host: STRING | '(' STRING host ')' (1.291 on, F93 parse.y:4205-4218).
    for (const keyword of ['route-to', 'reply-to', 'dup-to']) {
      expect(problemsOf(`pass in on bridge100 ${keyword} (utun3) inet all\n`)).toBe(
        'pf.conf:1: syntax error\n',
      );
    }
    expect(problemsOf('pass in on bridge100 route-to { (utun3), (utun4) } inet all\n')).toBe(
      'pf.conf:1: syntax error\n',
    );
    // The two forms the grammar has.
    expect(problemsOf('pass in on bridge100 route-to utun3 inet all\n')).toBe('');
    expect(problemsOf('pass in on bridge100 route-to (utun3 10.8.0.1) inet all\n')).toBe('');
  });

  it('refuses a route-to interface the host lacks, when it knows the host (ifa_exists)', () => {
    const interfaces = new Set(['lo0', 'en0', 'bridge100']);
    const problems = (text: string): string =>
      formatPfConfProblems(parsePfConf(text, { file: 'stdin', interfaces }).problems);
    expect(problems('pass in on bridge100 route-to utun3 inet all\npass out all\n')).toBe(
      'stdin:1: routeto: unknown interface utun3\n',
    );
    expect(problems('pass in on bridge100 route-to (utun3 10.8.0.1) inet all\n')).toBe(
      'stdin:1: routeto: unknown interface utun3\n',
    );
    expect(problems('pass in on bridge100 route-to en0 inet all\n')).toBe('');
    // `on` takes any name (parse.y if_item), and so does a dynamic address (dynaddr).
    expect(problems('nat on utun3 from any to any -> (utun3)\npass in on utun3 all\n')).toBe('');
    // Text of no host in particular (read back from pfctl) is not checked.
    expect(problemsOf('pass in on bridge100 route-to utun3 inet all\n')).toBe('');
  });

  it("enforces pf's rule order, and set require-order no lifts it", () => {
    const text = 'pass out all\nnat on en0 from any to any -> (en0)\nscrub in all\npass in all\n';
    expect(problemsOf(text)).toBe(
      'pf.conf:2: Rules must be in order: options, normalization, queueing, translation, filtering\n' +
        'pf.conf:3: Rules must be in order: options, normalization, queueing, translation, filtering\n',
    );
    expect(problemsOf(`set require-order no\n${text}`)).toBe('');
    // Tables, macros and load anchor may go anywhere (no check_rulestate on them).
    expect(
      problemsOf('pass out all\ntable <t> { 10.0.0.0/8 }\nx = "1"\nload anchor "a" from "/f"\n'),
    ).toBe('');
  });

  it('reports every error line, with its number, and goes on after each', () => {
    expect(
      problemsOf('pass out all\nbogus here\n\npass out all\nmatch in all\npass out all\n'),
    ).toBe('pf.conf:2: syntax error\npf.conf:5: syntax error\n');
  });
});

describe('parsePfConf: the grammar egressguard and the stock files use', () => {
  it('parses tables with flags, negated entries and both families, across lines', () => {
    const parsed = parsePfConf(
      'table <vm_sources> persist const { 192.168.64.0/22, !192.168.64.1 \\\n 2001:db8::/32 }\n',
      { file: 'f' },
    );
    expect(parsed.problems).toEqual([]);
    const table = parsed.conf.tables[0];
    expect(table).toMatchObject({ name: 'vm_sources', persist: true, constant: true, line: 1 });
    expect(
      table?.entries.map((e) =>
        e.address.kind === 'prefix'
          ? [e.negated, e.address.prefix.family, e.address.prefix.length]
          : e.address.kind,
      ),
    ).toEqual([
      [false, 4, 22],
      [true, 4, 32],
      [false, 6, 32],
    ]);
  });

  it('expands macros (lists included) and prints every kernel rule back to parseable text', () => {
    const text = [
      'ext_if = "en0"',
      'vm_net = "{ 192.168.64.0/22 2001:db8:64::/64 }"',
      'table <blocked> { 198.51.100.0/24 }',
      'nat on $ext_if inet from 192.168.64.0/22 to any -> ($ext_if)',
      'nat on $ext_if inet from 10.0.0.0/8 to any -> 203.0.113.5 static-port',
      'no nat on bridge100 inet from 192.168.64.1 to 192.168.64.0/22',
      'rdr pass on lo0 inet proto tcp from any to any port 80 -> 127.0.0.1 port 8080',
      'anchor "egressguard/*" in on bridge100',
      'pass in quick on bridge100 route-to (utun3 10.8.0.1) inet proto { tcp udp } from $vm_net to ! <blocked> port { 443, 8000:8080, 1 >< 1024 } tag EG keep state (if-bound) label "eg:r1"',
      'block out quick on ! utun3 tagged EG',
      'block return in log quick on bridge100 inet6 all',
      'pass out inet proto icmp all icmp-type echoreq code 0 no state',
      'pass in inet6 proto ipv6-icmp from any to self icmp6-type neighbrsol',
      'pass out proto tcp from any port { = 22, != 23, < 24, <= 25, > 26, >= 27, 28 <> 30, 31:33 } to any flags S/SA modulate state',
      'block drop in on { en0 en1 } from any to any',
    ].join('\n');
    const rules = kernelRules(text);
    // 1 nat+1 nat+1 no nat+1 rdr+1 anchor + 2 protos x 1 v4 net (v6 net dropped: rule is inet)
    // x 3 ports + 1 + 1 + 1 + 1 + 8 ports + 2 interfaces
    expect(rules).toHaveLength(5 + 6 + 4 + 8 + 2);
    for (const rule of rules) {
      const printed = formatPfRule(rule);
      const again = kernelRules(printed);
      expect(again.map(formatPfRule), printed).toEqual([printed]);
    }
    expect(rules.map(formatPfRule)).toContain(
      'pass in quick on bridge100 route-to (utun3 10.8.0.1) inet proto udp from 192.168.64.0/22 to ! <blocked> port 1 >< 1024 keep state (if-bound) label "eg:r1" tag EG',
    );
    expect(rules.map(formatPfRule)).toContain('block drop out quick on ! utun3 all tagged EG');
  });

  it('expands a list with a negated item into one rule per item, so it matches everything', () => {
    const rules = kernelRules('block in from { ! 10.0.0.1, 10.0.0.0/8 }\n');
    expect(rules.map(formatPfRule)).toEqual([
      'block drop in inet from ! 10.0.0.1 to any',
      'block drop in inet from 10.0.0.0/8 to any',
    ]);
  });

  it('resolves interface names at load time, keeps (if) dynamic, and reports unknown names', () => {
    const interfaces: PfInterfaces = new Map([
      ['en0', [{ family: 4, value: 0xcb00710a, length: 24 }]],
    ]);
    expect(
      kernelRules('pass in from en0 to (en0)\npass in from en0:network\n', '', interfaces).map(
        formatPfRule,
      ),
    ).toEqual([
      'pass in inet from 203.0.113.10 to (en0) flags S/SA keep state',
      'pass in inet from 203.0.113.0/24 to any flags S/SA keep state',
    ]);
    // pfctl would ask DNS (F93 pfctl_parser.c host_dns): the model says so rather than guess.
    const parsed = parsePfConf('pass in from vpn.example.org\n', { file: 'f' });
    expect(formatPfConfProblems(parsed.problems)).toBe(
      'f:1: not modelled: host name resolution ("vpn.example.org": pfctl would ask DNS)\n',
    );
    const mixed = parsePfConf('pass in inet6 from 10.0.0.1\npass in proto icmp to port 80\n', {
      file: 'f',
    });
    expect(
      formatPfConfProblems(
        expandPfConf(mixed.conf, { file: 'f', anchorPath: '', interfaces }).problems,
      ),
    ).toBe(
      // F93 expand_rule: rule_consistent's message, then "skipping rule due to errors".
      'f:1: rule expands to no valid combination\nf:2: port only applies to tcp/udp\nf:2: skipping rule due to errors\n',
    );
  });
});
