import { readdirSync, readFileSync, existsSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { parse } from 'yaml';
import { REPO, runCli } from './run-cli.js';

interface ExplainCase {
  name: string;
  args: Record<string, string | number>;
  expect: Record<string, unknown>;
}

const VALID = join(REPO, 'testdata/policies/valid');
const cases = readdirSync(VALID).filter((c) => existsSync(join(VALID, c, 'explain.yaml')));

describe.each(cases)('explain: %s', (name) => {
  const dir = join(VALID, name);
  const examples = parse(readFileSync(join(dir, 'explain.yaml'), 'utf8')) as ExplainCase[];

  it('has expected verdicts', () => {
    expect(examples.length).toBeGreaterThan(0);
  });

  it.each(examples.map((e) => [e.name, e] as const))('%s', async (_label, example) => {
    const args = Object.entries(example.args).flatMap(([k, v]) => [`--${k}`, String(v)]);
    const result = await runCli(['explain', join(dir, 'policy.yaml'), ...args, '--json']);
    expect(result.stderr).toBe('');
    expect(result.exitCode).toBe(0);
    const json = JSON.parse(result.stdout) as Record<string, unknown>;
    expect(json).toMatchObject(example.expect);
  });
});

describe('check on the valid examples', () => {
  it.each(readdirSync(VALID))('%s is valid and its probes agree', async (name) => {
    const result = await runCli(['check', join(VALID, name, 'policy.yaml'), '--json']);
    expect(result.exitCode).toBe(0);
    const report = JSON.parse(result.stdout) as {
      valid: boolean;
      files: { issues: unknown[]; probes: { agrees: boolean }[] }[];
    };
    expect(report.valid).toBe(true);
    expect(report.files[0]?.issues).toEqual([]);
    expect(report.files[0]?.probes.length).toBeGreaterThan(0);
    expect(report.files[0]?.probes.every((p) => p.agrees)).toBe(true);
  });
});

describe('explain errors', () => {
  it('rejects a malformed address with a hint and exit code 2', async () => {
    const result = await runCli([
      'explain',
      join(VALID, 'linux-vpn-gateway/policy.yaml'),
      '--from',
      '10.10.0.5',
      '--to',
      '10.1.2.300',
    ]);
    expect(result.exitCode).toBe(2);
    expect(result.stderr).toContain('error: Cannot use destination address "10.1.2.300"');
    expect(result.stderr).toContain('hint:');
  });

  // One validation of the packet's arguments, each with its own message (issue 8, §5).
  it.each([
    [['--proto', 'tcp', '--port', '0'], 'Cannot use port "0": ports go from 1 to 65535'],
    [['--proto', 'tcp', '--port', '70000'], 'Cannot use port "70000": ports go from 1 to 65535'],
    [['--proto', 'bogus'], 'Cannot use protocol "bogus"'],
    [['--proto', 'TCP'], 'hint: protocol names are lowercase, as in a policy: write "tcp"'],
    [['--proto', 'icmpv6'], 'hint: write "icmp": it means ICMPv6 for an IPv6 packet'],
    [
      ['--proto', 'icmp', '--port', '53'],
      'Cannot use --port 53 with protocol "icmp": only tcp, udp and sctp have ports',
    ],
    [['--proto', 'udp', '--icmp-type', '8'], 'Cannot use --icmp-type 8 with protocol "udp"'],
    [['--proto', 'icmp', '--icmp-type', '300'], 'Cannot use ICMP type "300"'],
    [['--fragment', 'middle'], 'Cannot use --fragment "middle"'],
  ])('rejects %j with its own message and exit code 2', async (extra, message) => {
    const result = await runCli([
      'explain',
      join(VALID, 'linux-vpn-gateway/policy.yaml'),
      '--from',
      '10.10.0.5',
      '--to',
      '203.0.113.7',
      ...extra,
    ]);
    expect(result.exitCode).toBe(2);
    expect(result.stderr).toContain(message);
    // Never the hint about address families that every packet error once printed.
    expect(result.stderr).not.toContain('both of one family');
  });

  it('asks for facts when none sit beside the policy', async () => {
    const result = await runCli([
      'explain',
      join(REPO, 'testdata/policies/valid/linux-vpn-gateway/policy.yaml'),
      '--from',
      '10.10.0.5',
      '--to',
      '203.0.113.7',
      '--facts',
      '/nonexistent/facts.json',
    ]);
    expect(result.exitCode).toBe(2);
    expect(result.stderr).toContain('Cannot read host facts "/nonexistent/facts.json"');
  });

  it('refuses a policy it cannot read: a runtime error, exit 2', async () => {
    const result = await runCli([
      'explain',
      '/nonexistent/policy.yaml',
      '--from',
      '10.0.0.1',
      '--to',
      '10.0.0.2',
    ]);
    expect(result.exitCode).toBe(2);
    expect(result.stderr).toContain('Cannot read policy "/nonexistent/policy.yaml": ENOENT');
  });

  it('reports errors as JSON under --json, with the same exit code', async () => {
    const result = await runCli([
      'explain',
      join(REPO, 'testdata/policies/invalid/via-unknown-tunnel/policy.yaml'),
      '--from',
      '10.10.0.5',
      '--to',
      '203.0.113.7',
      '--json',
    ]);
    expect(result.exitCode).toBe(1);
    const json = JSON.parse(result.stdout) as { error: { code: string; message: string } };
    expect(json.error.code).toBe('policy-invalid');
    expect(json.error.message).toContain('unknown-interface');
  });
});
