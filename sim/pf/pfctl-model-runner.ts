import { EgressguardError } from '../../src/core/index.js';
import { Faults, type Invocation, type Runner } from '../../src/runner/index.js';
import { runMacosModel, type MacosModelState } from './macos-model-shim.js';
import type { PfctlModel } from './pfctl-model.js';

/**
 * A runner whose `pfctl` is the pfctl MODEL in this process (pfctl-model.ts), and whose macOS
 * tools (launchctl) are the macOS model's when `macos` is given, for tests of the applier,
 * inspector and confirm timer: pf does not run on Linux. It behaves as the real runner does for
 * the command lines it gets (records each, throws `command-failed` on a non-zero exit unless
 * allowed); any other program is refused, so a test sees every command the backend runs.
 */
export function createPfctlModelRunner(
  model: PfctlModel,
  options: {
    readonly faults?: Faults;
    readonly pid?: number;
    readonly macos?: MacosModelState;
  } = {},
): Runner {
  const invocations: Invocation[] = [];
  const faults = options.faults ?? new Faults();
  const runner: Runner = {
    netns: undefined,
    faults,
    invocations,
    run(argv, runOptions) {
      const [program, ...args] = argv;
      const tool = program?.split('/').pop() ?? '';
      if (tool !== 'pfctl' && options.macos === undefined) {
        return Promise.reject(
          new EgressguardError(
            'usage',
            `The pfctl model runner runs pfctl only, not "${argv.join(' ')}"`,
          ),
        );
      }
      const result =
        tool === 'pfctl'
          ? model.run(args, {
              ...(runOptions.input === undefined ? {} : { stdin: runOptions.input }),
              pid: options.pid ?? 4242,
            })
          : runMacosModel(options.macos as MacosModelState, tool, args);
      invocations.push({
        argv: [...argv],
        netns: null,
        effect: runOptions.effect,
        exitCode: result.exitCode,
        durationMs: 0,
      });
      if (result.exitCode !== 0 && runOptions.allowFailure !== true) {
        return Promise.reject(
          new EgressguardError(
            'command-failed',
            `Command "${argv.join(' ')}" failed with exit code ${result.exitCode}: ${result.stderr.trim() || 'no output'}`,
            { cause: result },
          ),
        );
      }
      return Promise.resolve(result);
    },
    start() {
      throw new Error('The pfctl model runner runs no long-lived commands');
    },
    startBinary() {
      throw new Error('The pfctl model runner runs no long-lived commands');
    },
    inNamespace() {
      return runner;
    },
  };
  return runner;
}
