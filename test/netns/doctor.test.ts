import { randomBytes } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createRunner } from '../../src/runner/index.js';
import { runCli } from '../e2e-cli/run-cli.js';

// `egressguard doctor --netns` through the built CLI, against a namespace set up with what it
// must report: a foreign table whose forward chain drops, a foreign `ip rule` at our steering
// priority, and the uplink bridged with a workload port. This kernel has no macvlan, dummy or
// wireguard modules to build more from; the classifiers' unit tests cover the rest with
// listings captured from real commands (testdata/doctor/).
const root = createRunner();
const ns = `eg-doc-${randomBytes(4).toString('hex')}`;
const inside = root.inNamespace(ns);
const POLICY = 'testdata/policies/valid/linux-vpn-gateway/policy.yaml';

interface Finding {
  severity: string;
  area: string;
  code: string;
  message: string;
  hint: string;
}
interface Report {
  findings: Finding[];
  foreignChains: Record<string, unknown>[];
  summary: { errors: number; warnings: number; infos: number };
}

async function sh(...argvs: string[][]): Promise<void> {
  for (const argv of argvs) await inside.run(argv, { effect: 'change' });
}

beforeAll(async () => {
  await root.run(['ip', 'netns', 'add', ns], { effect: 'change' });
  await sh(
    ['ip', 'link', 'set', 'lo', 'up'],
    ['ip', 'link', 'add', 'up0', 'type', 'veth', 'peer', 'name', 'up0-far'],
    ['ip', 'link', 'add', 'vnet0', 'type', 'veth', 'peer', 'name', 'vnet0-vm'],
    ['ip', 'link', 'add', 'br0', 'type', 'bridge'],
    ['ip', 'link', 'set', 'up0', 'master', 'br0'],
    ['ip', 'link', 'set', 'vnet0', 'master', 'br0'],
    ...['up0', 'up0-far', 'vnet0', 'vnet0-vm', 'br0'].map((l) => ['ip', 'link', 'set', l, 'up']),
    ['ip', 'addr', 'add', '198.51.100.2/24', 'dev', 'br0'],
    ['ip', 'route', 'add', 'default', 'via', '198.51.100.1', 'dev', 'br0', 'onlink'],
  );
});

afterAll(async () => {
  await root.run(['ip', 'netns', 'delete', ns], { effect: 'change', allowFailure: true });
});

async function doctor(...args: string[]): Promise<{ exitCode: number; report: Report }> {
  const result = await runCli(['doctor', '--netns', ns, '--json', ...args]);
  expect(result.stderr).toBe('');
  return { exitCode: result.exitCode, report: JSON.parse(result.stdout) as Report };
}

describe('egressguard doctor in a namespace', () => {
  it('reports the uplink bridged with a workload port, and nothing failing yet', async () => {
    const { exitCode, report } = await doctor();
    expect(report.findings.map((f) => `${f.severity} ${f.code}`)).toEqual([
      'info table-absent',
      'warning uplink-bridged',
    ]);
    expect(report.findings[1]?.message).toMatch(
      /^The uplink "br0" is a bridge with ports "up0", "vnet0": workloads on those ports reach the outside at layer 2/,
    );
    expect(exitCode).toBe(0);
  });

  it('lists a foreign forward chain with policy drop, and fails on a rule at our priority', async () => {
    await inside.run(['nft', '-f', '-'], {
      effect: 'change',
      input:
        'table ip filter {\n\tchain FORWARD {\n\t\ttype filter hook forward priority filter; policy drop;\n\t}\n}\n',
    });
    await sh(['ip', 'rule', 'add', 'from', '10.20.0.0/24', 'lookup', '100', 'priority', '7350']);

    const { exitCode, report } = await doctor(POLICY);
    expect(exitCode).toBe(1);
    expect(report.foreignChains).toEqual([
      {
        family: 'ip',
        table: 'filter',
        chain: 'FORWARD',
        hook: 'forward',
        type: 'filter',
        priority: 0,
        policy: 'drop',
        order: 'same-priority',
        canDrop: true,
        dropReasons: ['policy drop'],
      },
    ]);
    expect(report.findings.map((f) => `${f.area} ${f.severity} ${f.code}`)).toEqual([
      'nftables warning foreign-base-chain',
      'nftables info table-absent',
      'routing error rule-priority-collision',
      // The namespace has none of the example's ingress interfaces (vwl0, iwl0).
      'topology warning ingress-missing',
      'topology warning ingress-missing',
      'topology warning uplink-bridged',
    ]);
    expect(report.findings[2]?.message).toBe(
      'Routing rule "7350: from 10.20.0.0/24 lookup 100" (IPv4) is not ours and sits at priority 7350, which egressguard uses for steering',
    );
    expect(report.summary).toEqual({ errors: 1, warnings: 4, infos: 1 });
  });

  it('prints findings grouped by area for people', async () => {
    const result = await runCli(['doctor', '--netns', ns, POLICY]);
    expect(result.exitCode).toBe(1);
    const lines = result.stdout.split('\n');
    expect(lines.filter((l) => /^\S/.test(l))).toEqual([
      'nftables: other tables on our hooks',
      'routing: tables and rule priorities',
      'topology: paths netfilter does not see',
      'foreign base chains',
      '1 error, 4 warnings, 1 note',
    ]);
    expect(result.stdout).toContain(
      '  error   rule-priority-collision: Routing rule "7350: from 10.20.0.0/24 lookup 100" (IPv4)',
    );
    expect(result.stdout).toMatch(
      / {2}forward\s+ip filter\s+FORWARD\s+0\s+drop\s+same-priority\s+yes/,
    );
  });

  it('knows our own rule (proto 104) from a foreign one', async () => {
    await sh(
      ['ip', 'rule', 'del', 'priority', '7350'],
      [
        'ip',
        'rule',
        'add',
        'from',
        '10.10.0.0/24',
        'lookup',
        '7350',
        'priority',
        '7350',
        'proto',
        '104',
      ],
      ['ip', 'route', 'add', 'blackhole', 'default', 'table', '7350', 'proto', '104'],
    );
    const { exitCode, report } = await doctor(POLICY);
    expect(report.findings.map((f) => f.code)).not.toContain('rule-priority-collision');
    expect(exitCode).toBe(0);
  });
});
