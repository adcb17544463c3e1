import { createHash } from 'node:crypto';
import { existsSync, mkdirSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { EgressguardError } from '../../core/index.js';
import type { CommandClass, Runner } from '../../runner/index.js';
import type { ConfirmTimerSupport, ScheduledTimer } from '../backend.js';
import { systemTimeZone } from './calendar-interval.js';
import {
  createConfirmRevertDaemon,
  lintLaunchdPlist,
  renderLaunchDaemonPlist,
} from './launchd-plist.js';

export const DEFAULT_LAUNCHCTL = '/bin/launchctl';
/** Names the launchctl to run (the launchctl model's shim, in tests). */
export const LAUNCHCTL_ENV = 'EGRESSGUARD_LAUNCHCTL';
const LABEL_PREFIX = 'dev.egressguard.revert.';

function launchctlPath(): string {
  return process.env[LAUNCHCTL_ENV] ?? DEFAULT_LAUNCHCTL;
}

/**
 * The confirm-or-revert timer on macOS (DESIGN.md §5): a one-shot LaunchDaemon in the `system`
 * domain that runs the revert once, `seconds` after it is bootstrapped (StartInterval, RunAtLoad
 * false, LaunchOnlyOnce) or, when the Mac slept through that, at the wake (StartCalendarInterval:
 * createConfirmRevertDaemon), unless `confirm` boots it out first. Its plist lives in the state
 * directory, not /Library/LaunchDaemons: like the generic timers it must not outlive a reboot
 * (boot's `restore` reverts a confirmation left pending). A timer that fired stays loaded but
 * spent (LaunchOnlyOnce) until the next schedule boots it out: a job booting itself out would be
 * killed by launchd mid-revert.
 */
export function createLaunchdConfirmTimer(): ConfirmTimerSupport {
  return {
    description: 'a one-shot LaunchDaemon (launchctl bootstrap system …)',
    async schedule(input) {
      const launchctl = launchctlPath();
      // One label per state directory and generation: numbers only go up in a state directory.
      const scope = createHash('sha256').update(input.dir).digest('hex').slice(0, 8);
      const label = `${LABEL_PREFIX}${scope}.${input.generation}`;
      const file = join(input.dir, `${label}.plist`);
      mkdirSync(input.dir, { recursive: true, mode: 0o755 });
      await retireSpent(input.runner, launchctl, input.dir, [...input.keep, { id: label, file }]);
      const plist = renderLaunchDaemonPlist({
        ...createConfirmRevertDaemon({
          label,
          programArguments: input.command,
          delaySeconds: input.seconds,
          deadline: Date.parse(input.deadline),
          scheduledAt: Date.now(),
          timeZone: systemTimeZone(),
        }),
        standardOutPath: join(input.dir, 'revert.log'),
        standardErrorPath: join(input.dir, 'revert.log'),
      });
      const problems = lintLaunchdPlist(plist);
      if (problems.length > 0) {
        throw new EgressguardError(
          'apply-failed',
          `Cannot schedule the revert LaunchDaemon "${label}": its plist is invalid: ${problems.join('; ')}`,
          { hint: 'nothing changed; this is a bug: report it' },
        );
      }
      // launchd refuses a job plist writable by group or others.
      writeFileSync(file, plist, { mode: 0o644 });
      const loaded = await input.runner.run([launchctl, 'bootstrap', 'system', file], {
        effect: 'change',
        allowFailure: true,
      });
      if (loaded.exitCode !== 0) {
        rmSync(file, { force: true });
        throw new EgressguardError(
          'apply-failed',
          `Cannot schedule the revert LaunchDaemon "${label}": launchctl bootstrap exited with ${loaded.exitCode}: ${loaded.stderr.trim() || 'no message'}`,
          {
            hint: 'nothing changed; apply without --confirm-within, or check `launchctl print system` for a job of that label',
          },
        );
      }
      return { id: label, file };
    },
    async cancel(input) {
      await bootOut(input.runner, launchctlPath(), input.timer);
    },
  };
}

/** Boots out and deletes timers of this directory that no pending confirmation names. */
async function retireSpent(
  runner: Runner,
  launchctl: string,
  dir: string,
  keep: readonly ScheduledTimer[],
): Promise<void> {
  if (!existsSync(dir)) return;
  for (const name of readdirSync(dir).sort()) {
    if (!name.startsWith(LABEL_PREFIX) || !name.endsWith('.plist')) continue;
    const id = name.slice(0, -'.plist'.length);
    if (keep.some((k) => k.id === id)) continue;
    await bootOut(runner, launchctl, { id, file: join(dir, name) });
  }
}

async function bootOut(runner: Runner, launchctl: string, timer: ScheduledTimer): Promise<void> {
  // Not loaded (it fired before a reboot, or was booted out): nothing to stop.
  await runner.run([launchctl, 'bootout', `system/${timer.id}`], {
    effect: 'change',
    allowFailure: true,
  });
  if (timer.file !== undefined) rmSync(timer.file, { force: true });
}

/**
 * How a launchctl command line acts: `read` for `print`/`list`/`version`, else `change`, whatever
 * the program's path. Undefined when the program is not launchctl.
 */
export function classifyLaunchctlCommand(argv: readonly string[]): CommandClass | undefined {
  const program = argv[0] ?? '';
  if (program.split('/').pop() !== 'launchctl') return undefined;
  return ['print', 'list', 'version', 'blame'].includes(argv[1] ?? '') ? 'read' : 'change';
}
