import type { Clock } from '../fleet/index.js';

/** A clock the agent can also wait on; tests pass one they drive. */
export interface AgentClock extends Clock {
  sleep(ms: number, signal: AbortSignal): Promise<void>;
}

export const systemAgentClock: AgentClock = {
  now: () => Date.now(),
  sleep: (ms, signal) =>
    new Promise((resolve) => {
      if (signal.aborted) {
        resolve();
        return;
      }
      const timer = setTimeout(done, ms);
      function done(): void {
        clearTimeout(timer);
        signal.removeEventListener('abort', done);
        resolve();
      }
      signal.addEventListener('abort', done, { once: true });
    }),
};
