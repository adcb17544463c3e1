import { readlinkSync } from 'node:fs';

/**
 * One StartCalendarInterval entry (launchd.plist(5)): the job starts when the local wall clock
 * matches every field given; a missing field is a wildcard, as in crontab(5).
 */
export interface CalendarInterval {
  readonly month?: number;
  readonly day?: number;
  readonly weekday?: number;
  readonly hour?: number;
  readonly minute?: number;
}

/** The local wall-clock minute of `instant` in `timeZone`, every field set. */
export function calendarIntervalAt(instant: number, timeZone: string): Required<CalendarInterval> {
  const parts = new Intl.DateTimeFormat('en-US', {
    timeZone,
    hourCycle: 'h23',
    month: 'numeric',
    day: 'numeric',
    hour: 'numeric',
    minute: 'numeric',
    weekday: 'short',
  }).formatToParts(new Date(instant));
  const field = (type: Intl.DateTimeFormatPartTypes): string =>
    parts.find((p) => p.type === type)?.value ?? '';
  return {
    month: Number(field('month')),
    day: Number(field('day')),
    // launchd.plist(5): "Weekday <integer> The weekday on which this job will be run (0 and 7 are Sunday)".
    weekday: ['Sun', 'Mon', 'Tue', 'Wed', 'Thu', 'Fri', 'Sat'].indexOf(field('weekday')),
    hour: Number(field('hour')),
    minute: Number(field('minute')),
  };
}

/** Whether the wall-clock minute of `instant` in `timeZone` matches `entry`. */
export function matchesCalendarInterval(
  entry: CalendarInterval,
  instant: number,
  timeZone: string,
): boolean {
  const now = calendarIntervalAt(instant, timeZone);
  return (
    (entry.month === undefined || entry.month === now.month) &&
    (entry.day === undefined || entry.day === now.day) &&
    (entry.weekday === undefined || entry.weekday % 7 === now.weekday) &&
    (entry.hour === undefined || entry.hour === now.hour) &&
    (entry.minute === undefined || entry.minute === now.minute)
  );
}

const MINUTE_MS = 60_000;

/**
 * The calendar entry (month, day, hour, minute) of the first whole minute at or after `deadline`
 * whose wall-clock reading did not already occur between `from` and the deadline: when daylight
 * saving time ends an hour repeats, and launchd would start the job at the first of the two.
 * The year is not a field: the entry recurs yearly, which a job launched only once ignores.
 */
export function calendarIntervalNotBefore(
  deadline: number,
  options: { readonly from: number; readonly timeZone: string },
): CalendarInterval {
  let minute = Math.ceil(deadline / MINUTE_MS) * MINUTE_MS;
  for (;;) {
    const { month, day, hour, minute: m } = calendarIntervalAt(minute, options.timeZone);
    const entry = { month, day, hour, minute: m };
    // Offsets of every daylight saving shift in use (30 minutes on Lord Howe Island, else 1 h).
    const earlier = [30, 60].some((shift) => {
      const before = minute - shift * MINUTE_MS;
      return before >= options.from && matchesCalendarInterval(entry, before, options.timeZone);
    });
    if (!earlier) return entry;
    minute += MINUTE_MS;
  }
}

/**
 * The time zone launchd reads calendar intervals in: the system's, `/etc/localtime`, a link to
 * its zone file (tzset(3): without TZ in the environment, as for launchd, "the best available
 * approximation to local wall clock time" is the file `localtime`), whatever TZ this process was
 * given. This process's own zone when the link cannot be read.
 */
export function systemTimeZone(localtime = '/etc/localtime'): string {
  try {
    const zone = /zoneinfo\/(.+)$/.exec(readlinkSync(localtime))?.[1];
    if (zone !== undefined) {
      new Intl.DateTimeFormat('en-US', { timeZone: zone }); // throws for a zone ICU lacks
      return zone;
    }
  } catch {
    // Not a link, or a zone this build does not know: fall through.
  }
  return Intl.DateTimeFormat().resolvedOptions().timeZone;
}
