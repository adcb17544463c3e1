import { mkdtempSync, rmSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { basename, join } from 'node:path';
import { execa } from 'execa';
import { afterAll, describe, expect, it } from 'vitest';
import { runProve } from './support/prove-cli.js';

// `prove --capture DIR`: every lab node's packets recorded for the whole proof, one pcap a node,
// through the built CLI in a lab of network namespaces.

const dir = mkdtempSync(join(tmpdir(), 'egtest-prove-capture-'));

afterAll(() => {
  rmSync(dir, { recursive: true, force: true });
});

describe('prove --lab --capture', () => {
  it("records every lab node's packets, the probes of class vpn among the host's", async () => {
    const captures = join(dir, 'packets');
    const run = await runProve(['--scenarios', 'steady-state', '--capture', captures]);
    expect(run.exitCode, run.stderr).toBe(0);
    const files = run.report?.lab.captures ?? [];
    expect(files.map((f) => basename(f)).sort()).toEqual(
      (run.report?.lab.namespaces ?? [])
        .map((ns) => `${ns.replace(/^eglab-[^-]+-[^-]+-/, '')}.pcap`)
        .sort(),
    );
    for (const file of files) expect(statSync(file).size).toBeGreaterThan(24); // past the header
    const host = files.find((f) => basename(f) === 'host.pcap');
    expect(host).toBeDefined();
    const { stdout } = await execa('tcpdump', ['-r', host ?? '', '-n', 'tcp and port 443']);
    // A probe of class vpn into the host from its workload, and out by the tunnel, masqueraded.
    expect(stdout).toMatch(/10\.10\.0\.5\.\d+ > 203\.0\.113\.7\.443:/);
    expect(stdout).toMatch(/10\.200\.0\.2\.\d+ > 203\.0\.113\.7\.443:/);
    expect(run.stdout).toContain("every lab node's packets:");
  });
});
