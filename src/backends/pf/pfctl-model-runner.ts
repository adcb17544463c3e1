import { EgressguardError } from '../../core/index.js';
import { Faults, type Invocation, type Runner } from '../../runner/index.js';
import type { PfctlModel } from './pfctl-model.js';

/**
 * A runner whose `pfctl` is the pfctl MODEL in this process (pfctl-model.ts), for tests of the
 * applier and inspector: pf does not run on Linux. It behaves as the real runner does for the
 * command lines it gets (records each, throws `command-failed` on a non-zero exit unless
 * allowed); any other program is refused, so a test sees every command the backend runs.
 */
export function createPfctlModelRunner(
  model: PfctlModel,
  options: { readonly faults?: Faults; readonly pid?: number } = {},
): Runner {
  const invocations: Invocation[] = [];
  const faults = options.faults ?? new Faults();
  const runner: Runner = {
    netns: undefined,
    faults,
    invocations,
    run(argv, runOptions) {
      const [program, ...args] = argv;
      if (program?.split('/').pop() !== 'pfctl') {
        return Promise.reject(
          new EgressguardError(
            'usage',
            `The pfctl model runner runs pfctl only, not "${argv.join(' ')}"`,
          ),
        );
      }
      const result = model.run(args, {
        ...(runOptions.input === undefined ? {} : { stdin: runOptions.input }),
        pid: options.pid ?? 4242,
      });
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
