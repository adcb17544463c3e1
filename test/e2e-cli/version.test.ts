import { copyFileSync, mkdirSync, mkdtempSync, rmSync } from 'node:fs';
import { release, tmpdir } from 'node:os';
import { join } from 'node:path';
import { execa } from 'execa';
import { describe, expect, it } from 'vitest';
import { REPO, runCli } from './run-cli.js';

describe('--version', () => {
  it('names the version, the commit built, Node.js and each backend with its tools', async () => {
    const result = await runCli(['--version']);
    expect(result.exitCode).toBe(0);
    const head = (await execa('git', ['rev-parse', '--short=12', 'HEAD'], { cwd: REPO })).stdout;
    const nft = /v(\d+\.\d+\.\d+)/.exec((await execa('nft', ['--version'])).stdout)?.[1];
    const lines = result.stdout.split('\n');
    expect(lines[0]).toBe('egressguard 0.1.0');
    expect(lines[1]).toMatch(
      new RegExp(`^commit {4}${head}( \\(built with uncommitted changes\\))?$`),
    );
    expect(lines[2]).toBe(`node      ${process.version} (linux ${release()} ${process.arch})`);
    expect(lines[3]).toBe(`backends  nftables (this host's): nft ${nft}`);
    expect(lines.slice(4)).toEqual([
      '          pf: no tool versions to read',
      '          cilium: no tool versions to read',
    ]);
  });

  it('says the same as JSON', async () => {
    const result = await runCli(['--version', '--json']);
    expect(result.exitCode).toBe(0);
    const report = JSON.parse(result.stdout) as {
      version: string;
      commit: string;
      node: string;
      backends: { name: string; enforcesHere: boolean; tools: Record<string, string> | null }[];
    };
    expect(report.version).toBe('0.1.0');
    expect(report.commit).toMatch(/^[0-9a-f]{12}$/);
    expect(report.node).toBe(process.version);
    expect(report.backends.map((b) => b.name)).toEqual(['nftables', 'pf', 'cilium']);
    expect(report.backends[0]?.enforcesHere).toBe(true);
    expect(report.backends[0]?.tools?.['nft']).toMatch(/^\d+\.\d+/);
  });
});

describe('a checkout that was never built', () => {
  it('says to build, with exit code 2, instead of a stack trace', async () => {
    // The launcher alone in a tree of its own, where the bundle beside it does not exist.
    const tree = mkdtempSync(join(tmpdir(), 'eg-unbuilt-'));
    try {
      mkdirSync(join(tree, 'bin'));
      copyFileSync(join(REPO, 'bin/egressguard.js'), join(tree, 'bin/egressguard.js'));
      const result = await execa(process.execPath, [join(tree, 'bin/egressguard.js'), 'check'], {
        reject: false,
      });
      expect(result.exitCode).toBe(2);
      expect(result.stderr).toContain('the CLI is not built');
      expect(result.stderr).toContain('npm ci && npm run build');
      expect(result.stderr).not.toMatch(/\n\s+at /);
    } finally {
      rmSync(tree, { recursive: true, force: true });
    }
  });
});
