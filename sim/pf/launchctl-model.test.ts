import { describe, expect, it } from 'vitest';
import { LaunchctlModel, type LaunchctlModelState } from './launchctl-model.js';
import { renderLaunchDaemonPlist, type LaunchDaemon } from '../../src/backends/pf/launchd-plist.js';

const LOADED = Date.UTC(2026, 4, 9, 12, 0, 10);
const MINUTE = 60_000;

function load(daemon: Partial<LaunchDaemon>): LaunchctlModel {
  const model = new LaunchctlModel({ jobs: {}, log: [] } satisfies LaunchctlModelState);
  const plist = renderLaunchDaemonPlist({ label: 'dev.test', programArguments: ['/x'], ...daemon });
  const outcome = model.run(['bootstrap', 'system', '/tmp/dev.test.plist'], {
    readFile: () => ({ text: plist, mode: 0o644 }),
    now: () => LOADED,
  });
  expect(outcome.exitCode).toBe(0);
  return model;
}

describe('the launchctl model across sleep (launchd.plist(5))', () => {
  it('skips a StartInterval firing due while asleep; the next one comes an interval later', () => {
    const model = load({ runAtLoad: false, startInterval: 60 });
    const sleeps = [{ from: LOADED + 30_000, to: LOADED + 150_000 }];
    expect(model.launches('dev.test', { until: LOADED + 4 * MINUTE, sleeps })).toEqual([
      LOADED + 3 * MINUTE,
      LOADED + 4 * MINUTE,
    ]);
  });

  it('starts a calendar job whose minutes passed asleep once, at the wake', () => {
    // Every minute 12:02–12:05 UTC; asleep 12:01:30–12:07.
    const model = load({
      startCalendarInterval: [2, 3, 4, 5].map((minute) => ({ hour: 12, minute })),
    });
    const wake = Date.UTC(2026, 4, 9, 12, 7);
    const sleeps = [{ from: Date.UTC(2026, 4, 9, 12, 1, 30), to: wake }];
    const until = LOADED + 10 * MINUTE;
    expect(model.launches('dev.test', { until, sleeps, timeZone: 'UTC' })).toEqual([wake]);
    expect(model.launches('dev.test', { until, timeZone: 'UTC' })).toEqual([
      Date.UTC(2026, 4, 9, 12, 2),
      Date.UTC(2026, 4, 9, 12, 3),
      Date.UTC(2026, 4, 9, 12, 4),
      Date.UTC(2026, 4, 9, 12, 5),
    ]);
  });

  it('launches a LaunchOnlyOnce job at the first of its triggers, and never after it ran', () => {
    const model = load({
      runAtLoad: false,
      startInterval: 600,
      startCalendarInterval: [{ hour: 12, minute: 3 }],
      launchOnlyOnce: true,
    });
    const until = LOADED + 20 * MINUTE;
    expect(model.launches('dev.test', { until, timeZone: 'UTC' })).toEqual([
      Date.UTC(2026, 4, 9, 12, 3),
    ]);
    expect(model.fire('dev.test')).toEqual(['/x']);
    expect(model.launches('dev.test', { until, timeZone: 'UTC' })).toEqual([]);
  });
});
