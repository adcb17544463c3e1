import type { Backend } from '../backends/index.js';
import type { Runner } from '../runner/index.js';
import type { StateDir } from '../state/index.js';
import { FILES, writeGeneration, type Generation } from './generation.js';

/**
 * Records the fingerprint live state has right after egressguard loaded `generation` again (a
 * revert, a rollback, a boot restore, a repair), and returns the generation as recorded. The
 * listing of one ruleset depends on how it was loaded: replaced in place, the firewall lists a set that was
 * recreated (the stamp, whose comment carries the hash) after the ones kept, created afresh before
 * them. The fingerprint taken when the generation was first applied would then call the very same
 * artifacts edited: status said Drifted after a revert or a reboot, and `run` repaired for ever.
 */
export async function recordFingerprint(input: {
  backend: Backend;
  runner: Runner;
  state: StateDir;
  generation: Generation;
}): Promise<Generation> {
  const { generation } = input;
  const live = await input.backend
    .createInspector({ runner: input.runner, options: generation.options })
    .read(generation.artifacts);
  // Only what we just loaded, whole: anything else is for status to report, not to record.
  if (!live.present || live.hash !== generation.hash) return generation;
  if (live.fingerprint === generation.fingerprint) return generation;
  const recorded = { ...generation, fingerprint: live.fingerprint };
  writeGeneration(input.state, FILES.applied, recorded);
  return recorded;
}
