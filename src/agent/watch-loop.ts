import { backoffDelay, type BackoffPolicy } from '../fleet/index.js';
import type { ResidentPass } from '../apply/index.js';
import type { AgentClock } from './agent-clock.js';
import type { AgentMetrics } from './agent-metrics.js';
import type { HostEngine, PreparedGeneration } from './host-engine.js';

/** One round's signal: aborted by the agent's stop or by a wakeup from the watchers. */
export interface Round {
  readonly signal: AbortSignal;
  wake(): void;
  /** Takes its listener off the stop signal. */
  end(): void;
}

/**
 * A controller per round, whose listener on the long-lived stop signal is removed at the round's
 * end. Not AbortSignal.any([stop, wakeup]) each round: on Node 20 every combined signal stays
 * among the stop signal's dependants (nodejs/node#55351, #54614), one more per round for ever.
 */
export function startRound(stop: AbortSignal): Round {
  const controller = new AbortController();
  const abort = (): void => {
    controller.abort();
  };
  if (stop.aborted) abort();
  else stop.addEventListener('abort', abort, { once: true });
  return {
    signal: controller.signal,
    wake: abort,
    end: () => {
      stop.removeEventListener('abort', abort);
    },
  };
}

/**
 * Runs the engine's watchers until `signal` aborts, and starts them again with backoff when they
 * fail (a monitor died): without them drift is repaired only at each round, minutes apart.
 */
export async function keepWatching<P extends PreparedGeneration>(input: {
  readonly engine: HostEngine<P>;
  readonly signal: AbortSignal;
  readonly clock: AgentClock;
  readonly random: () => number;
  readonly backoff: BackoffPolicy;
  readonly log: (line: string) => void;
  readonly metrics?: AgentMetrics;
  readonly onPass: (pass: ResidentPass) => void;
}): Promise<void> {
  const { engine, signal, clock, backoff, log } = input;
  if (engine.watch === undefined) return;
  let failures = 0;
  let restarts = 0;
  while (!signal.aborted) {
    const started = clock.now();
    try {
      // Resolves when stopped, or at once when the host's backend cannot watch.
      await engine.watch({ signal, log, onPass: input.onPass });
      return;
    } catch (error) {
      if (isAborted(signal)) return;
      // Watchers that ran longer than the cap were healthy: count failures afresh.
      if (clock.now() - started >= backoff.capMs) failures = 0;
      failures += 1;
      restarts += 1;
      const delay = backoffDelay(failures, backoff, input.random);
      input.metrics?.recordWatcherRestart();
      log(
        `warning: the watchers stopped: ${(error as Error).message}; starting them again in ${(delay / 1000).toFixed(1)} s (restart ${restarts}); drift is repaired at each round meanwhile`,
      );
      await clock.sleep(delay, signal);
    }
  }
}

/** Read through a call: TypeScript would narrow `signal.aborted` to false inside the loop. */
export function isAborted(signal: AbortSignal): boolean {
  return signal.aborted;
}
