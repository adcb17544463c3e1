import { EgressguardError } from '../core/index.js';

/** What an injected fault does when its point is reached. */
export type FaultAction = 'kill' | 'fail' | { sleepMs: number } | 'on';

/**
 * Named fault points for tests and `prove`. Configured programmatically or through
 * EGRESSGUARD_FAULTS="point=action,…" (actions: kill, fail, sleep:MS, on), so a test can make the
 * real CLI kill itself between two steps of an apply.
 */
export class Faults {
  private readonly actions = new Map<string, FaultAction>();
  private readonly reached: string[] = [];

  static fromEnv(value: string | undefined): Faults {
    const faults = new Faults();
    for (const entry of (value ?? '').split(',')) {
      if (entry.trim() === '') continue;
      const [point, action = 'on'] = entry.split('=').map((s) => s.trim());
      if (point === undefined || point === '') continue;
      faults.set(point, parseFaultAction(action, entry));
    }
    return faults;
  }

  set(point: string, action: FaultAction): void {
    this.actions.set(point, action);
  }

  /** Whether a switch-like fault (action `on`) is set, e.g. a deliberately broken compiler. */
  isOn(point: string): boolean {
    return this.actions.has(point);
  }

  /** The points reached so far, in order. */
  get history(): readonly string[] {
    return this.reached;
  }

  async hit(point: string): Promise<void> {
    this.reached.push(point);
    const action = this.actions.get(point);
    if (action === undefined || action === 'on') return;
    if (action === 'kill') {
      process.kill(process.pid, 'SIGKILL');
      // SIGKILL is asynchronous on some platforms: never run past the point.
      await new Promise(() => undefined);
    }
    if (action === 'fail') {
      throw new EgressguardError('fault-injected', `Fault injected at "${point}"`);
    }
    if (typeof action === 'object') await new Promise((r) => setTimeout(r, action.sleepMs));
  }
}

function parseFaultAction(text: string, entry: string): FaultAction {
  if (text === 'kill' || text === 'fail' || text === 'on') return text;
  const sleep = /^sleep:(\d+)$/.exec(text);
  if (sleep?.[1] !== undefined) return { sleepMs: Number(sleep[1]) };
  throw new EgressguardError('usage', `Cannot parse EGRESSGUARD_FAULTS entry "${entry}"`, {
    hint: 'use point=kill, point=fail, point=sleep:MS or point=on',
  });
}
