import { mkdtempSync, readdirSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { REPO, runCli } from './run-cli.js';

const POLICY = join(REPO, 'testdata/policies/valid/linux-vpn-gateway/policy.yaml');

describe('errors a user causes on the command line: exit 2, a clear message, nothing changed', () => {
  const state = mkdtempSync(join(tmpdir(), 'eg-runtime-errors-'));
  afterAll(() => {
    rmSync(state, { recursive: true, force: true });
  });

  const withState = ['--state-dir', state];
  it.each([
    ['status', ...withState],
    ['plan', POLICY, ...withState],
    ['apply', POLICY, ...withState],
    ['remove', ...withState],
    ['doctor', ...withState],
    ['facts'],
  ])('%s --netns with a namespace that does not exist', async (...command) => {
    const ns = 'egtest-no-such-namespace';
    const result = await runCli([...command, '--netns', ns]);
    expect(result.exitCode).toBe(2);
    expect(result.stderr).toBe(
      [
        `error: Cannot act in network namespace "${ns}": it does not exist (no /run/netns/${ns})`,
        `hint: create it with \`ip netns add ${ns}\`, or name one that \`ip netns list\` shows`,
      ].join('\n'),
    );
    expect(readdirSync(state)).toEqual([]);
  });

  const missing = join(state, 'nope.yaml');
  it('check: a policy that cannot be read is a runtime error, not an invalid policy', async () => {
    const result = await runCli(['check', missing]);
    expect(result.exitCode).toBe(2);
    expect(result.stdout.split('\n')).toEqual([
      `${missing}:1:1: error unreadable-file: Cannot read policy "${missing}": ENOENT (no such file): check the path and its permissions`,
      `✗ ${missing}: cannot be read (1 error, 0 warnings)`,
    ]);
    const directory = await runCli(['check', state]);
    expect(directory.exitCode).toBe(2);
    expect(directory.stdout).toContain('EISDIR (it is a directory)');
  });

  it.each([
    ['compile', missing],
    ['explain', missing, '--from', '10.10.0.5', '--to', '203.0.113.7'],
    ['plan', missing, ...withState],
    ['apply', missing, ...withState],
  ])('%s: a policy that cannot be read exits 2', async (...command) => {
    const result = await runCli(command);
    expect(result.exitCode).toBe(2);
    expect(result.stderr).toContain(
      `error: Cannot read policy "${missing}": ENOENT (no such file): check the path and its permissions`,
    );
  });

  it('check: an invalid policy still exits 1', async () => {
    const result = await runCli(['check', 'policy.yaml'], {
      cwd: join(REPO, 'testdata/policies/invalid/unreadable-list-file'),
    });
    expect(result.exitCode).toBe(1);
  });
});

describe('--help of the commands that take every backend option', () => {
  it.each([['confirm'], ['remove'], ['status']])(
    "%s --help lists the common options first, then each backend's under its heading",
    async (command) => {
      const help = (await runCli([command, '--help'])).stdout;
      const sections = help.split(/\n(?=\S)/);
      const headings = sections.map((s) => s.split('\n')[0]);
      expect(headings).toEqual(
        expect.arrayContaining([
          'Options:',
          'Options of the nftables backend:',
          'Options of the pf backend:',
          'Options of the cilium backend:',
        ]),
      );
      const section = (heading: string): string =>
        sections.find((s) => s.startsWith(heading)) ?? '';
      expect(section('Options:\n')).toMatch(/--netns <name>/);
      expect(section('Options:\n')).not.toMatch(/--table|--anchor|--pfctl|--cilium-version/);
      expect(section('Options of the nftables backend:')).toMatch(/--table <name>/);
      expect(section('Options of the pf backend:')).toMatch(/--anchor <path>[\s\S]*--pf-conf/);
      expect(section('Options of the cilium backend:')).toMatch(/--cilium-version <version>/);
    },
  );
});
