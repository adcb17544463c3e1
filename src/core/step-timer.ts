/** Milliseconds spent per named step, in the order the steps first ran. */
export type StepTimings = Readonly<Record<string, number>>;

/** Times the steps of one operation (an apply): `time` wraps a step, `timings` reads them. */
export interface StepTimer {
  time<T>(step: string, run: () => Promise<T>): Promise<T>;
  /** Adds time measured elsewhere to a step. */
  add(step: string, ms: number): void;
  timings(): StepTimings;
}

export function createStepTimer(): StepTimer {
  const spent = new Map<string, number>();
  const add = (step: string, ms: number): void => {
    spent.set(step, (spent.get(step) ?? 0) + ms);
  };
  return {
    async time(step, run) {
      const started = performance.now();
      try {
        return await run();
      } finally {
        add(step, performance.now() - started);
      }
    },
    add,
    timings: () => Object.fromEntries([...spent].map(([k, v]) => [k, Math.round(v * 10) / 10])),
  };
}
