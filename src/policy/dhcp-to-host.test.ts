import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { loadPolicy } from './parse-policy.js';

// Issue 20, item 6: a class that denies the host must not silently deny its workloads' DHCP
// renewals and rebinds where the host serves DHCP (macOS vmnet's bootpd on bridge100).
const EXAMPLE = readFileSync('testdata/policies/valid/macos-runner-fleet/policy.yaml', 'utf8');
const dir = mkdtempSync(join(tmpdir(), 'eg-dhcp-'));
afterAll(() => {
  rmSync(dir, { recursive: true, force: true });
});

function warningsOf(text: string): string[] {
  const file = join(dir, `${String(Math.random()).slice(2)}.yaml`);
  writeFileSync(file, text);
  return loadPolicy(file)
    .issues.filter((i) => i.code === 'dhcp-to-host-denied')
    .map((i) => i.message);
}

describe('check: DHCP to the host', () => {
  it('warns when a class denies the host, before any DHCP exception, on a vmnet bridge', () => {
    const without = EXAMPLE.replace(/^ *- \{ id: allow-host-dhcp.*\n/m, '');
    expect(without).not.toBe(EXAMPLE);
    expect(warningsOf(without)).toEqual([
      'Class "vm" denies its workloads DHCP to the host (rule "deny-host") on bridge100, where the host usually serves DHCP: lease renewals (unicast) and rebinds (broadcast from the leased address) are UDP port 67 to the host, so leases lapse as they expire; allow udp port 67 to self before it',
    ]);
  });

  it('is quiet with the exception, on an interface where the host serves no DHCP, or when nothing denies it', () => {
    expect(warningsOf(EXAMPLE)).toEqual([]);
    const without = EXAMPLE.replace(/^ *- \{ id: allow-host-dhcp.*\n/m, '');
    expect(warningsOf(without.replace('ingress: [bridge100]', 'ingress: [en7]'))).toEqual([]);
    expect(warningsOf(without.replace(/^ *- \{ id: deny-host.*\n/m, ''))).toEqual([]);
  });
});
