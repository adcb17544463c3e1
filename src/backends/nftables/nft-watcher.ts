import { EgressguardError } from '../../core/index.js';
import type { Runner, RunningCommand } from '../../runner/index.js';
import type { Watcher, WatchEvent } from '../backend.js';

/**
 * Watches what can undo an apply: link events (`ip -o monitor link`: a tunnel going down, coming
 * back, deleted, recreated; its routes vanish with it and never return by themselves), ruleset
 * events (`nft monitor`: someone deleted or edited our table), and the main table's routes that
 * are host facts (`ip -o monitor route`: the default route moved to another uplink, a connected
 * prefix came or went), so a compile that depends on them is redone at once, not at the tick.
 * A monitor that exits before `stop` ends `events()` with an error: the watcher would be blind.
 */
export function createNftWatcher(runner: Runner): Watcher {
  const argvs = [
    ['ip', '-o', 'monitor', 'link'],
    ['nft', 'monitor', 'ruleset'],
    ['ip', '-o', 'monitor', 'route'],
  ];
  const monitors: RunningCommand[] = argvs.map((argv) => runner.start(argv, { effect: 'read' }));
  const queue: WatchEvent[] = [];
  let wake: (() => void) | undefined;
  let stopped = false;
  let failure: EgressguardError | undefined;
  for (const [i, monitor] of monitors.entries()) {
    void monitor.exited.then((code) => {
      if (stopped) return;
      const detail = monitor.stderr().trim().split('\n').at(-1) ?? '';
      failure ??= new EgressguardError(
        'command-failed',
        `Cannot watch live state: "${(argvs[i] ?? []).join(' ')}" exited${code === null ? '' : ` with ${code}`}${detail === '' ? '' : `: ${detail}`}`,
      );
      wake?.();
    });
  }
  const push = (event: WatchEvent): void => {
    queue.push(event);
    wake?.();
  };
  const [links, ruleset, routes] = monitors;
  void (async () => {
    for await (const line of links?.lines ?? []) {
      const match = /^(Deleted )?\d+: ([^:@\s]+)[:@][^<]*<([^>]*)>/.exec(line);
      if (match?.[2] !== undefined) {
        push({ kind: 'link', name: match[2], detail: line.trim(), state: linkState(match) });
      }
    }
  })();
  void (async () => {
    for await (const line of ruleset?.lines ?? []) {
      if (line.trim() !== '') push({ kind: 'ruleset', detail: line.trim() });
    }
  })();
  void (async () => {
    for await (const line of routes?.lines ?? []) {
      if (isHostFactRoute(line)) push({ kind: 'route', detail: line.trim() });
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
        if (failure !== undefined) throw failure;
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

/**
 * A route event that changes the host's facts: the main table's default route (either family),
 * or a connected prefix (`proto kernel`) in it. Routes of other tables, ours (proto 104, in our
 * tables) among them, are printed with `table N` and are not facts.
 */
export function isHostFactRoute(line: string): boolean {
  const route = line.trim().replace(/^Deleted /, '');
  if (/ table /.test(` ${route} `)) return false;
  return route.startsWith('default ') || / proto kernel /.test(` ${route} `);
}

/** A link event's state: deleted, or up only with UP and LOWER_UP and no NO-CARRIER flag. */
function linkState(match: RegExpExecArray): 'up' | 'down' | 'absent' {
  if (match[1] !== undefined) return 'absent';
  const flags = (match[3] ?? '').split(',');
  return flags.includes('UP') && flags.includes('LOWER_UP') && !flags.includes('NO-CARRIER')
    ? 'up'
    : 'down';
}
