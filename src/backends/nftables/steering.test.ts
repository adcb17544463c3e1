import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import { isEgressguardError } from '../../core/index.js';
import { readHostFacts } from '../../facts/index.js';
import { lowerForHost, type HostIR } from '../../ir/index.js';
import { parsePolicy } from '../../policy/index.js';
import { createRunner } from '../../runner/index.js';
import { createNftCompiler, RULESET_ARTIFACT } from './nft-compiler.js';
import { nftablesBackend } from './nftables-backend.js';
import { buildSteering, STEERING_ARTIFACT, type SteeringSpec } from './steering.js';

const VALID = fileURLToPath(new URL('../../../testdata/policies/valid', import.meta.url));
const FACTS = readHostFacts(join(VALID, 'linux-vpn-gateway/facts.json'));

/** Lowers policy text against the vpn-gateway facts (tunnels tun0 and tun1 declared). */
function lower(classes: string): HostIR {
  const text = `apiVersion: egressguard/v1
metadata: { name: test }
interfaces:
  tunnels:
    tun0: {}
    tun1: {}
classes:
${classes}`;
  const parsed = parsePolicy(text, 'policy.yaml');
  if (parsed.policy === undefined) {
    throw new Error(parsed.issues.map((i) => `${i.code}: ${i.message}`).join('\n'));
  }
  return lowerForHost(parsed.policy, FACTS);
}

const TWO_TUNNELS = lower(`  a:
    ingress: [vwl0]
    sources: [10.10.0.0/24]
    via: tun0
    killSwitch: {}
    default: allow
  b:
    ingress: [iwl0]
    sources: [10.10.1.0/24]
    via: tun1
    killSwitch: {}
    default: allow
`);

function usageError(run: () => unknown): string {
  try {
    run();
  } catch (error) {
    if (isEgressguardError(error) && error.code === 'usage') return error.message;
    throw error;
  }
  throw new Error('expected a usage error');
}

describe('steering table ids and rule priorities', () => {
  it('counts up from the defaults, one table and priority per tunnel', () => {
    const spec = buildSteering(TWO_TUNNELS);
    expect(spec.tunnels.map((t) => [t.name, t.table, t.priority])).toEqual([
      ['tun0', 7350, 7350],
      ['tun1', 7351, 7351],
    ]);
  });

  it('counts up from the table and priority chosen in the compile options', () => {
    const artifacts = createNftCompiler().compile(TWO_TUNNELS, {
      options: { routeTable: '100', rulePriority: '9000' },
    });
    const spec = JSON.parse(
      artifacts.find((a) => a.name === STEERING_ARTIFACT)?.content ?? '',
    ) as SteeringSpec;
    expect(spec.tunnels.map((t) => [t.name, t.table, t.priority])).toEqual([
      ['tun0', 100, 9000],
      ['tun1', 101, 9001],
    ]);
    expect(new Set(spec.rules.map((r) => `${r.table}/${r.priority}`))).toEqual(
      new Set(['100/9000', '101/9001']),
    );
    expect(new Set(spec.routes.map((r) => r.table))).toEqual(new Set([100, 101]));
  });

  it('refuses reserved and out-of-range table ids, naming the value', () => {
    for (const table of [0, 253, 254, 255, -1, 2 ** 31, 1.5]) {
      expect(
        usageError(() => buildSteering(TWO_TUNNELS, { table })),
        String(table),
      ).toContain(`"${table}"`);
    }
    expect(usageError(() => buildSteering(TWO_TUNNELS, { table: 254 }))).toBe(
      'Cannot use routing table "254" for steering: it is the main table; choose a table id from 1 to 2147483647 other than 253, 254 and 255 (default, main, local)',
    );
    // The second tunnel would take 253, the default table.
    expect(usageError(() => buildSteering(TWO_TUNNELS, { table: 252 }))).toBe(
      'Cannot use routing table "253" for steering (2 are needed, counting up from 252): it is the default table; choose a table id from 1 to 2147483647 other than 253, 254 and 255 (default, main, local)',
    );
    expect(buildSteering(TWO_TUNNELS, { table: 256 }).tunnels.map((t) => t.table)).toEqual([
      256, 257,
    ]);
  });

  it('refuses rule priorities outside 1 to 32765, naming the value', () => {
    expect(usageError(() => buildSteering(TWO_TUNNELS, { priority: 0 }))).toBe(
      'Cannot use rule priority "0" for steering: choose a priority from 1 to 32765 (0 is the local table\'s rule, 32766 and 32767 are main and default)',
    );
    expect(usageError(() => buildSteering(TWO_TUNNELS, { priority: 32765 }))).toBe(
      'Cannot use rule priority "32766" for steering (2 are needed, counting up from 32765): choose a priority from 1 to 32765 (0 is the local table\'s rule, 32766 and 32767 are main and default)',
    );
    expect(usageError(() => buildSteering(TWO_TUNNELS, { priority: 7.5 }))).toContain('"7.5"');
    expect(buildSteering(TWO_TUNNELS, { priority: 32764 }).tunnels.map((t) => t.priority)).toEqual([
      32764, 32765,
    ]);
  });

  it('checks the options even without a tunnel class, so a typo fails everywhere', () => {
    const ir = lower(
      '  a:\n    ingress: [vwl0]\n    sources: [10.10.0.0/24]\n    default: allow\n',
    );
    expect(usageError(() => buildSteering(ir, { table: 255 }))).toContain('local table');
  });
});

describe('steering of classes with and without a kill switch', () => {
  // Class a has a kill switch, class b on the same tunnel has none: with the tunnel down, a is
  // blackholed and b must fall back to the main table, as explain and the warning say.
  const MIXED = lower(`  a:
    ingress: [vwl0]
    sources: [10.10.0.0/24, '2001:db8:10::/64']
    via: tun0
    killSwitch: { except: [192.168.0.0/16] }
    default: allow
  b:
    ingress: [iwl0]
    sources: [10.10.1.0/24]
    via: tun0
    default: allow
`);

  it('gives each its own table and priority, the kill switch first', () => {
    const spec = buildSteering(MIXED);
    expect(spec.tunnels).toEqual([
      { name: 'tun0', killSwitch: true, table: 7350, priority: 7350 },
      { name: 'tun0', killSwitch: false, table: 7351, priority: 7351 },
    ]);
    expect(spec.rules).toEqual([
      { family: 4, from: '10.10.0.0/24', table: 7350, priority: 7350 },
      { family: 6, from: '2001:db8:10::/64', table: 7350, priority: 7350 },
      { family: 4, from: '10.10.1.0/24', table: 7351, priority: 7351 },
    ]);
  });

  it('blackholes only the table of the kill-switch classes', () => {
    const routes = buildSteering(MIXED).routes.map(
      (r) =>
        `${r.table} ${r.type} ${r.destination}${r.device === undefined ? '' : ` dev ${r.device}`}`,
    );
    expect(routes.filter((r) => r.includes('blackhole'))).toEqual([
      '7350 blackhole 0.0.0.0/0',
      '7350 blackhole ::/0',
    ]);
    // With the tunnel down its default vanishes, and only throws remain: the lookup falls
    // through to the main table. The kill switch's exceptions are not b's business.
    expect(routes.filter((r) => r.startsWith('7351 '))).toEqual([
      '7351 unicast 0.0.0.0/0 dev tun0',
      '7351 throw 10.10.0.0/23',
      '7351 throw 192.168.1.0/24',
    ]);
    expect(routes).toContain('7350 throw 192.168.0.0/16');
  });

  it('numbers tables across tunnels and groups in one sequence', () => {
    const ir = lower(`  a:
    ingress: [vwl0]
    sources: [10.10.0.0/24]
    via: tun1
    default: allow
  b:
    ingress: [iwl0]
    sources: [10.10.1.0/24]
    via: tun0
    killSwitch: {}
    default: allow
  c:
    ingress: [lan0]
    sources: [10.10.2.0/24]
    via: tun1
    killSwitch: {}
    default: allow
`);
    expect(
      buildSteering(ir, { table: 500 }).tunnels.map((t) => [t.name, t.killSwitch, t.table]),
    ).toEqual([
      ['tun0', true, 500],
      ['tun1', true, 501],
      ['tun1', false, 502],
    ]);
  });
});

describe('nft table name', () => {
  it('refuses a name that would inject into the nft transaction', () => {
    const compile = (table: string) =>
      createNftCompiler().compile(TWO_TUNNELS, { options: { table } });
    expect(usageError(() => compile('x {}; flush ruleset; table inet x'))).toBe(
      'Cannot use nft table name "x {}; flush ruleset; table inet x": a table name is a letter followed by at most 31 letters, digits or "_"',
    );
    for (const bad of ['', '1abc', 'eg-guard', 'a'.repeat(33), 'x\ny']) {
      expect(
        usageError(() => compile(bad)),
        bad,
      ).toContain('Cannot use nft table name');
    }
    // The applier and inspector interpolate it into nft commands too.
    const runner = createRunner({ guard: true });
    const options = { table: 'x; flush ruleset' };
    expect(usageError(() => nftablesBackend.createApplier({ runner, options }))).toContain(
      'Cannot use nft table name "x; flush ruleset"',
    );
    expect(usageError(() => nftablesBackend.createInspector({ runner, options }))).toContain(
      'Cannot use nft table name',
    );
    const ruleset = compile('eg_2').find((a) => a.name === RULESET_ARTIFACT)?.content ?? '';
    expect(ruleset).toContain('table inet eg_2 {');
    expect(compile('a'.repeat(32)).length).toBe(3);
  });
});
