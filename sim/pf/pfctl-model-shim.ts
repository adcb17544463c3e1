import { readFileSync } from 'node:fs';
import { PfctlModel, type PfctlResult } from './pfctl-model.js';
import { updatePfctlModelState } from './pfctl-model-store.js';

/** The environment variable naming the model state file the shim acts on. */
export const PFCTL_MODEL_STATE_ENV = 'EGRESSGUARD_PFCTL_MODEL_STATE';

/**
 * The body of the `pfctl` shim (sim/pf/macos-tools/pfctl): one pfctl command line run against
 * the pfctl MODEL whose state file `EGRESSGUARD_PFCTL_MODEL_STATE` names, so a runner can exec it
 * in place of /sbin/pfctl. Files the model does not hold itself (an anchor file egressguard wrote)
 * are read from the real filesystem; `-f -` reads stdin.
 */
export function runPfctlModelShim(
  argv: readonly string[],
  io: {
    env: Readonly<Record<string, string | undefined>>;
    readStdin: () => string;
    pid: number;
  },
): PfctlResult {
  const path = io.env[PFCTL_MODEL_STATE_ENV];
  if (path === undefined || path === '') {
    return {
      exitCode: 2,
      stdout: '',
      stderr: `pfctl-model: ${PFCTL_MODEL_STATE_ENV} is not set: it names the model state file this pfctl shim acts on\n`,
    };
  }
  const readsStdin = argv.some((a, i) => a === '-' && /^-[a-zA-Z]*f$/.test(argv[i - 1] ?? ''));
  const stdin = readsStdin ? io.readStdin() : undefined;
  return updatePfctlModelState(path, (state) =>
    new PfctlModel(state).run(argv, {
      pid: io.pid,
      ...(stdin === undefined ? {} : { stdin }),
      readFile: (file) => {
        try {
          return readFileSync(file, 'utf8');
        } catch {
          return undefined;
        }
      },
    }),
  );
}
