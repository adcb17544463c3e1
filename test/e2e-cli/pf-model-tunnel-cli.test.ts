import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { execa } from 'execa';
import { afterAll, describe, expect, it } from 'vitest';
import { createMacosPfHost } from '../../sim/pf/create-macos-pf-host.js';
import { readLaunchDaemonPlist } from '../../src/backends/pf/launchd-plist.js';
import { createMacosHostModel, type MacosHostModel } from '../../sim/pf/macos-host-model.js';
import {
  createMacosModelState,
  MACOS_MODEL_STATE_ENV,
  readMacosModelState,
  writeMacosModelState,
} from '../../sim/pf/macos-model-shim.js';
import { PfctlModel } from '../../sim/pf/pfctl-model.js';
import { PFCTL_MODEL_STATE_ENV } from '../../sim/pf/pfctl-model-shim.js';
import { readPfctlModelState, writePfctlModelState } from '../../sim/pf/pfctl-model-store.js';
import { PFCTL_ENV } from '../../src/backends/pf/pf-options.js';
import { MACOS_TOOLS_ENV, readHostFacts } from '../../src/facts/index.js';
import { REPO, runCli } from './run-cli.js';

// The LaunchDaemons' own command lines (`units`) through the built CLI on a modelled Mac whose
// VPN reconnects as another utun: pfctl is the pfctl MODEL's shim, ifconfig the macOS host
// model's (sim/pf/macos-tools/), both state files edited between the runs as the Mac would be.
const CASE = join(REPO, 'testdata/policies/valid/macos-vpn-runner');
const facts = readHostFacts(join(CASE, 'facts.json'));
const dir = mkdtempSync(join(tmpdir(), 'eg-pf-tunnel-cli-'));
afterAll(() => {
  rmSync(dir, { recursive: true, force: true });
});
const pfState = join(dir, 'pf.json');
const macosState = join(dir, 'macos.json');
writePfctlModelState(
  pfState,
  createMacosPfHost({
    interfaces: Object.fromEntries(facts.interfaces.map((i) => [i.name, [...i.addresses]])),
  }).state,
);
writeMacosModelState(macosState, createMacosModelState(createMacosHostModel(facts)));
const env = {
  [PFCTL_ENV]: join(REPO, 'sim/pf/macos-tools/pfctl'),
  [PFCTL_MODEL_STATE_ENV]: pfState,
  [MACOS_MODEL_STATE_ENV]: macosState,
  [MACOS_TOOLS_ENV]: join(REPO, 'sim/pf/macos-tools'),
};
const stateDir = join(dir, 'state');
// Not the default /var/lib/egressguard of the units: this machine's own.
const own = ['--pf-token-file', join(dir, 'pf-token.json')];

/** The Mac changes: pf (the pfctl model) and ifconfig (the macOS host model) at once. */
function setInterface(name: string, iface: Omit<MacosHostModel['interfaces'][number], 'name'>) {
  const pf = readPfctlModelState(pfState);
  new PfctlModel(pf).setInterface(name, [...iface.addresses]);
  writePfctlModelState(pfState, pf);
  const macos = readMacosModelState(macosState);
  const host = macos.host ?? createMacosHostModel({ interfaces: [], routes: [] });
  writeMacosModelState(macosState, {
    ...macos,
    host: {
      ...host,
      interfaces: [...host.interfaces.filter((i) => i.name !== name), { name, ...iface }],
    },
  });
}

function reboot(): void {
  const pf = readPfctlModelState(pfState);
  const model = new PfctlModel(pf);
  model.reboot();
  model.run(['-f', '/etc/pf.conf'], { pid: 1, processName: 'launchd' });
  writePfctlModelState(pfState, pf);
}

describe('the LaunchDaemons on a Mac whose VPN comes back as another utun (models)', () => {
  it('the re-converge follows the utun, status shows where it went, boot falls back to the lockdown', async () => {
    const out = join(dir, 'daemons');
    const units = await runCli(
      [
        'units',
        '--target',
        'pf',
        '--policy',
        join(CASE, 'policy.yaml'),
        '--state-dir',
        stateDir,
        '--out',
        out,
      ],
      { env },
    );
    expect(units.exitCode, units.stderr).toBe(0);
    const argvOf = (label: string): string[] => [
      ...readLaunchDaemonPlist(readFileSync(join(out, `${label}.plist`), 'utf8')).programArguments,
      ...own,
    ];
    const run = async (label: string) => {
      const [node = 'node', ...args] = argvOf(label);
      const result = await execa(node, args, { env: { NO_COLOR: '1', ...env }, reject: false });
      return { exitCode: result.exitCode ?? -1, stdout: result.stdout, stderr: result.stderr };
    };
    const status = () => runCli(['status', '--state-dir', stateDir, ...own], { env });

    const first = await run('dev.egressguard.reconverge');
    expect(first.exitCode, first.stderr).toBe(0);
    const up = await status();
    expect(up.exitCode, up.stdout).toBe(0);
    expect(up.stdout).toContain(
      'tunnel utun3 (vpn): up, 10.8.0.2/32 2001:db8:8::2/128 --> 10.8.0.1',
    );

    // The VPN reconnects as utun5; another VPN takes utun3.
    setInterface('utun5', {
      up: true,
      addresses: ['10.8.0.2/32', '2001:db8:8::2/128'],
      peer: '10.8.0.1',
    });
    setInterface('utun3', { up: true, addresses: ['172.31.0.2/32'], peer: '172.31.0.1' });
    const moved = await status();
    expect(moved.exitCode).toBe(3);
    expect(moved.stdout).toContain('Drifted');
    expect(moved.stdout).toContain(
      'tunnel vpn is on "utun5" now, but the live state names "utun3"',
    );
    expect(moved.stdout).toContain(
      'tunnel utun3 (vpn): up, 172.31.0.2/32 --> 172.31.0.1; it matches utun5 now',
    );

    const again = await run('dev.egressguard.reconverge');
    expect(again.exitCode, again.stderr).toBe(0);
    const followed = await status();
    expect(followed.exitCode, followed.stdout).toBe(0);
    expect(followed.stdout).toContain('tunnel utun5 (vpn): up');

    // A reboot, and the VPN comes back as utun7: boot loads the lockdown and says why.
    reboot();
    setInterface('utun7', {
      up: true,
      addresses: ['10.8.0.2/32', '2001:db8:8::2/128'],
      peer: '10.8.0.1',
    });
    setInterface('utun5', { up: true, addresses: ['172.30.0.2/32'], peer: '172.30.0.1' });
    const restore = await run('dev.egressguard.restore');
    expect(restore.exitCode, restore.stderr).toBe(0);
    expect(restore.stdout).toMatch(
      /^lockdown: Cannot load generation \d+: tunnel "vpn" \(peer 10\.8\.0\.1\) was "utun5" when it was applied, and is "utun7" now$/,
    );
    const boot = await status();
    expect(boot.exitCode).toBe(3);
    expect(boot.stdout).toMatch(
      /the last restore \(.+\): the class lockdown was loaded instead: Cannot load generation/,
    );

    // The re-converge runs at load: the class goes into utun7, and the record is gone.
    const rearm = await run('dev.egressguard.reconverge');
    expect(rearm.exitCode, rearm.stderr).toBe(0);
    const done = await status();
    expect(done.exitCode, done.stdout).toBe(0);
    expect(done.stdout).toContain('tunnel utun7 (vpn): up');
    expect(done.stdout).not.toContain('the last');
  }, 600_000);
});
