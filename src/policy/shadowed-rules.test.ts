import { describe, expect, it } from 'vitest';
import { parsePolicy } from './parse-policy.js';

/** Shadowed-rule warnings for a class with these rules, as "rule id ← earlier ids". */
function shadowed(rules: string, sources = '[192.168.64.0/22, 2001:db8:64::/48]'): string[] {
  const text = `apiVersion: egressguard/v1
metadata: { name: shadows }
networks:
  private: [10.0.0.0/8, 172.16.0.0/12]
  cache: [10.42.0.10]
  low: [10.0.0.0/9]
  high: [10.128.0.0/9]
classes:
  vm:
    ingress: [br0]
    sources: ${sources}
    rules:
${rules
  .trim()
  .split('\n')
  .map((r) => `      - ${r.trim()}`)
  .join('\n')}
    default: allow
`;
  const result = parsePolicy(text, 'policy.yaml');
  const other = result.issues.filter((i) => i.code !== 'shadowed-rule');
  expect(other).toEqual([]);
  return result.issues.map((i) => {
    const match =
      /^Rule "([^"]+)" never matches: the earlier rules? (.+?) (?:together )?match/.exec(i.message);
    return `${match?.[1] ?? '?'} ← ${match?.[2]?.replaceAll('"', '') ?? '?'}`;
  });
}

describe('shadowed rules', () => {
  it('warns when one earlier rule covers a later one, whatever the actions', () => {
    expect(
      shadowed(`
        { id: deny-private, action: deny, to: private }
        { id: allow-cache, action: allow, to: cache, proto: tcp, ports: [4000] }`),
    ).toEqual(['allow-cache ← deny-private']);
  });

  it('points at the shadowed rule id', () => {
    const result = parsePolicy(
      `apiVersion: egressguard/v1
metadata: { name: x }
classes:
  vm:
    ingress: [br0]
    sources: [192.168.64.0/22]
    rules:
      - { id: all, action: allow, to: any }
      - { id: never, action: deny, to: 10.0.0.0/8 }
    default: deny
`,
      'policy.yaml',
    );
    expect(result.issues.map((i) => `${i.line}:${i.column} ${i.severity} ${i.path}`)).toEqual([
      '9:15 warning classes.vm.rules[1].id',
    ]);
  });

  it('does not warn when the later rule reaches beyond the earlier one', () => {
    expect(
      shadowed(`
        { id: allow-cache, action: allow, to: cache, proto: tcp, ports: [4000] }
        { id: deny-private, action: deny, to: private }
        { id: tcp-web, action: allow, to: any, proto: tcp, ports: [443] }
        { id: web, action: allow, to: any, proto: [tcp, udp], ports: [443] }
        { id: all-tcp, action: deny, to: any, proto: tcp }`),
    ).toEqual([]);
  });

  it('needs the earlier rule to cover every protocol, and every port', () => {
    expect(
      shadowed(`
        { id: tcp-only, action: deny, to: any, proto: tcp }
        { id: tcp-and-udp, action: deny, to: private, proto: [tcp, udp] }
        { id: all-protocols, action: deny, to: cache }
        { id: ports-a, action: allow, to: any, proto: udp, ports: [53] }
        { id: udp-all-ports, action: allow, to: 192.0.2.1, proto: udp }`),
    ).toEqual([]);
  });

  it('joins adjacent and overlapping port ranges of one rule', () => {
    expect(
      shadowed(`
        { id: split, action: allow, to: any, proto: tcp, ports: ['8000-8099', '8100-8199', 9000] }
        { id: inside, action: deny, to: cache, proto: tcp, ports: ['8050-8150'] }
        { id: across-gap, action: deny, to: cache, proto: tcp, ports: ['8150-9000'] }`),
    ).toEqual(['inside ← split']);
  });

  it('warns when earlier rules together cover the destination', () => {
    expect(
      shadowed(`
        { id: deny-low, action: deny, to: low, proto: tcp }
        { id: deny-high, action: deny, to: high }
        { id: deny-ten, action: deny, to: 10.0.0.0/8, proto: tcp, ports: [22] }`),
    ).toEqual(['deny-ten ← deny-low, deny-high']);
  });

  it('does not combine rules that do not each cover the protocols', () => {
    expect(
      shadowed(`
        { id: deny-low, action: deny, to: low, proto: tcp }
        { id: deny-high, action: deny, to: high, proto: udp }
        { id: deny-ten, action: deny, to: 10.0.0.0/8, proto: tcp }`),
    ).toEqual([]);
  });

  it('covers both families only when the earlier rule does', () => {
    expect(
      shadowed(`
        { id: v4, action: deny, to: 0.0.0.0/0 }
        { id: v6, action: deny, to: ::/0 }
        { id: again, action: deny, to: [192.0.2.0/24, 2001:db8::/32] }`),
    ).toEqual(['again ← v4, v6']);
  });

  it('treats self as covered only by self and any', () => {
    expect(
      shadowed(`
        { id: deny-private, action: deny, to: private }
        { id: host-dns, action: allow, to: self, proto: udp, ports: [53] }
        { id: host, action: deny, to: self }
        { id: host-ssh, action: allow, to: self, proto: tcp, ports: [22] }
        { id: everything, action: deny, to: any }
        { id: after-any, action: allow, to: 203.0.113.0/24 }`),
    ).toEqual(['host-ssh ← host', 'after-any ← everything']);
  });
});
