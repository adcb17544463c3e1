import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { createMacosPfHost } from '../../sim/pf/create-macos-pf-host.js';
import { createMacosHostModel } from '../../sim/pf/macos-host-model.js';
import {
  createMacosModelState,
  MACOS_MODEL_STATE_ENV,
  writeMacosModelState,
} from '../../sim/pf/macos-model-shim.js';
import { PFCTL_MODEL_STATE_ENV } from '../../sim/pf/pfctl-model-shim.js';
import { writePfctlModelState } from '../../sim/pf/pfctl-model-store.js';
import { PFCTL_ENV } from '../../src/backends/pf/pf-options.js';
import { MACOS_TOOLS_ENV, readHostFacts } from '../../src/facts/index.js';
import { REPO, runCli } from './run-cli.js';

// `doctor --json` through the built CLI on a modelled Mac: pfctl is the pfctl MODEL's shim, and
// ifconfig, netstat, route, sw_vers and uname are the macOS model's (sim/pf/macos-tools/), so
// the host's facts are gathered as on macOS. Stock pf.conf fixtures, current and legacy.
const CASE = join(REPO, 'testdata/policies/valid/macos-runner-fleet');
const FIXTURES = join(REPO, 'src/backends/pf/fixtures');
const facts = readHostFacts(join(CASE, 'facts.json'));
const dir = mkdtempSync(join(tmpdir(), 'eg-pf-doctor-'));
afterAll(() => {
  rmSync(dir, { recursive: true, force: true });
});

interface Report {
  findings: { severity: string; area: string; code: string; message: string }[];
  summary: { errors: number; warnings: number };
  pf: { enabled: boolean; attachedThrough: string | null; natThrough: string | null };
}

async function doctor(
  name: string,
  setup: {
    variant: 'current' | 'legacy';
    pfConf?: string;
    internetSharing?: boolean;
    sibling?: string;
  },
  args: readonly string[] = [],
): Promise<{ exitCode: number; stderr: string; report: Report }> {
  const stock = readFileSync(
    join(FIXTURES, setup.variant === 'current' ? 'macos-stock' : 'macos-stock-legacy', 'pf.conf'),
    'utf8',
  );
  // The host booted with the stock file; `pfConf` is what /etc/pf.conf holds now (an installer
  // edited it since: pf loads it again only at the next boot).
  const pfConf = setup.pfConf ?? stock;
  const model = createMacosPfHost({
    variant: setup.variant,
    interfaces: Object.fromEntries(facts.interfaces.map((i) => [i.name, [...i.addresses]])),
    internetSharing: setup.internetSharing ?? false,
  });
  if (setup.sibling !== undefined) model.insertSystemRules('com.apple/100.other', setup.sibling);
  const pfState = join(dir, `${name}.pf.json`);
  const macosState = join(dir, `${name}.macos.json`);
  const confFile = join(dir, `${name}.pf.conf`);
  writePfctlModelState(pfState, model.state);
  writeMacosModelState(macosState, createMacosModelState(createMacosHostModel(facts)));
  writeFileSync(confFile, pfConf);
  const result = await runCli(
    [
      'doctor',
      '--json',
      '--target',
      'pf',
      '--state-dir',
      join(dir, 'state'),
      '--pf-token-file',
      join(dir, 'token.json'),
      '--pf-conf',
      confFile,
      ...args,
    ],
    {
      env: {
        [PFCTL_ENV]: join(REPO, 'sim/pf/macos-tools/pfctl'),
        [PFCTL_MODEL_STATE_ENV]: pfState,
        [MACOS_TOOLS_ENV]: join(REPO, 'sim/pf/macos-tools'),
        [MACOS_MODEL_STATE_ENV]: macosState,
        EGRESSGUARD_ROOTNS_GUARD: '1',
      },
    },
  );
  return {
    exitCode: result.exitCode,
    stderr: result.stderr,
    report: JSON.parse(result.stdout || '{}') as Report,
  };
}

const codes = (report: Report) => report.findings.map((f) => f.code);

describe('doctor on a modelled Mac (pfctl and macOS tool models)', () => {
  it('stock current pf.conf: attached through com.apple/*, pf enabled by the Application Firewall', async () => {
    const { exitCode, stderr, report } = await doctor(
      'current',
      {
        variant: 'current',
        internetSharing: true,
      },
      [join(CASE, 'policy.yaml')],
    );
    expect(stderr).toBe('');
    expect(exitCode).toBe(0);
    expect(report.pf).toMatchObject({
      enabled: true,
      attachedThrough: 'com.apple/*',
      natThrough: 'com.apple/*',
    });
    expect(codes(report)).toEqual(['pf-enabled', 'anchor-attached', 'internet-sharing-active']);
    expect(report.findings[0]?.message).toBe(
      'pf is enabled, held by 2 references: socketfilterfw (pid 312), InternetSharing (pid 401)',
    );
  }, 300_000);

  it('stock legacy pf.conf with an earlier sibling that passes quick and an old installer stanza, duplicated', async () => {
    const legacy = readFileSync(join(FIXTURES, 'macos-stock-legacy', 'pf.conf'), 'utf8');
    const old = 'anchor "com.apple/250.egressguard"\nload anchor "vm" from "/etc/pf.anchors/vm"\n';
    const { exitCode, report } = await doctor('legacy', {
      variant: 'legacy',
      // One marked block per kind of line is how a stanza is kept; two blocks holding the same
      // lines are a duplicate.
      pfConf: `${legacy}${old}# BEGIN egressguard\n${old}# END egressguard\n# BEGIN egressguard\n${old}# END egressguard\n`,
      sibling: 'pass in quick on bridge100 all\n',
    });
    expect(exitCode).toBe(1);
    expect(codes(report)).toEqual([
      'pf-enabled',
      'anchor-attached',
      'sibling-passes-quick',
      'pf-conf-duplicate-block',
      'pf-conf-unmarked-stanza',
      'pf-conf-duplicate-load',
    ]);
    const byCode = new Map(report.findings.map((f) => [f.code, f]));
    expect(byCode.get('sibling-passes-quick')?.message).toBe(
      'anchor "com.apple/100.other" sorts before "com.apple/250.egressguard", is evaluated first, and passes quick: pass in quick on bridge100 all flags S/SA keep state',
    );
    expect(byCode.get('pf-conf-duplicate-load')?.message).toMatch(
      /loads anchor "vm" 3 times \(lines \d+, \d+, \d+\): pfctl fails with "Resource busy"/,
    );
  }, 300_000);
});
