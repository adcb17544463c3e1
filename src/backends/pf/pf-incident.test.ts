import { describe, expect, it } from 'vitest';
import { parseIpv4 } from '../../core/index.js';
import {
  bootMacosPfHost,
  createMacosPfHost,
  readStockPfFiles,
} from '../../../sim/pf/create-macos-pf-host.js';
import { PFCTL_LOAD_WARNING, type PfctlModel } from '../../../sim/pf/pfctl-model.js';

// The seed incident (DESIGN.md §1A), replayed against the pfctl model. The old installer put an
// anchor with tables into /etc/pf.anchors/egressguard, hooked it into /etc/pf.conf with
// `load anchor`, and activated it with `pfctl -nf /etc/pf.conf` then `pfctl -f /etc/pf.conf`.

const ANCHOR_FILE = '/etc/pf.anchors/egressguard';
const OLD_ANCHOR = `# egressguard anchor, as the old installer wrote it
table <vm_sources> persist { 192.168.64.0/22 }
table <blocked_destinations> persist { 198.51.100.0/24 }
nat on en0 inet from <vm_sources> to any -> (en0)
block out quick on en0 inet from <vm_sources> to <blocked_destinations> label "block-vm-blocked"
`;

/** Stock pf.conf with the old stanza: nat-anchor among the translation anchors, the rest appended. */
function pfConfWithOldStanza(): string {
  const stock = readStockPfFiles().pfConf;
  return (
    stock.replace(
      'rdr-anchor "com.apple/*"\n',
      'rdr-anchor "com.apple/*"\nnat-anchor "egressguard"\n',
    ) + `anchor "egressguard"\nload anchor "egressguard" from "${ANCHOR_FILE}"\n`
  );
}

/** The same file after a later installer run appended its marked block: two `load anchor` lines. */
function pfConfWithDuplicatedBlock(): string {
  return (
    pfConfWithOldStanza() +
    `# BEGIN egressguard\nanchor "egressguard"\nload anchor "egressguard" from "${ANCHOR_FILE}"\n# END egressguard\n`
  );
}

function liveHost(pfConf: string): PfctlModel {
  const model = createMacosPfHost({ pfConf, files: { [ANCHOR_FILE]: OLD_ANCHOR } });
  expect(model.state.log[0]?.exitCode).toBe(0); // the boot load of the single stanza worked
  expect(model.run(['-s', 'info']).stdout).toMatch(/^Status: Enabled/);
  return model;
}

const VM = parseIpv4('192.168.64.5') as number;
const BLOCKED = parseIpv4('198.51.100.7') as number;

function vmPacket(destination: number): Parameters<PfctlModel['forwardPacket']>[0] {
  return {
    family: 4,
    source: VM,
    destination,
    protocol: 6,
    sourcePort: 49152,
    destinationPort: 443,
    ingress: 'bridge100',
    egress: 'en0',
  };
}

describe('the seed incident, against the pfctl model', () => {
  it('the old approach fails on a live host exactly as in the field: Resource busy, pf rules not loaded', () => {
    const model = liveHost(pfConfWithOldStanza());
    const before = model.run(['-a', 'egressguard', '-sr']).stdout + model.run(['-sn']).stdout;
    model.state.files['/etc/pf.conf'] = pfConfWithDuplicatedBlock();

    // `-nf` parses each `load anchor` but begins no transaction and defines no table (F93
    // pfctl.c pfctl_rules, parse.y process_tabledef): it passes the duplicated block, and only
    // the load finds the collision. A check with -n cannot stand in for the load.
    const tickets = structuredClone(model.state.tickets);
    const check = model.run(['-nf', '/etc/pf.conf']);
    expect(check).toEqual({ exitCode: 0, stdout: '', stderr: '' });
    expect(model.state.tickets).toEqual(tickets);

    const load = model.run(['-f', '/etc/pf.conf']);
    expect(load.exitCode).toBe(1);
    expect(load.stderr).toContain(
      `${ANCHOR_FILE}:2: cannot define table vm_sources: Resource busy\n`,
    );
    expect(load.stderr).toContain(
      `${ANCHOR_FILE}:3: cannot define table blocked_destinations: Resource busy\n`,
    );
    expect(load.stderr).toMatch(/pfctl: Syntax error in config file: pf rules not loaded\n$/);
    // Rolled back: what was running before still runs.
    expect(model.run(['-a', 'egressguard', '-sr']).stdout + model.run(['-sn']).stdout).toBe(before);
  });

  it('a single stanza still fails when another process touches the anchor mid-load', () => {
    const model = liveHost(pfConfWithOldStanza());
    model.injectTransactionCollision('egressguard');
    const load = model.run(['-f', '/etc/pf.conf']);
    expect(load.exitCode).toBe(1);
    expect(load.stderr).toContain('cannot define table vm_sources: Resource busy');
    expect(load.stderr).toContain('pf rules not loaded');
    // Without the collision the same command loads.
    expect(model.run(['-f', '/etc/pf.conf']).exitCode).toBe(0);
  });

  it('a duplicated pf.conf block makes pfctl reject the whole ruleset at boot, and NAT stops', () => {
    const model = liveHost(pfConfWithOldStanza());
    const natted = model.forwardPacket(vmPacket(parseIpv4('192.0.2.80') as number));
    expect(natted.verdict).toBe('pass');
    expect(natted.leaving?.source).toBe(parseIpv4('203.0.113.10'));

    model.state.files['/etc/pf.conf'] = pfConfWithDuplicatedBlock();
    model.reboot();
    const { bootLoad } = bootMacosPfHost(model);
    expect(bootLoad.exitCode).toBe(1);
    expect(bootLoad.stderr).toContain('cannot define table vm_sources: Resource busy');
    expect(model.run(['-sn']).stdout).toBe(''); // no nat-anchor at all: the main ruleset is empty
    expect(model.run(['-sr']).stdout).toBe('');
    const after = model.forwardPacket(vmPacket(parseIpv4('192.0.2.80') as number));
    expect(after.verdict).toBe('pass');
    expect(after.leaving?.source).toBe(VM); // leaves untranslated: NAT silently stopped
  });

  it('`block out … from <vm_sources>` on the uplink never matches after NAT', () => {
    const model = liveHost(pfConfWithOldStanza());
    const result = model.forwardPacket(vmPacket(BLOCKED));
    expect(result.verdict).toBe('pass');
    expect(result.outbound?.translation?.kind).toBe('nat');
    // The outbound filter saw the host's address, not the VM's (pf.conf(5) TRANSLATION).
    expect(result.outbound?.packet.source).toBe(parseIpv4('203.0.113.10'));
    const verbose = model.run(['-a', 'egressguard', '-vsr']).stdout;
    expect(verbose).toContain('label "block-vm-blocked"');
    // The rule was consulted (Evaluations moved) and never matched (Packets 0).
    expect(verbose).toMatch(/\[ Evaluations: [1-9]\d* +Packets: 0 /);
  });

  it('loading only the anchor works on the same broken host, at once and on every reconcile', () => {
    const model = liveHost(pfConfWithOldStanza());
    model.state.files['/etc/pf.conf'] = pfConfWithDuplicatedBlock();
    const newAnchor = `table <vm_sources> { 192.168.64.0/22 }
table <blocked_destinations> { 198.51.100.0/24 }
nat on en0 inet from <vm_sources> to any -> (en0)
block in quick on bridge100 inet from <vm_sources> to <blocked_destinations> label "r1"
`;
    model.state.files['/tmp/eg.anchor'] = newAnchor;
    const tickets = structuredClone(model.state.tickets);
    // `-n -a` touches no kernel state, not even a ticket (NOTES §2).
    expect(model.run(['-n', '-a', 'egressguard', '-f', '/tmp/eg.anchor']).exitCode).toBe(0);
    expect(model.state.tickets).toEqual(tickets);
    for (let i = 0; i < 100; i++) {
      const load = model.run(['-a', 'egressguard', '-f', '/tmp/eg.anchor']);
      expect(load).toEqual({ exitCode: 0, stdout: '', stderr: PFCTL_LOAD_WARNING });
    }
    expect(model.forwardPacket(vmPacket(BLOCKED)).verdict).toBe('block');
  });
});
