import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { disableKillSwitch } from './nft-test-faults.js';

const GOLDEN = new URL(
  '../../../testdata/policies/valid/linux-vpn-gateway/expected.nftables.ruleset.nft',
  import.meta.url,
);

describe('disableKillSwitch (test fault)', () => {
  it('removes the kill-switch drops and their logs, and nothing else', () => {
    const ruleset = readFileSync(GOLDEN, 'utf8');
    const broken = disableKillSwitch(ruleset);
    expect(broken).not.toMatch(/drop comment "vpn\/kill-switch"/);
    expect(broken).not.toMatch(/log prefix "eg drop vpn\/kill-switch /);
    // The counter stays declared: it reads 0, a guard that is trusted and never fires.
    expect(broken).toContain('counter n_vpn/kill-switch {');
    const removed = ruleset.split('\n').filter((l) => !broken.split('\n').includes(l));
    // The drop and its log, per family, of class vpn; of class host-vpn, IPv4 only.
    expect(removed).toHaveLength(6);
    expect(removed.every((l) => l.includes('kill-switch'))).toBe(true);
  });
});
