import type { LiveProblem } from './backend.js';

/** A live problem in words: what it is, and the tunnel it waits for. */
export function describeLiveProblem(problem: LiveProblem): string {
  if (problem.waitingFor !== null)
    return `${problem.what} (waiting for tunnel ${problem.waitingFor})`;
  return problem.until === undefined
    ? problem.what
    : `${problem.what} (waiting for ${problem.until})`;
}
