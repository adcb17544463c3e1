import type { Runner, RunningCommand } from '../../runner/index.js';
import type { Watcher, WatchEvent } from '../backend.js';

/**
 * Watches what can undo an apply: link events (`ip -o monitor link`: a tunnel going down, coming
 * back, deleted, recreated; its routes vanish with it and never return by themselves) and
 * ruleset events (`nft monitor`: someone deleted or edited our table).
 */
export function createNftWatcher(runner: Runner): Watcher {
  const monitors: RunningCommand[] = [
    runner.start(['ip', '-o', 'monitor', 'link'], { effect: 'read' }),
    runner.start(['nft', 'monitor', 'ruleset'], { effect: 'read' }),
  ];
  const queue: WatchEvent[] = [];
  let wake: (() => void) | undefined;
  let stopped = false;
  const push = (event: WatchEvent): void => {
    queue.push(event);
    wake?.();
  };
  const [links, ruleset] = monitors;
  void (async () => {
    for await (const line of links?.lines ?? []) {
      const match = /^(Deleted )?\d+: ([^:@\s]+)[:@]/.exec(line);
      if (match?.[2] !== undefined) push({ kind: 'link', name: match[2], detail: line.trim() });
    }
  })();
  void (async () => {
    for await (const line of ruleset?.lines ?? []) {
      if (line.trim() !== '') push({ kind: 'ruleset', detail: line.trim() });
    }
  })();
  return {
    async *events() {
      while (!stopped) {
        const next = queue.shift();
        if (next !== undefined) {
          yield next;
          continue;
        }
        await new Promise<void>((resolve) => {
          wake = resolve;
        });
        wake = undefined;
      }
    },
    async stop() {
      stopped = true;
      wake?.();
      await Promise.all(monitors.map((m) => m.stop()));
    },
  };
}
