import { readFileSync, statSync } from 'node:fs';
import {
  LaunchctlModel,
  type CommandOutcome,
  type LaunchctlModelState,
} from './launchctl-model.js';
import { runMacosHostTool, type MacosHostModel } from './macos-host-model.js';
import {
  readModelStateFile,
  updateModelStateFile,
  writeModelStateFile,
} from './pfctl-model-store.js';

/** The environment variable naming the macOS model state file the shims act on. */
export const MACOS_MODEL_STATE_ENV = 'EGRESSGUARD_MACOS_MODEL_STATE';

/**
 * The state of a modelled Mac beyond pf (pf is the pfctl model's own file): launchd's loaded
 * jobs, and what the host tools facts are read with print. A MODEL, for the shims under
 * sim/pf/macos-tools/ that stand in for macOS tools.
 */
export interface MacosModelState {
  readonly version: 1;
  readonly launchd: LaunchctlModelState;
  /** Absent: the host tools are not modelled (`ifconfig` … exit 127). */
  readonly host?: MacosHostModel;
}

export function createMacosModelState(host?: MacosHostModel): MacosModelState {
  return { version: 1, launchd: { jobs: {}, log: [] }, ...(host === undefined ? {} : { host }) };
}

export function readMacosModelState(path: string): MacosModelState {
  return readModelStateFile(path, {
    model: 'macOS model',
    field: 'launchd',
    hint: `create it with writeMacosModelState, or point ${MACOS_MODEL_STATE_ENV} at one`,
  }) as MacosModelState;
}

export function writeMacosModelState(path: string, state: MacosModelState): void {
  writeModelStateFile(path, state);
}

/** Runs `change` on the model state file under its lock (a test firing a timer, say). */
export function updateMacosModelState<T>(path: string, change: (state: MacosModelState) => T): T {
  return updateModelStateFile(path, readMacosModelState, change);
}

/**
 * The body of the macOS tool shims (sim/pf/bin/macos-model.mjs, linked as sim/pf/macos-tools/
 * launchctl …): one command line of `tool` run against the model state file that
 * `EGRESSGUARD_MACOS_MODEL_STATE` names. Files (a plist) are read from the real filesystem.
 */
export function runMacosModelShim(
  tool: string,
  argv: readonly string[],
  env: Readonly<Record<string, string | undefined>>,
): CommandOutcome {
  const path = env[MACOS_MODEL_STATE_ENV];
  if (path === undefined || path === '') {
    return {
      exitCode: 2,
      stdout: '',
      stderr: `${tool}-model: ${MACOS_MODEL_STATE_ENV} is not set: it names the model state file this shim acts on\n`,
    };
  }
  return updateMacosModelState(path, (state) => runMacosModel(state, tool, argv));
}

/** One command line of a modelled macOS tool against `state` (in process or from a shim). */
export function runMacosModel(
  state: MacosModelState,
  tool: string,
  argv: readonly string[],
): CommandOutcome {
  switch (tool) {
    case 'launchctl':
      return new LaunchctlModel(state.launchd).run(argv, { readFile: readWithMode });
    default: {
      const hosted =
        state.host === undefined ? undefined : runMacosHostTool(state.host, tool, argv);
      return hosted ?? { exitCode: 127, stdout: '', stderr: `${tool}: not modelled\n` };
    }
  }
}

function readWithMode(path: string): { text: string; mode: number } | undefined {
  try {
    return { text: readFileSync(path, 'utf8'), mode: statSync(path).mode & 0o777 };
  } catch {
    return undefined;
  }
}
