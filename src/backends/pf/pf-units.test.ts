import { describe, expect, it } from 'vitest';
import { lintLaunchdPlist } from './launchd-plist.js';
import { pfUnits } from './pf-units.js';

describe('pf LaunchDaemons', () => {
  const input = {
    node: '/usr/local/bin/node',
    bin: '/usr/local/lib/egressguard/bin/egressguard.js',
    stateDir: '/var/lib/egressguard',
    policy: '/etc/egressguard/policy.yaml',
  };

  it('restore at boot, and with a policy a re-converge every minute; each plist lints clean', () => {
    const units = pfUnits.render(input);
    expect(units.map((u) => u.name)).toEqual([
      'dev.egressguard.restore.plist',
      'dev.egressguard.reconverge.plist',
    ]);
    for (const unit of units) expect(lintLaunchdPlist(unit.content)).toEqual([]);
    const [restore, reconverge] = units.map((u) => u.content);
    expect(restore).toContain('<string>restore</string>');
    expect(restore).toMatch(/<key>RunAtLoad<\/key>\s*<true\/>/);
    expect(reconverge).toMatch(/<key>StartInterval<\/key>\s*<integer>60<\/integer>/);
    expect(reconverge).toContain('<string>/etc/egressguard/policy.yaml</string>');
    expect(reconverge).toContain('<string>/etc/egressguard/facts.json</string>');
    // A utun renumbered by a VPN reconnect is found anew at every re-converge.
    expect(reconverge).toContain('<string>--live-tunnels</string>');
  });

  it('renders only the boot restore without a policy', () => {
    const withoutPolicy = { node: input.node, bin: input.bin, stateDir: input.stateDir };
    expect(pfUnits.render(withoutPolicy).map((u) => u.name)).toEqual([
      'dev.egressguard.restore.plist',
    ]);
  });
});
