import { mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { createRunner } from '../../src/runner/index.js';
import { interruptProve } from './support/prove-cli.js';

// `prove` interrupted with SIGTERM in the middle of a fault (egressguard being killed at each
// step of an apply, the tunnel down): the pending restore runs and is verified, the lab's
// namespaces go, the resident `egressguard run` stops, and no state directory is left behind.

describe('prove --lab interrupted', () => {
  const root = createRunner({ guard: true });
  it('leaves no namespace, process or state behind after SIGTERM mid-fault', async () => {
    // A temporary directory of its own: other files of the suite run prove at the same time, and
    // their state directories in the shared one are not this run's leftovers.
    const tmp = mkdtempSync(join(tmpdir(), 'egtest-interrupt-'));
    try {
      // SIGTERM once the lab's tunnel is down: the scenario's restore is then pending.
      const result = await interruptProve(['--scenarios', 'kill-points'], {
        tmpDir: tmp,
        when: /^kill-points: /m,
        ready: async (pid) => {
          const owner = pid.toString(36);
          const lab = (await root.run(['ip', 'netns', 'list'], { effect: 'read' })).stdout
            .split('\n')
            .map((line) => line.split(' ')[0] ?? '')
            .find((ns) => ns.startsWith(`eglab-${owner}-`) && ns.endsWith('-host'));
          if (lab === undefined) return false;
          const link = await root.run(['ip', '-n', lab, '-j', 'link', 'show', 'tun0'], {
            effect: 'read',
            allowFailure: true,
          });
          return link.exitCode === 0 && !link.stdout.includes('"UP"');
        },
      });
      expect(result.stderr).toMatch(/prove: SIGTERM: running the pending restores/);
      expect(result.stderr).toMatch(
        /prove: interrupted; [1-9]\d* restores ran \([1-9]\d* verified\), lab torn down/,
      );
      expect(result.exitCode).toBe(143);

      const owner = result.pid.toString(36);
      const { stdout: namespaces } = await createRunner({ guard: true }).run(
        ['ip', 'netns', 'list'],
        {
          effect: 'read',
        },
      );
      expect(namespaces.split('\n').filter((n) => n.startsWith(`eglab-${owner}-`))).toEqual([]);
      expect(commandLines().filter((c) => c.includes(`eglab-${owner}-`))).toEqual([]);
      expect(readdirSync(tmp)).toEqual([]);
    } finally {
      rmSync(tmp, { recursive: true, force: true });
    }
  }, 300_000);
});

/** Every process's command line, from /proc. */
function commandLines(): string[] {
  return readdirSync('/proc')
    .filter((d) => /^\d+$/.test(d))
    .map((pid) => {
      try {
        return readFileSync(`/proc/${pid}/cmdline`, 'utf8').replaceAll('\0', ' ');
      } catch {
        return '';
      }
    });
}
