import { readdirSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { formatIssue } from './issue.js';
import { loadPolicy, parsePolicy } from './parse-policy.js';

const VALID = fileURLToPath(new URL('../../testdata/policies/valid', import.meta.url));

const HEAD = `apiVersion: egressguard/v1
metadata: { name: test }
`;

/** Issues of a policy as `LINE:COL severity code`, and their messages. */
function check(text: string) {
  const result = parsePolicy(text, 'policy.yaml');
  return {
    result,
    at: result.issues.map((i) => `${i.line}:${i.column} ${i.severity} ${i.code}`),
    codes: result.issues.map((i) => i.code),
    messages: result.issues.map((i) => i.message),
  };
}

/** A policy with one class `vm` made of these lines (indented under it). */
function withClass(lines: string, extra = ''): string {
  return `${HEAD}${extra}classes:
  vm:
${lines
  .trim()
  .split('\n')
  .map((l) => `    ${l.trim()}`)
  .join('\n')}
`;
}

describe('valid examples', () => {
  it.each(readdirSync(VALID))('%s has no issues', (name) => {
    const result = loadPolicy(join(VALID, name, 'policy.yaml'));
    expect(result.issues.map(formatIssue)).toEqual([]);
    expect(result.policy).toBeDefined();
  });
});

describe('every problem at once', () => {
  it('checks the meaning of the sound parts when the schema fails', () => {
    const { at, result } = check(
      withClass(`
        ingress: [br0]
        sources: [192.168.64.0/22]
        killswitch: {}
        rules:
          - { id: a, action: permit, to: any }
          - { id: b, action: allow, to: lan, proto: tcp, ports: [70000] }
          - { id: c, action: allow, to: lna }
        default: allow`),
    );
    expect(at).toEqual([
      '7:5 error unknown-field',
      '9:24 error invalid-value',
      '10:35 error unknown-network',
      '10:60 error port-range',
      '11:35 error unknown-network',
    ]);
    // The indices stay those of the document even though rule "a" was set aside.
    expect(result.issues[3]?.path).toBe('classes.vm.rules[1].ports[0]');
    expect(result.policy).toBeUndefined();
  });

  it('does not report references to a network that failed the schema', () => {
    const { codes } = check(
      withClass(
        `
        ingress: [br0]
        sources: [192.168.64.0/22]
        rules: [{ id: a, action: deny, to: lan }]
        default: allow`,
        'networks:\n  lan: { cidr: [10.0.0.0/8] }\n',
      ),
    );
    expect(codes).toEqual(['unknown-field']);
  });

  it('keeps tunnels declared when the interfaces section fails the schema', () => {
    const { codes } = check(
      withClass(
        `
        ingress: [br0]
        sources: [192.168.64.0/22]
        via: tun0
        killSwitch: {}
        default: allow`,
        'interfaces:\n  tunnels:\n    tun0: { descripton: typo }\n',
      ),
    );
    expect(codes).toEqual(['unknown-field']);
  });

  it('goes on after a duplicate key, naming it and its mapping', () => {
    const { at, messages } = check(
      withClass(`
        ingress: [br0]
        sources: [192.168.64.0/22]
        default: allow
        default: deny
        rules: [{ id: a, action: allow, to: any, ports: [53] }]`),
    );
    expect(at).toEqual(['8:5 error duplicate-key', '9:53 error ports-without-protocol']);
    expect(messages[0]).toBe(
      'Duplicate key "default" in "classes.vm": a key may appear once in a mapping; merge the two entries or rename one',
    );
  });

  it('reports an alias to no anchor instead of crashing', () => {
    const { at, messages } = check(
      `${HEAD}networks:\n  lan: &lan [10.0.0.0/8]\nclasses:\n  vm: { ingress: [br0], sources: *lna, default: allow }\n`,
    );
    expect(at).toEqual(['6:34 error yaml-syntax']);
    expect(messages[0]).toBe(
      'Cannot parse YAML: alias "*lna" refers to no anchor before it (did you mean "lan"?): define "&lna" earlier, or fix the name',
    );
  });

  it('refuses a document whose aliases expand exponentially', () => {
    let networks = '  n0: &n0 [10.0.0.0/8, 10.0.0.0/8, 10.0.0.0/8, 10.0.0.0/8]\n';
    for (let i = 1; i < 8; i++) {
      const p = `*n${i - 1}`;
      networks += `  n${i}: &n${i} [${p}, ${p}, ${p}, ${p}, ${p}, ${p}, ${p}, ${p}]\n`;
    }
    const { at, messages } = check(`${HEAD}networks:\n${networks}classes: {}\n`);
    expect(at).toEqual(['1:1 error yaml-syntax']);
    expect(messages[0]).toContain('its aliases expand too often');
  });

  it('reports only the first YAML syntax error, not its echoes', () => {
    const { at } = check(
      `${HEAD}classes:\n  vm:\n    ingress: [br0]\n\tsources: []\n    default: allow\n`,
    );
    expect(at).toEqual(['6:1 error yaml-syntax']);
  });
});

describe('schema problems', () => {
  it('reports the missing fields of an empty file', () => {
    const { at, messages } = check('');
    expect(at).toEqual([
      '1:1 error missing-field',
      '1:1 error missing-field',
      '1:1 error missing-field',
    ]);
    expect(messages[0]).toBe(
      'Missing required field "apiVersion" in the policy: add "apiVersion: egressguard/v1"',
    );
  });

  it('points a missing field at the key of its mapping and says what it is', () => {
    const { at, messages } = check(withClass('ingress: [br0]\nsources: [10.0.0.0/24]'));
    expect(at).toEqual(['4:3 error missing-field']);
    expect(messages[0]).toBe(
      'Missing required field "default" in "classes.vm": add it (the verdict when no rule matches)',
    );
  });

  it('lists the known fields when no field is close to an unknown one', () => {
    const { messages } = check(`${HEAD}classes: {}\nfirewall: nft\n`);
    expect(messages[0]).toBe(
      'Unknown field "firewall" in the policy: remove it, or use one of "apiVersion", "kind", "metadata", "networks", "interfaces", "classes", "requirements"',
    );
  });

  it('reports a wrong apiVersion with the one to use', () => {
    const { at, messages } = check('apiVersion: v1\nmetadata: { name: x }\nclasses: {}\n');
    expect(at).toEqual(['1:13 error api-version']);
    expect(messages[0]).toBe(
      'Unsupported apiVersion "v1": use "egressguard/v1", the only version this egressguard reads',
    );
  });

  it('reports a union against the branch of the value type', () => {
    const { messages } = check(
      withClass(
        `
        ingress: [br0]
        sources: [10.0.0.0/24]
        mssClamp: 400
        rules: [{ id: a, action: deny, to: [] }, { id: b, action: deny, to: any, proto: [tcp, 3.5] }]
        default: allow`,
        'networks:\n  lan: 10.0.0.0/8\n',
      ),
    );
    expect(messages).toEqual([
      'Expected a list or a mapping at "networks.lan", found "10.0.0.0/8": write a list, like [10.0.0.0/8]',
      'Value 400 at "classes.vm.mssClamp" is too small: use at least 536',
      'Field "classes.vm.rules[0].to" is empty: list at least 1 entry',
      'Unknown protocol 3.5 at "classes.vm.rules[1].proto[1]": use tcp, udp, icmp, gre, esp, ah, sctp or a number from 0 to 255',
    ]);
  });
});

describe('rules', () => {
  it('reads ports as numbers, quoted numbers and ranges', () => {
    const { result, codes } = check(
      withClass(`
        ingress: [br0]
        sources: [10.0.0.0/24]
        rules: [{ id: a, action: allow, to: any, proto: tcp, ports: [22, '443', '8000-8080'] }]
        default: deny`),
    );
    expect(codes).toEqual([]);
    expect(result.policy?.classes[0]?.rules[0]?.ports).toEqual([
      { from: 22, to: 22 },
      { from: 443, to: 443 },
      { from: 8000, to: 8080 },
    ]);
  });

  // Accepted without a word once; a stray space is as often a typo as a style (issue 8, §5).
  it('refuses ports with spaces in them, saying how to write them', () => {
    const { messages, codes } = check(
      withClass(`
        ingress: [br0]
        sources: [10.0.0.0/24]
        rules: [{ id: a, action: allow, to: any, proto: tcp, ports: [' 443 ', '1000 - 2000'] }]
        default: deny`),
    );
    expect(codes).toEqual(['port-range', 'port-range']);
    expect(messages).toEqual([
      'Port " 443 " has spaces in it: write "443"',
      'Port "1000 - 2000" has spaces in it: write "1000-2000"',
    ]);
  });

  it('refuses ports that are not whole numbers from 1 to 65535, low to high', () => {
    const { messages, codes } = check(
      withClass(`
        ingress: [br0]
        sources: [10.0.0.0/24]
        rules: [{ id: a, action: allow, to: any, proto: tcp, ports: [0, 44.5, https, '90-80'] }]
        default: deny`),
    );
    expect(codes).toEqual(['port-range', 'port-range', 'port-range', 'port-range']);
    expect(messages).toEqual([
      'Port 0 is out of range: ports go from 1 to 65535',
      'Cannot use port 44.5 at "classes.vm.rules[0].ports[1]": write a whole port (443) or an inclusive range ("30000-32767")',
      'Cannot parse port "https": write a port (443) or an inclusive range ("30000-32767")',
      'Port range "90-80" runs backwards: write the low port first ("80-90")',
    ]);
  });

  it('maps protocol numbers 6 and 17 to tcp and udp', () => {
    const { result } = check(
      withClass(`
        ingress: [br0]
        sources: [10.0.0.0/24]
        rules: [{ id: a, action: allow, to: any, proto: [6, 17, 47, gre, icmp], ports: [53] }]
        default: deny`),
    );
    expect(result.issues.map((i) => i.message)).toEqual([
      'Rule "a" lists ports but protocol "47", "icmp" has none (ports exist only for tcp, udp and sctp): move them to a rule without ports',
    ]);
  });
});

describe('rule ids', () => {
  it('refuses ids that cannot name a counter, and the generated form', () => {
    const { codes, messages } = check(
      withClass(`
        ingress: [br0]
        sources: [10.0.0.0/24]
        rules:
          - { id: allow web, action: allow, to: 192.0.2.0/24 }
          - { id: vm/default, action: deny, to: 10.0.0.0/8 }
          - { id: allow-dns.v2_a, action: allow, to: 10.0.0.0/8, proto: icmpv6 }
        default: deny`),
    );
    expect(codes).toEqual(['invalid-value', 'invalid-value', 'invalid-protocol']);
    expect(messages[0]).toContain('Rule id "allow web" is not valid: it names firewall counters');
    expect(messages[2]).toBe(
      'Unknown protocol "icmpv6" at "classes.vm.rules[2].proto": write "icmp", which means ICMP for IPv4 and ICMPv6 for IPv6 destinations',
    );
  });
});

describe('address families', () => {
  const rule = "rules: [{ id: mirror, action: allow, to: ['203.0.113.80', '2001:db8::80'] }]";

  it('warns about IPv6 destinations in a class with no IPv6 source', () => {
    const { at } = check(
      withClass(`ingress: [br0]\nsources: [10.0.0.0/24]\n${rule}\ndefault: deny`),
    );
    expect(at).toEqual(['7:46 warning unreachable-family']);
  });

  it('does not warn when the class lets its IPv6 through with "ipv6: allow"', () => {
    const { codes } = check(
      withClass(`ingress: [br0]\nsources: [10.0.0.0/24]\nipv6: allow\n${rule}\ndefault: deny`),
    );
    expect(codes).toEqual([]);
  });

  it('warns about IPv4 destinations in an IPv6-only class, whole rule', () => {
    const { messages } = check(
      withClass(
        `ingress: [br0]\nsources: ['2001:db8:64::/48']\nrules: [{ id: v4, action: deny, to: 10.0.0.0/8 }]\ndefault: allow`,
      ),
    );
    expect(messages).toEqual([
      'Rule "v4" names IPv4 destinations (10.0.0.0/8), but class "vm" has no IPv4 source, so the rule never matches: add an IPv4 source prefix, or remove them',
    ]);
  });
});

describe('classes and interfaces', () => {
  it('asks for a tunnel when a kill switch has none', () => {
    const { messages } = check(
      withClass('ingress: [br0]\nsources: [10.0.0.0/24]\nkillSwitch: {}\ndefault: allow'),
    );
    expect(messages).toEqual([
      'Class "vm" has a kill switch but no tunnel: declare the tunnel under "interfaces.tunnels" and set "via" to it',
    ]);
  });

  it('refuses "ipv6: allow" on a tunnel class without an IPv6 prefix: nothing would steer it', () => {
    const tunnel = 'interfaces:\n  tunnels:\n    tun0: {}\n';
    const { at, messages, result } = check(
      withClass(
        'ingress: [br0]\nsources: [10.0.0.0/24]\nipv6: allow\nvia: tun0\nkillSwitch: {}\ndefault: allow',
        tunnel,
      ),
    );
    expect(at).toEqual(['10:11 error unsteerable-ipv6']);
    expect(messages).toEqual([
      'Class "vm" leaves by tunnel "tun0" and lets its IPv6 through ("ipv6: allow"), but has no IPv6 source prefix: tunnel steering selects a class\'s packets by source, so its IPv6 would never reach the tunnel; add the class\'s IPv6 prefixes to sources, or leave ipv6 blocked',
    ]);
    expect(result.policy).toBeUndefined();
    // With an IPv6 prefix, or by the uplink, it is fine.
    expect(
      check(
        withClass(
          "ingress: [br0]\nsources: [10.0.0.0/24, '2001:db8::/64']\nipv6: allow\nvia: tun0\nkillSwitch: {}\ndefault: allow",
          tunnel,
        ),
      ).codes,
    ).toEqual([]);
    expect(
      check(withClass('ingress: [br0]\nsources: [10.0.0.0/24]\nipv6: allow\ndefault: allow')).codes,
    ).toEqual([]);
  });

  it('checks the uplink and tunnel names', () => {
    const { at, messages } = check(
      withClass(
        'ingress: [veth*]\nsources: [10.0.0.0/24]\ndefault: allow',
        'interfaces:\n  uplink: eth*\n  tunnels:\n    wg0: {}\n    uplink: {}\n    "tun:0": {}\n',
      ),
    );
    expect(at).toEqual([
      '4:11 error invalid-interface-name',
      '7:5 error invalid-interface-name',
      '8:5 error invalid-interface-name',
    ]);
    expect(messages).toEqual([
      'Uplink "eth*" is not an interface name: "*" may only end an ingress prefix; name one interface (or use "default-route")',
      'Tunnel name "uplink" is reserved: "via: uplink" means the uplink; rename the tunnel',
      'Tunnel "tun:0" is not an interface name: ":" is not allowed; use letters, digits, ".", "_" and "-"',
    ]);
  });

  it('refuses an uplink that is also a tunnel', () => {
    const { codes } = check(
      withClass(
        'ingress: [br0]\nsources: [10.0.0.0/24]\ndefault: allow',
        'interfaces:\n  uplink: wg0\n  tunnels:\n    wg0: {}\n',
      ),
    );
    expect(codes).toEqual(['invalid-value']);
  });

  it('lets classes for hosts with different labels share sources', () => {
    const policy = `${HEAD}classes:
  a:
    ingress: [br0]
    sources: [10.0.0.0/24]
    hosts: { labels: { site: ams } }
    default: allow
  b:
    ingress: [br0]
    sources: [10.0.0.0/24]
    hosts: { labels: { site: fra } }
    default: deny
  c:
    ingress: [br1]
    sources: [10.0.0.128/25]
    hosts: { labels: { role: ci } }
    default: deny
`;
    const { at, messages } = check(policy);
    expect(at).toEqual(['16:14 error source-overlap', '16:14 error source-overlap']);
    expect(messages[0]).toContain(
      'Sources of class "c" overlap those of class "a" in 10.0.0.128/25',
    );
  });
});

describe('ingress interfaces shared by classes', () => {
  /** A policy of forwarded classes, each `name: [ingress…]` with its own sources. */
  function classes(...specs: string[]): string {
    return `${HEAD}classes:\n${specs
      .map(
        (spec, i) =>
          `  ${spec.split(':')[0] ?? ''}:\n    ingress: ${spec.slice(spec.indexOf(':') + 1).trim()}\n    sources: [10.0.${i}.0/24]\n    default: allow\n`,
      )
      .join('')}`;
  }

  it('refuses an interface named by two classes', () => {
    const { at, messages, result } = check(classes('a: [vwl0]', 'b: [vwl0]'));
    expect(at).toEqual(['9:15 error ingress-overlap']);
    expect(messages[0]).toBe(
      'Ingress "vwl0" of class "b" is also an ingress of class "a": packets arriving on "vwl0" go to class "a"\'s chain first, whose anti-spoofing drops class "b"\'s traffic; an interface belongs to one class only: give it to one class',
    );
    expect(result.policy).toBeUndefined();
  });

  it("refuses a prefix that covers another class's interface, in either order", () => {
    const { at, messages } = check(classes('a: [vwl0]', 'b: [br0, vwl*]'));
    expect(at).toEqual(['9:20 error ingress-overlap']);
    expect(messages[0]).toBe(
      'Ingress "vwl*" of class "b" covers ingress "vwl0" of class "a": packets arriving on "vwl0" go to class "a"\'s chain first, whose anti-spoofing drops class "b"\'s traffic; an interface belongs to one class only: narrow the prefix or rename the interfaces',
    );
    expect(check(classes('a: [vwl*]', 'b: [vwl0]')).at).toEqual(['9:15 error ingress-overlap']);
  });

  it('refuses prefixes that cover each other, and not prefixes that do not', () => {
    const { messages } = check(classes('a: [veth*]', 'b: [vethab*]', 'c: [vet]', 'd: [ve*x]'));
    expect(messages.filter((m) => m.includes('overlap') || m.includes('cover'))).toEqual([
      'Ingress "vethab*" of class "b" overlaps ingress "veth*" of class "a": interfaces named "vethab…" match both, and their packets go to class "a"\'s chain first, whose anti-spoofing drops class "b"\'s traffic; an interface belongs to one class only: narrow the prefix or rename the interfaces',
    ]);
  });

  it('lets classes whose host labels conflict share an interface', () => {
    const policy = `${HEAD}classes:
  a:
    ingress: [br0]
    sources: [10.0.0.0/24]
    hosts: { labels: { site: ams } }
    default: allow
  b:
    ingress: [br*]
    sources: [10.0.1.0/24]
    hosts: { labels: { site: fra } }
    default: deny
  c:
    ingress: [br0]
    sources: [10.0.2.0/24]
    hosts: { labels: { role: ci } }
    default: deny
`;
    const { at, messages } = check(policy);
    expect(at).toEqual(['15:15 error ingress-overlap', '15:15 error ingress-overlap']);
    expect(messages[0]).toContain('Ingress "br0" of class "c" is also an ingress of class "a"');
    expect(messages[1]).toContain(
      'Ingress "br0" of class "c" is covered by ingress "br*" of class "b"',
    );
  });
});

describe('probes', () => {
  const probes = (lines: string) =>
    withClass('ingress: [br0]\nsources: [10.0.0.0/24]\ndefault: allow') +
    `requirements:\n  - id: R-NET-01\n    statement: test\n    probes:\n${lines}`;

  it('refuses a probe between families instead of failing at evaluation', () => {
    const { at, messages } = check(
      probes("      - { from: 10.0.0.5, to: '2001:db8::1', expect: allow }\n"),
    );
    expect(at).toEqual(['12:31 error invalid-value']);
    expect(messages[0]).toBe(
      'Probe goes from IPv4 "10.0.0.5" to IPv6 "2001:db8::1": a packet has one address family; use addresses of one family',
    );
  });

  it('checks ports, interface names and ids', () => {
    const { codes } = check(
      probes(`      - { id: p1, from: 10.0.0.5, to: 192.0.2.1, proto: icmp, port: 80, expect: allow }
      - { id: p1, from: 10.0.0.5, in: br/0, to: 192.0.2.1, expect: allow }
      - { from: 10.0.0.5, to: 192.0.2.1/32, port: 0, expect: deny }
`),
    );
    expect(codes).toEqual([
      'ports-without-protocol',
      'duplicate-id',
      'invalid-interface-name',
      'malformed-address',
      'port-range',
    ]);
  });
});
