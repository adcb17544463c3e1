import {
  matchesCalendarInterval,
  systemTimeZone,
  type CalendarInterval,
} from '../../src/backends/pf/calendar-interval.js';
import { lintLaunchdPlist, readLaunchDaemonPlist } from '../../src/backends/pf/launchd-plist.js';

/**
 * A MODEL of launchctl(1)'s `bootstrap`/`bootout` on the `system` domain, not launchctl: the
 * confirm timer's LaunchDaemons cannot be loaded on Linux. What it reproduces, with sources:
 *
 * - `bootstrap system PATH` reads the plist at PATH and loads the job it defines into the
 *   domain; `bootout system/LABEL` removes it (launchctl(1), "bootstrap | bootout domain-target
 *   [service-path …] | service-target"; a service target is `domain/label`).
 * - Bootstrapping a label that is loaded already, or a plist launchd cannot read, fails with
 *   "Bootstrap failed: 5: Input/output error" and exit 5 (reported in public notes, e.g.
 *   quantonganh.com 2025-09-26 "launchctl: Bootstrap failed: 5: Input/output error").
 * - `bootout` of a label that is not loaded fails (exit 3, "Boot-out failed: 3: No such process"
 *   — the wording is an assumption, unverified on a Mac; egressguard does not depend on it).
 * - launchd refuses a job plist that is writable by group or others (its ownership check).
 * - A StartInterval job with RunAtLoad false first runs StartInterval seconds after it is loaded
 *   (the interval "begins ticking at the moment the plist is loaded", launchd notes by
 *   D. Abrahams); LaunchOnlyOnce: it runs at most once (launchd.plist(5)). `fire` is the test's
 *   way to say that time has come: it returns the arguments launchd would exec, once.
 * - Across sleep (`launches`, launchd.plist(5) as of macOS 10.10, quoted in Apple developer
 *   forums thread 23361): a StartInterval firing due while the Mac is asleep "will be missed due
 *   to shortcomings in kqueue(3)"; a StartCalendarInterval match passed asleep starts the job "the
 *   next time the computer wakes up", several "coalesced into one event upon wake from sleep"
 *   (also Apple's Daemons and Services Programming Guide, "Scheduling Timed Jobs"). Calendar
 *   fields are the wall clock of the system's time zone. Assumed: the interval counts time asleep
 *   (a kqueue timer that does not would fire later, never earlier), and a job starts at once.
 * - Jobs bootstrapped from a path outside /Library/LaunchDaemons are not loaded again at boot:
 *   `reboot` forgets every loaded job.
 */
export interface LaunchctlModelState {
  readonly jobs: Record<string, LaunchctlJob>;
  readonly log: { readonly argv: readonly string[]; readonly exitCode: number }[];
}

export interface LaunchctlJob {
  readonly path: string;
  readonly plist: string;
  readonly programArguments: readonly string[];
  readonly startInterval: number | null;
  readonly launchOnlyOnce: boolean;
  readonly runAtLoad?: boolean;
  readonly startCalendarInterval?: readonly CalendarInterval[];
  /** When `bootstrap` loaded it (epoch ms): its StartInterval counts from here. */
  readonly loadedAt?: number;
  runs: number;
}

/** A stretch of time the modelled Mac is asleep, [from, to) in epoch ms; it wakes at `to`. */
export interface Sleep {
  readonly from: number;
  readonly to: number;
}

export interface CommandOutcome {
  readonly exitCode: number;
  readonly stdout: string;
  readonly stderr: string;
}

/** What launchctl reads of the machine: plist files (with their mode), and the time. */
export interface LaunchctlIo {
  readonly readFile: (path: string) => { text: string; mode: number } | undefined;
  /** Now, in epoch ms (default: the clock). */
  readonly now?: () => number;
}

export class LaunchctlModel {
  constructor(readonly state: LaunchctlModelState) {}

  /** One launchctl command line; `io.readFile` reads a plist (with its mode) as launchd would. */
  run(argv: readonly string[], io: LaunchctlIo): CommandOutcome {
    const outcome = this.dispatch(argv, io);
    this.state.log.push({ argv: [...argv], exitCode: outcome.exitCode });
    return outcome;
  }

  /** The job's time has come: the argv launchd would exec, or null (not loaded, ran once). */
  fire(label: string): readonly string[] | null {
    const job = this.state.jobs[label];
    if (job === undefined || (job.launchOnlyOnce && job.runs > 0)) return null;
    job.runs += 1;
    return job.programArguments;
  }

  /**
   * When launchd would start the job from its load until `until` (epoch ms, ascending), with
   * the Mac asleep during `sleeps`; the job's runs so far count against LaunchOnlyOnce. A
   * forecast: nothing runs (`fire` does).
   */
  launches(
    label: string,
    options: { until: number; sleeps?: readonly Sleep[]; timeZone?: string },
  ): number[] {
    const job = this.state.jobs[label];
    if (job?.loadedAt === undefined) return [];
    const loaded = job.loadedAt;
    const sleeps = options.sleeps ?? [];
    const sleepAt = (t: number): Sleep | undefined => sleeps.find((s) => t >= s.from && t < s.to);
    const times = new Set<number>();
    if (job.runAtLoad === true) times.add(loaded);
    if (job.startInterval !== null) {
      const step = job.startInterval * 1000;
      for (let t = loaded + step; t <= options.until; t += step) {
        if (sleepAt(t) === undefined) times.add(t); // missed while asleep
      }
    }
    const calendar = job.startCalendarInterval ?? [];
    if (calendar.length > 0) {
      const timeZone = options.timeZone ?? systemTimeZone();
      const minute = 60_000;
      for (let t = Math.floor(loaded / minute) * minute + minute; t <= options.until; t += minute) {
        if (!calendar.some((entry) => matchesCalendarInterval(entry, t, timeZone))) continue;
        const asleep = sleepAt(t);
        // Passed asleep: one start at the wake, however many matches the sleep held.
        if (asleep === undefined) times.add(t);
        else if (asleep.to <= options.until) times.add(asleep.to);
      }
    }
    const sorted = [...times].sort((a, b) => a - b);
    if (!job.launchOnlyOnce) return sorted;
    return job.runs > 0 ? [] : sorted.slice(0, 1);
  }

  reboot(): void {
    for (const label of Object.keys(this.state.jobs))
      Reflect.deleteProperty(this.state.jobs, label);
  }

  private dispatch(argv: readonly string[], io: LaunchctlIo): CommandOutcome {
    const [verb, target, ...rest] = argv;
    if (verb === 'bootstrap' && target === 'system' && rest.length === 1) {
      const path = rest[0] ?? '';
      const file = io.readFile(path);
      const failed = fail(5, 'Bootstrap failed: 5: Input/output error');
      if (file === undefined || (file.mode & 0o022) !== 0) return failed;
      if (lintLaunchdPlist(file.text).length > 0) return failed;
      const daemon = readLaunchDaemonPlist(file.text);
      if (this.state.jobs[daemon.label] !== undefined) return failed;
      this.state.jobs[daemon.label] = {
        path,
        plist: file.text,
        programArguments: daemon.programArguments,
        startInterval: daemon.startInterval ?? null,
        launchOnlyOnce: daemon.launchOnlyOnce ?? false,
        runAtLoad: daemon.runAtLoad ?? false,
        ...(daemon.startCalendarInterval === undefined
          ? {}
          : { startCalendarInterval: daemon.startCalendarInterval }),
        loadedAt: io.now?.() ?? Date.now(),
        runs: 0,
      };
      return ok('');
    }
    if (verb === 'bootout' && target?.startsWith('system/') === true && rest.length === 0) {
      const label = target.slice('system/'.length);
      if (this.state.jobs[label] === undefined) {
        return fail(3, 'Boot-out failed: 3: No such process');
      }
      Reflect.deleteProperty(this.state.jobs, label);
      return ok('');
    }
    if (verb === 'print' && target?.startsWith('system/') === true && rest.length === 0) {
      const job = this.state.jobs[target.slice('system/'.length)];
      if (job === undefined) {
        return fail(113, `Could not find service "${target.slice(7)}" in domain for system`);
      }
      // launchctl print's format "is not meant to be parsed" (launchctl(1)): a few fields only.
      return ok(`${target} = {\n\tpath = ${job.path}\n\truns = ${job.runs}\n}\n`);
    }
    return fail(64, `Unrecognized subcommand or arguments (launchctl model): ${argv.join(' ')}`);
  }
}

function ok(stdout: string): CommandOutcome {
  return { exitCode: 0, stdout, stderr: '' };
}

function fail(exitCode: number, message: string): CommandOutcome {
  return { exitCode, stdout: '', stderr: `${message}\n` };
}
