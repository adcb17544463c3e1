import { execFileSync } from 'node:child_process';
import { chmodSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import {
  createConfirmRevertDaemon,
  renderLaunchDaemonPlist,
} from '../../src/backends/pf/launchd-plist.js';
import {
  createMacosModelState,
  MACOS_MODEL_STATE_ENV,
  readMacosModelState,
  runMacosModelShim,
  writeMacosModelState,
} from './macos-model-shim.js';
import { LAUNCHCTL_MODEL_SHIM } from './macos-model-tools.js';

// The macOS tool shims (sim/pf/macos-tools/launchctl …) act on one model state file, from any
// process, as launchd holds one set of jobs for every launchctl.
const dirs: string[] = [];
afterEach(() => {
  for (const d of dirs.splice(0)) rmSync(d, { recursive: true, force: true });
});

function setup() {
  const dir = mkdtempSync(join(tmpdir(), 'eg-macos-shim-'));
  dirs.push(dir);
  const state = join(dir, 'macos.json');
  writeMacosModelState(state, createMacosModelState());
  const plist = join(dir, 'job.plist');
  writeFileSync(
    plist,
    renderLaunchDaemonPlist(
      createConfirmRevertDaemon({
        label: 'dev.test.job',
        programArguments: ['/usr/bin/true'],
        delaySeconds: 5,
        deadline: Date.UTC(2026, 4, 9, 12, 0, 5),
        scheduledAt: Date.UTC(2026, 4, 9, 12, 0, 0),
        timeZone: 'UTC',
      }),
    ),
    { mode: 0o644 },
  );
  return { dir, state, plist };
}

describe('the macOS model shims', () => {
  it('says which variable names its state when none is given', () => {
    const result = runMacosModelShim('launchctl', ['bootstrap', 'system', '/x.plist'], {});
    expect(result.exitCode).toBe(2);
    expect(result.stderr).toBe(
      `launchctl-model: ${MACOS_MODEL_STATE_ENV} is not set: it names the model state file this shim acts on\n`,
    );
  });

  it('loads a plist from the filesystem, refuses it twice and when others can write it', () => {
    const { state, plist } = setup();
    const env = { [MACOS_MODEL_STATE_ENV]: state };
    expect(runMacosModelShim('launchctl', ['bootstrap', 'system', plist], env).exitCode).toBe(0);
    const again = runMacosModelShim('launchctl', ['bootstrap', 'system', plist], env);
    expect(again).toEqual({
      exitCode: 5,
      stdout: '',
      stderr: 'Bootstrap failed: 5: Input/output error\n',
    });
    expect(Object.keys(readMacosModelState(state).launchd.jobs)).toEqual(['dev.test.job']);
    expect(runMacosModelShim('launchctl', ['bootout', 'system/dev.test.job'], env).exitCode).toBe(
      0,
    );
    chmodSync(plist, 0o666);
    expect(runMacosModelShim('launchctl', ['bootstrap', 'system', plist], env).exitCode).toBe(5);
    expect(runMacosModelShim('ifconfig', [], env)).toMatchObject({ exitCode: 127 });
  });

  it('runs as an executable named after the tool (the simulator build)', () => {
    const { state, plist } = setup();
    execFileSync(LAUNCHCTL_MODEL_SHIM, ['bootstrap', 'system', plist], {
      env: { ...process.env, [MACOS_MODEL_STATE_ENV]: state },
    });
    expect(readMacosModelState(state).launchd.log).toEqual([
      { argv: ['bootstrap', 'system', plist], exitCode: 0 },
    ]);
  });
});
