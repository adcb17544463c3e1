import type { Artifact, Backend, PlanResult, BackendOptions } from '../backends/index.js';
import type { Runner } from '../runner/index.js';
import type { StateDir } from '../state/index.js';
import { FILES, readGeneration, type Generation } from './generation.js';

/**
 * What `apply` would change. The backend diffs live state against the desired artifacts; the
 * stamp alone hides two changes apply makes anyway, which only the recorded generation reveals:
 * a table edited in place since it was applied (same stamp, another fingerprint), and a table
 * carrying this very hash that this state directory did not record.
 */
export async function planGeneration(input: {
  backend: Backend;
  runner: Runner;
  state: StateDir;
  options: BackendOptions;
  hash: string;
  artifacts: readonly Artifact[];
}): Promise<PlanResult> {
  const context = { runner: input.runner, options: input.options };
  let applied: Generation | undefined;
  let unreadable = false;
  try {
    applied = readGeneration(input.state, FILES.applied);
  } catch {
    unreadable = true;
  }
  const [plan, live] = await Promise.all([
    input.backend
      .createApplier(context)
      .plan(input.artifacts, applied === undefined ? {} : { applied: applied.artifacts }),
    input.backend.createInspector(context).read(input.artifacts),
  ]);
  if (!live.present || live.hash !== input.hash) return plan;
  const table = input.backend.describeScope(input.options);
  let change: string | undefined;
  if (applied?.hash === input.hash) {
    if (applied.fingerprint !== live.fingerprint) {
      change = `~ ${table}: edited since generation ${applied.number} was applied (same hash ${input.hash.slice(0, 12)}): apply will replace it`;
    }
  } else {
    const recorded =
      applied !== undefined
        ? `generation ${applied.number} recorded hash ${applied.hash.slice(0, 12)}`
        : unreadable
          ? 'the recorded state is unreadable'
          : 'nothing is recorded as applied';
    change = `~ ${table}: carries this hash, but ${recorded}: apply will load it again and record it`;
  }
  return change === undefined ? plan : { ...plan, changes: [change, ...plan.changes] };
}
