import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { execa } from 'execa';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { createMacosPfHost } from '../../sim/pf/create-macos-pf-host.js';
import { PfctlModel } from '../../sim/pf/pfctl-model.js';
import { PFCTL_MODEL_STATE_ENV } from '../../sim/pf/pfctl-model-shim.js';
import { readPfctlModelState, writePfctlModelState } from '../../sim/pf/pfctl-model-store.js';
import { PFCTL_ENV } from '../../src/backends/pf/pf-options.js';
import { LAUNCHCTL_ENV } from '../../src/backends/pf/launchd-confirm-timer.js';
import { LaunchctlModel } from '../../sim/pf/launchctl-model.js';
import { readLaunchDaemonPlist } from '../../src/backends/pf/launchd-plist.js';
import {
  createMacosModelState,
  MACOS_MODEL_STATE_ENV,
  readMacosModelState,
  updateMacosModelState,
  writeMacosModelState,
} from '../../sim/pf/macos-model-shim.js';
import { REPO, runCli } from './run-cli.js';

// `plan`/`apply`/`status`/`remove --json` through the built CLI on a modelled Mac: the CLI runs
// the pfctl MODEL's shim (sim/pf/macos-tools/pfctl) in place of /sbin/pfctl, named by
// EGRESSGUARD_PFCTL, on a model state file (a stock macOS host after boot). The root-namespace
// guard stays on: the shim's command lines touch no firewall of this machine.
const CASE = join(REPO, 'testdata/policies/valid/macos-runner-fleet');
const dir = mkdtempSync(join(tmpdir(), 'eg-pf-cli-'));
afterAll(() => {
  rmSync(dir, { recursive: true, force: true });
});
const modelState = join(dir, 'model.json');
writePfctlModelState(
  modelState,
  createMacosPfHost({
    interfaces: { lo0: ['127.0.0.1/8'], en0: ['198.51.100.20/24'], bridge100: ['192.168.64.1/22'] },
  }).state,
);
const macosState = join(dir, 'macos.json');
writeMacosModelState(macosState, createMacosModelState());
const env = {
  [PFCTL_ENV]: join(REPO, 'sim/pf/macos-tools/pfctl'),
  [PFCTL_MODEL_STATE_ENV]: modelState,
  [LAUNCHCTL_ENV]: join(REPO, 'sim/pf/macos-tools/launchctl'),
  [MACOS_MODEL_STATE_ENV]: macosState,
};
const common = [
  '--state-dir',
  join(dir, 'state'),
  '--pf-token-file',
  join(dir, 'pf-token.json'),
  '--json',
];
const policy = [join(CASE, 'policy.yaml'), '--facts', join(CASE, 'facts.json')];

async function cli(args: readonly string[]) {
  const result = await runCli([...args, ...common], { env });
  return { ...result, json: JSON.parse(result.stdout || '{}') as Record<string, unknown> };
}

describe('the CLI on a modelled Mac (pfctl model)', () => {
  it('plan, apply, status, apply again, remove print what they would on a Mac', async () => {
    const plan = await cli(['plan', ...policy]);
    expect(plan.stderr).toBe('');
    expect(plan.exitCode).toBe(0);
    expect(plan.json).toMatchObject({
      backend: 'pf',
      changes: [
        '+ pf anchor "com.apple/250.egressguard" (5 tables, 1 nat, 65 filter rules)',
        '+ pf enable reference of our own (pfctl -E)',
      ],
      problems: [],
    });
    const hash = plan.json['hash'] as string;
    expect(hash).toMatch(/^[0-9a-f]{64}$/);

    const apply = await cli(['apply', ...policy]);
    expect(apply.exitCode, apply.stdout + apply.stderr).toBe(0);
    expect(apply.json).toMatchObject({ hash, changed: true });

    const status = await cli(['status']);
    expect(status.exitCode).toBe(0);
    expect(status.json).toMatchObject({
      condition: 'InSync',
      appliedHash: hash,
      liveHash: hash,
      live: { present: true, missing: [], unexpected: [], collisions: [] },
    });

    // The model host now holds our anchor, our reference and the label-carried hash.
    const state = readPfctlModelState(modelState);
    expect(Object.keys(state.anchors)).toContain('com.apple/250.egressguard');
    expect(state.tokens.map((t) => t.name)).toEqual(['socketfilterfw', 'pfctl']);
    // The boot's own `pfctl -f /etc/pf.conf` (launchd, pid 1) aside, no forbidden form ran.
    expect(state.log.filter((e) => e.pid !== 1).flatMap((e) => e.forbidden)).toEqual([]);

    const again = await cli(['apply', ...policy]);
    expect(again.exitCode).toBe(0);
    expect(again.json).toMatchObject({ hash, changed: false });
    expect((await cli(['plan', ...policy])).json).toMatchObject({ changes: [], problems: [] });

    const remove = await cli(['remove']);
    expect(remove.exitCode, remove.stderr).toBe(0);
    expect(JSON.stringify(remove.json)).toContain('pf anchor \\"com.apple/250.egressguard\\"');
    const after = readPfctlModelState(modelState);
    expect(after.tokens.map((t) => t.name)).toEqual(['socketfilterfw']);
    expect(after.enabled).toBe(true);
    const model = new PfctlModel(after);
    expect(model.run(['-a', 'com.apple/250.egressguard', '-sr']).stdout).toBe('');
    expect(model.run(['-a', 'com.apple/250.egressguard', '-sn']).stdout).toBe('');
    const gone = await cli(['status']);
    expect(gone.json).toMatchObject({ live: { present: false } });
    // Every pfctl call is a process of its own (the shim), on a shared, loaded machine.
  }, 600_000);

  it('apply --confirm-within schedules a LaunchDaemon, confirm boots it out, an unconfirmed one fired reverts', async () => {
    const first = await cli(['apply', ...policy]);
    expect(first.exitCode, first.stderr).toBe(0);
    const changed = join(dir, 'changed.yaml');
    writeFileSync(
      changed,
      readFileSync(join(CASE, 'policy.yaml'), 'utf8').replace('ports: [4000]', 'ports: [4001]'),
    );
    const other = [changed, '--facts', join(CASE, 'facts.json')];
    const pending = await cli(['apply', ...other, '--confirm-within', '30s']);
    expect(pending.exitCode, pending.stderr).toBe(0);
    expect(pending.json['confirmBy']).toEqual(expect.any(String));
    const labels = () => Object.keys(readMacosModelState(macosState).launchd.jobs);
    expect(labels()).toHaveLength(1);
    const job = Object.values(readMacosModelState(macosState).launchd.jobs)[0];
    // The plist launchd read names the revert of this generation, on the same target.
    expect(readLaunchDaemonPlist(job?.plist ?? '')).toMatchObject({ startInterval: 30 });
    expect(job?.programArguments.slice(2)).toEqual([
      'restore',
      '--unconfirmed',
      String(pending.json['generation']),
      '--state-dir',
      join(dir, 'state'),
      '--target',
      'pf',
      '--pf-token-file',
      join(dir, 'pf-token.json'),
      '--pf-conf',
      '/etc/pf.conf',
    ]);
    const confirmed = await cli(['confirm']);
    expect(confirmed.exitCode, confirmed.stderr).toBe(0);
    expect(confirmed.json).toEqual({ confirmed: pending.json['generation'] });
    expect(labels()).toEqual([]);

    // Back to the first policy, unconfirmed; its timer fires: the confirmed generation returns.
    const unconfirmed = await cli(['apply', ...policy, '--confirm-within', '30s']);
    expect(unconfirmed.exitCode, unconfirmed.stderr).toBe(0);
    const [label] = labels();
    const argv = updateMacosModelState(macosState, (state) =>
      new LaunchctlModel(state.launchd).fire(label ?? ''),
    );
    if (argv === null) throw new Error('no LaunchDaemon to fire');
    const [node = 'node', ...args] = argv;
    const fired = await execa(node, args, { env: { NO_COLOR: '1', ...env }, reject: false });
    expect(fired.exitCode, fired.stderr).toBe(0);
    expect(fired.stdout).toContain(
      `reverted generation ${String(unconfirmed.json['generation'])}: generation ${String(pending.json['generation'])} is live again`,
    );
    const status = await cli(['status']);
    expect(status.json).toMatchObject({ condition: 'InSync', liveHash: pending.json['hash'] });
  }, 600_000);

  it('a failed apply (the re-converge) is reported by status until an apply goes in', async () => {
    const first = await cli(['apply', ...policy]);
    expect(first.exitCode, first.stderr).toBe(0);
    const missing = join(dir, 'no-such-facts.json');
    const failed = await cli(['apply', join(CASE, 'policy.yaml'), '--facts', missing]);
    expect(failed.exitCode).not.toBe(0);
    const status = await cli(['status']);
    // Live state is still the applied generation (exit 0), but the last apply did not go in.
    expect(status.exitCode).toBe(0);
    expect(status.json).toMatchObject({
      condition: 'InSync',
      failure: { operation: 'apply', code: expect.any(String) as unknown },
    });
    expect((status.json['failure'] as { message: string }).message).toContain(missing);
    // The next re-converge, a no-op (nothing changed on the host), clears it.
    const again = await cli(['apply', ...policy]);
    expect(again.exitCode, again.stderr).toBe(0);
    expect(again.json).toMatchObject({ changed: false });
    const cleared = await cli(['status']);
    expect(cleared.exitCode).toBe(0);
    expect(cleared.json).toMatchObject({ condition: 'InSync', failure: null });
  }, 600_000);

  it('--pf-attach reaches the pf backend from the command line: plan shows the stanza, a bad mode is refused', async () => {
    const conf = join(dir, 'legacy-pf.conf');
    const legacy = readFileSync(
      join(REPO, 'src/backends/pf/fixtures/macos-stock-legacy/pf.conf'),
      'utf8',
    );
    writeFileSync(conf, legacy);
    const plan = await cli(['plan', ...policy, '--pf-attach', 'stanza', '--pf-conf', conf]);
    expect(plan.exitCode, plan.stderr).toBe(0);
    expect(plan.json['changes']).toContain(
      // scrub-anchor, nat-anchor and anchor: one block each, among the lines of their kind.
      `~ "${conf}": 3 egressguard blocks attaching anchor "egressguard" from the next boot`,
    );
    expect(readFileSync(conf, 'utf8')).toBe(legacy); // plan writes nothing
    const bad = await runCli(['plan', ...policy, '--pf-attach', 'conf', ...common], { env });
    expect(bad.exitCode).toBe(2);
    expect(JSON.parse(bad.stdout)).toMatchObject({
      error: { code: 'usage', message: 'Cannot use --pf-attach "conf"' },
    });
  }, 600_000);

  it('selftest --backend pf runs its checks through the shim; the model sees no real packet', async () => {
    const result = await runCli(['selftest', '--backend', 'pf', '--json'], { env });
    const report = JSON.parse(result.stdout) as {
      checks: { name: string; ok: boolean; cannotTell?: string }[];
      confirmed: string[];
      cannotTell: { name: string; reason: string }[];
    };
    // The probe datagram goes to this machine's loopback, not through the model: only the
    // counter check fails, which is what the model can and cannot stand in for, and the
    // lockdown check has no state of the probe's to kill, which it says it cannot tell.
    expect(result.exitCode).toBe(1);
    expect(
      report.checks.filter((c) => !c.ok && c.cannotTell === undefined).map((c) => c.name),
    ).toEqual(['counters move']);
    expect(report.cannotTell.map((c) => c.name)).toContain('lockdown kills states');
    expect(report.confirmed.length).toBe(report.checks.filter((c) => c.ok).length);
  }, 600_000);

  it('compile and plan say when a tunnel class is compiled kill-switch-only, and the model takes it', async () => {
    // The VPN runner with its VPN down: no utun in the facts, none on the modelled host.
    const vpn = join(REPO, 'testdata/policies/valid/macos-vpn-runner');
    const facts = JSON.parse(readFileSync(join(vpn, 'facts.json'), 'utf8')) as {
      interfaces: { name: string }[];
    };
    const down = join(dir, 'vpn-down-facts.json');
    writeFileSync(
      down,
      JSON.stringify({ ...facts, interfaces: facts.interfaces.filter((i) => i.name !== 'utun3') }),
    );
    const args = [join(vpn, 'policy.yaml'), '--facts', down];
    const warning =
      'warning: class "vpn-vm" is compiled kill-switch-only: its tunnel "vpn" matches no interface';
    const compiled = await runCli(['compile', ...args]);
    expect(compiled.exitCode, compiled.stderr).toBe(0);
    expect(compiled.stderr).toContain(warning);
    expect(compiled.stdout).not.toMatch(/^pass .*route-to/m);
    expect(compiled.stdout).toContain(
      'block drop in quick on bridge100 inet all label "vpn-vm/kill-switch"',
    );
    // plan validates it with `pfctl -n` on the model, which refuses an unknown route-to interface.
    const plan = await cli(['plan', ...args]);
    expect(plan.exitCode, plan.stdout + plan.stderr).toBe(0);
    expect(plan.stderr).toContain(warning);
    expect(plan.json).toMatchObject({ backend: 'pf', problems: [] });
  }, 600_000);
});
