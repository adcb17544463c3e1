import type { LiveProblem } from './backend.js';

/** A live problem in words: what it is, and the tunnel it waits for. */
export function describeLiveProblem(problem: LiveProblem): string {
  return problem.waitingFor === null
    ? problem.what
    : `${problem.what} (waiting for tunnel ${problem.waitingFor})`;
}
