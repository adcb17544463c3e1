import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { runProve, VPN_POLICY } from './support/prove-cli.js';

// `prove` on facts gathered from a real host: the example's interfaces plus the idle devices a
// host has (an `ifb` down, another up without an address), and a policy that probes the cloud
// metadata address (IPv4 link-local). Idle interfaces become no lab node, and the metadata probe
// is sent and measured like any other, through the built CLI in a lab of network namespaces.

const dir = mkdtempSync(join(tmpdir(), 'egtest-prove-host-'));

afterAll(() => {
  rmSync(dir, { recursive: true, force: true });
});

function writeInputs(): string {
  const facts = JSON.parse(readFileSync(join(VPN_POLICY, '..', 'facts.json'), 'utf8')) as {
    interfaces: object[];
  };
  facts.interfaces.push(
    { name: 'ifb0', up: false, addresses: [] },
    { name: 'ifb1', up: true, addresses: [] },
  );
  writeFileSync(join(dir, 'facts.json'), JSON.stringify(facts));
  const policy = readFileSync(VPN_POLICY, 'utf8')
    .replace(
      '    via: uplink\n    nat: masquerade\n',
      '    via: uplink\n    nat: masquerade\n    rules:\n      - { id: deny-metadata, action: deny, to: [169.254.169.254/32] }\n',
    )
    .concat(
      [
        '  - id: R-META-01',
        '    statement: Class internet never reaches the metadata address',
        '    probes:',
        '      - { from: 10.10.1.5, to: 169.254.169.254, proto: tcp, port: 80, expect: deny }',
        '',
      ].join('\n'),
    );
  expect(policy).toContain('id: deny-metadata');
  writeFileSync(join(dir, 'policy.yaml'), policy);
  return join(dir, 'policy.yaml');
}

describe('prove --lab on facts from a host with idle interfaces', () => {
  it('builds no node for down or address-less interfaces and measures the metadata probe', async () => {
    const policy = writeInputs();
    const run = await runProve(['--scenarios', 'steady-state'], { policy });
    const report = run.report;
    if (report === undefined) throw new Error(`no evidence (exit ${run.exitCode}): ${run.stderr}`);
    expect(report.lab.namespaces.some((n) => /ifb/.test(n))).toBe(false);
    expect(report.lab.leftOut).toEqual(['lo: loopback', 'ifb0: down', 'ifb1: no address']);
    expect(run.stdout).toContain(
      'host interfaces left out of the lab: ifb0: down, ifb1: no address',
    );
    const metadata = report.scenarios
      .flatMap((s) => s.judgements)
      .filter((j) => j.key.includes('169.254.169.254'));
    expect(metadata.length).toBeGreaterThan(0);
    for (const j of metadata) {
      expect({ key: j.key, sent: j.sent, outcome: j.outcome }).toEqual({
        key: j.key,
        sent: 10,
        outcome: 'passed',
      });
    }
    expect(report.outcome).toBe('proven');
    expect(run.exitCode).toBe(0);
  }, 600_000);
});
