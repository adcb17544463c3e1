import { mkdtempSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import {
  calendarIntervalAt,
  calendarIntervalNotBefore,
  matchesCalendarInterval,
  systemTimeZone,
} from './calendar-interval.js';

const MINUTE = 60_000;

describe('launchd calendar intervals', () => {
  it('reads an instant as the wall-clock minute of a zone, half-hour zones and weekdays included', () => {
    const instant = Date.UTC(2026, 0, 4, 18, 45, 10); // a Sunday, 18:45:10 UTC
    expect(calendarIntervalAt(instant, 'UTC')).toEqual({
      month: 1,
      day: 4,
      weekday: 0,
      hour: 18,
      minute: 45,
    });
    expect(calendarIntervalAt(instant, 'Asia/Kolkata')).toEqual({
      month: 1,
      day: 5,
      weekday: 1,
      hour: 0,
      minute: 15,
    });
    // launchd.plist(5): 0 and 7 are both Sunday; a missing field is a wildcard.
    expect(matchesCalendarInterval({ weekday: 7, hour: 18 }, instant, 'UTC')).toBe(true);
    expect(matchesCalendarInterval({ minute: 46 }, instant, 'UTC')).toBe(false);
  });

  it('picks the first whole minute at or after the deadline', () => {
    const from = Date.UTC(2026, 4, 9, 12, 0, 0);
    expect(calendarIntervalNotBefore(from + 30_000, { from, timeZone: 'UTC' })).toEqual({
      month: 5,
      day: 9,
      hour: 12,
      minute: 1,
    });
    expect(calendarIntervalNotBefore(from + MINUTE, { from, timeZone: 'UTC' })).toEqual({
      month: 5,
      day: 9,
      hour: 12,
      minute: 1,
    });
  });

  it('never names a wall-clock minute that comes round earlier when daylight saving time ends', () => {
    // New York, 2 November 2025: 01:00–01:59 happens twice (EDT, then EST from 06:00 UTC).
    const secondHalfPast = Date.UTC(2025, 10, 2, 6, 30); // 01:30 EST
    const beforeBoth = Date.UTC(2025, 10, 2, 5, 0); // 01:00 EDT
    const entry = calendarIntervalNotBefore(secondHalfPast, {
      from: beforeBoth,
      timeZone: 'America/New_York',
    });
    // 01:30 would start the job at 01:30 EDT, an hour early: the first minute past the repeated
    // hour is 02:00 EST.
    expect(entry).toEqual({ month: 11, day: 2, hour: 2, minute: 0 });
    for (let t = beforeBoth; t < secondHalfPast; t += MINUTE) {
      expect(matchesCalendarInterval(entry, t, 'America/New_York')).toBe(false);
    }
    // Scheduled within the second 01:xx, the first one is past: 01:30 it is.
    expect(
      calendarIntervalNotBefore(secondHalfPast, {
        from: Date.UTC(2025, 10, 2, 6, 5),
        timeZone: 'America/New_York',
      }),
    ).toEqual({ month: 11, day: 2, hour: 1, minute: 30 });
  });

  it("reads the system's zone from the /etc/localtime link, whatever TZ the process has", () => {
    const dir = mkdtempSync(join(tmpdir(), 'eg-localtime-'));
    try {
      const link = join(dir, 'localtime');
      symlinkSync('/var/db/timezone/zoneinfo/Europe/Paris', link); // macOS's form of the link
      expect(systemTimeZone(link)).toBe('Europe/Paris');
      const file = join(dir, 'not-a-link');
      writeFileSync(file, 'TZif');
      expect(systemTimeZone(file)).toBe(Intl.DateTimeFormat().resolvedOptions().timeZone);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});
