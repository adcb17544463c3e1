/** Time as the fleet sees it: injected everywhere, so tests run on a clock they control. */
export interface Clock {
  now(): number;
}

export const systemClock: Clock = { now: () => Date.now() };
