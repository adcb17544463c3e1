import { readFileSync } from 'node:fs';
import { createRunner } from '../../../src/runner/index.js';

export interface NamespaceMonitor {
  readonly pid: number;
  /** The command line, words joined by spaces (`nft monitor ruleset`, `ip -n NS -o monitor link`). */
  readonly argv: string;
}

/**
 * The monitor processes (`… monitor …`) in a namespace, by `ip netns pids`: a test namespace's
 * name is unique, so every one is a watcher of the test's own resident or agent.
 */
export async function monitorsInNamespace(ns: string): Promise<NamespaceMonitor[]> {
  const listed = await createRunner().run(['ip', 'netns', 'pids', ns], {
    effect: 'read',
    allowFailure: true,
  });
  const found: NamespaceMonitor[] = [];
  for (const pid of listed.stdout.split('\n').filter((p) => p !== '')) {
    try {
      const argv = readFileSync(`/proc/${pid}/cmdline`, 'utf8').split('\0').join(' ').trim();
      if (argv.includes(' monitor ')) found.push({ pid: Number(pid), argv });
    } catch {
      // A short-lived command, gone meanwhile.
    }
  }
  return found;
}
