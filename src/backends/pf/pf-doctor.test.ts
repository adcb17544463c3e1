import { describe, expect, it } from 'vitest';
import { readStockPfFiles } from '../../../sim/pf/create-macos-pf-host.js';
import { STANZA_BEGIN, STANZA_END } from './pf-conf-stanza.js';
import { diagnosePf, type PfDoctorSnapshot } from './pf-doctor.js';
import { parsePfOptions } from './pf-options.js';

// The pure half of pf's doctor, on snapshots as pfctl prints them (the pfctl model's formats);
// the CLI runs of test/e2e-cli/pf-model-doctor.test.ts cover the reading half.
const STOCK = readStockPfFiles().pfConf;
const REFERENCES = `TOKENS:
PID      Process Name                TOKEN                     TIMESTAMP
312      socketfilterfw              9007199254740993          0 days 00:00:01
4242     pfctl                       9007199254741000          0 days 00:00:09
`;
const BOOTED: PfDoctorSnapshot = {
  info: 'Status: Enabled for 0 days 00:00:05           Debug: Urgent\n',
  references: REFERENCES,
  mainRules: 'scrub-anchor "com.apple/*" all fragment reassemble\nanchor "com.apple/*" all\n',
  mainNat: 'nat-anchor "com.apple/*" all\nrdr-anchor "com.apple/*" all\n',
  anchorNat: 'nat on en0 inet from <egsrc_vm> to any -> (en0) round-robin\n',
  earlierSiblings: [
    { anchor: 'com.apple/200.AirDrop', quick: [] },
    { anchor: 'com.apple/250.ApplicationFirewall', quick: [] },
  ],
  ownToken: '9007199254741000',
  pfConf: STOCK,
};
const codes = (snapshot: PfDoctorSnapshot, options = {}) =>
  diagnosePf(snapshot, parsePfOptions(options)).findings.map((f) => `${f.severity} ${f.code}`);

describe("pf's doctor findings", () => {
  it('a booted stock host with our reference: enabled (ours marked) and attached, nothing else', () => {
    const report = diagnosePf(BOOTED, parsePfOptions({}));
    expect(report.findings.map((f) => f.code)).toEqual(['pf-enabled', 'anchor-attached']);
    expect(report.findings[0]?.message).toBe(
      'pf is enabled, held by 2 references: socketfilterfw (pid 312), pfctl (pid 4242, ours)',
    );
    expect(report.summary).toEqual({ errors: 0, warnings: 0, infos: 2 });
    expect(report.tables[0]?.rows).toEqual([
      ['312', 'socketfilterfw', '9007199254740993', ''],
      ['4242', 'pfctl', '9007199254741000', 'yes'],
    ]);
  });

  it('an interface with addresses that the anchor’s host lists do not name', () => {
    const listing =
      'block drop in quick on bridge100 inet from any to (bridge100) label "deny-host"\n' +
      'block drop in quick on bridge100 inet from any to (en0) label "deny-host"\n' +
      'block drop in quick on bridge100 inet from any to (lo0) label "deny-host"\n' +
      'block drop in quick on bridge100 inet from any to (en0:broadcast) label "deny-host"\n';
    const interfaces = [
      { name: 'lo0', addresses: ['127.0.0.1/8'] },
      { name: 'en0', addresses: ['198.51.100.20/24'] },
      { name: 'bridge100', addresses: ['192.168.64.1/22'] },
      { name: 'utun7', addresses: ['10.9.0.2/32'] },
      { name: 'en1', addresses: [] },
      { name: 'utun0', addresses: ['fe80::1c2a:9/64'] },
    ];
    const report = diagnosePf({ ...BOOTED, anchorRules: listing, interfaces }, parsePfOptions({}));
    const unlisted = report.findings.filter((f) => f.code === 'host-interface-not-listed');
    expect(unlisted.map((f) => f.severity)).toEqual(['warning']);
    expect(unlisted[0]?.message).toMatch(/^interface utun7 \(10\.9\.0\.2\/32\) is not among/);
    // Listed, or an anchor without host lists (nothing to self): nothing to say.
    expect(
      codes({ ...BOOTED, anchorRules: listing.replace('(en0:broadcast)', '(utun7)'), interfaces }),
    ).not.toContain('warning host-interface-not-listed');
    expect(codes({ ...BOOTED, anchorRules: '', interfaces })).not.toContain(
      'warning host-interface-not-listed',
    );
  });

  it('pf disabled, our reference gone, the hooks flushed from the main ruleset', () => {
    expect(
      codes({
        ...BOOTED,
        info: 'Status: Disabled for 0 days 00:00:00           Debug: Urgent\n',
        references: 'TOKENS:\n',
        mainRules: '',
        mainNat: '',
      }),
    ).toEqual(['error pf-disabled', 'warning pf-reference-lost', 'error anchor-not-evaluated']);
    expect(codes({ ...BOOTED, mainNat: '' })).toContain('warning nat-anchor-missing');
    // Our scrub rules unreached: fragments would be filtered without their ports (issue 20).
    const scrubbing = { ...BOOTED, anchorRules: 'scrub in on bridge100 all fragment reassemble\n' };
    expect(codes(scrubbing)).not.toContain('warning scrub-anchor-missing');
    expect(codes({ ...scrubbing, mainRules: 'anchor "com.apple/*" all\n' })).toContain(
      'warning scrub-anchor-missing',
    );
    // F93's pfctl prints a scrub anchor as `anchor "P" … fragment reassemble`: reached too.
    expect(
      codes({
        ...scrubbing,
        mainRules: 'anchor "com.apple/*" all fragment reassemble\nanchor "com.apple/*" all\n',
      }),
    ).not.toContain('warning scrub-anchor-missing');
    // No NAT of ours: the missing nat-anchor is not a problem.
    expect(codes({ ...BOOTED, mainNat: '', anchorNat: '' })).toEqual([
      'info pf-enabled',
      'info anchor-attached',
    ]);
  });

  it('the stanza: written and waiting for the boot, then attached through our own anchor point', () => {
    const withBlock = `${STOCK}${STANZA_BEGIN}\nanchor "egressguard"\n${STANZA_END}\n`;
    const stanza = { pfAttach: 'stanza' };
    expect(codes({ ...BOOTED, pfConf: withBlock }, stanza)).toEqual([
      'info pf-enabled',
      'warning stanza-not-loaded',
      'info pf-conf-stanza',
    ]);
    expect(codes({ ...BOOTED, pfConf: STOCK }, stanza)).toContain('error anchor-not-evaluated');
    const booted = {
      ...BOOTED,
      mainRules: `${BOOTED.mainRules}anchor "egressguard" all\n`,
      mainNat: `${BOOTED.mainNat}nat-anchor "egressguard" all\n`,
    };
    expect(codes({ ...booted, pfConf: withBlock }, stanza)).toEqual([
      'info pf-enabled',
      'info anchor-attached',
      'info pf-conf-stanza',
    ]);
  });

  it('a pf.conf pfctl would reject, and one without the com.apple hooks', () => {
    expect(codes({ ...BOOTED, pfConf: `${STOCK}pass out on en0 nat-to (en0)\n` })).toContain(
      'error pf-conf-invalid',
    );
    expect(
      codes({ ...BOOTED, pfConf: STOCK.replace('anchor "com.apple/*"\nload', 'load') }),
    ).toContain('warning pf-conf-no-hook');
    expect(codes({ ...BOOTED, pfConf: null })).toContain('info pf-conf-unreadable');
  });
});
