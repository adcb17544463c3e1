import { existsSync, readFileSync, statSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import {
  confirmGeneration,
  readPendingConfirm,
  readStatus,
  revertUnconfirmed,
} from '../../src/apply/index.js';
import { registry } from '../../src/backends/index.js';
import { pfBackend } from '../../src/backends/pf/index.js';
import { LaunchctlModel } from '../../sim/pf/launchctl-model.js';
import { lintLaunchdPlist, readLaunchDaemonPlist } from '../../src/backends/pf/launchd-plist.js';
import { applyPrepared, hostContext } from '../../src/host/index.js';
import { createPfModelHost, RUNNER_CASE, type PfModelHost } from './support.js';

// The issue: "confirm-or-revert with a one-shot LaunchDaemon as the out-of-process timer". The
// apply layer asks the backend for its `confirmTimer`; pf's bootstraps a LaunchDaemon through
// launchctl, here the launchctl MODEL (launchctl-model.ts), which records what launchd holds and
// lets the test say when the timer's time has come (`fire`).
const hosts: PfModelHost[] = [];
afterEach(() => {
  for (const h of hosts.splice(0)) h.cleanup();
});

const revertCommand = (generation: number) => [
  'egressguard',
  'restore',
  '--unconfirmed',
  String(generation),
];

function changedPolicy(h: PfModelHost, port: number): string {
  const path = join(h.dir, `changed-${port}.yaml`);
  writeFileSync(
    path,
    readFileSync(join(RUNNER_CASE, 'policy.yaml'), 'utf8').replace(
      'ports: [4000]',
      `ports: [${port}]`,
    ),
  );
  return path;
}

function jobs(h: PfModelHost): string[] {
  return Object.keys(h.macos.launchd.jobs);
}

describe('the pf confirm timer as a one-shot LaunchDaemon (launchctl model)', () => {
  it('apply --confirm-within schedules a LaunchDaemon whose plist lints; confirm boots it out and deletes it', async () => {
    const h = createPfModelHost();
    hosts.push(h);
    const report = await applyPrepared(h.target, h.prepare(), {
      confirm: { seconds: 30, revertCommand },
    });
    const timer = report.pending?.timer;
    expect(timer?.kind).toBe('backend');
    if (timer?.kind !== 'backend') return;
    expect(timer.backend).toBe('pf');
    expect(jobs(h)).toEqual([timer.id]);
    const file = timer.file ?? '';
    expect(h.macos.launchd.jobs[timer.id]?.path).toBe(file);
    const plist = readFileSync(file, 'utf8');
    expect(lintLaunchdPlist(plist)).toEqual([]);
    expect(statSync(file).mode & 0o022).toBe(0); // launchd refuses group/other-writable plists
    expect(readLaunchDaemonPlist(plist)).toMatchObject({
      label: timer.id,
      programArguments: revertCommand(report.generation.number),
      runAtLoad: false,
      startInterval: 30,
      launchOnlyOnce: true,
    });
    const bootstrap = h.runner.invocations.find((i) => i.argv[1] === 'bootstrap');
    expect(bootstrap?.argv).toEqual(['/bin/launchctl', 'bootstrap', 'system', file]);

    const context = hostContext(h.target, pfBackend);
    const confirmed = await confirmGeneration(context);
    expect(confirmed.generation).toBe(report.generation.number);
    expect(jobs(h)).toEqual([]);
    expect(existsSync(file)).toBe(false);
    expect(readPendingConfirm(h.target.state)).toBeUndefined();
    expect(h.runner.invocations.at(-1)?.argv).toEqual([
      '/bin/launchctl',
      'bootout',
      `system/${timer.id}`,
    ]);
    expect(new LaunchctlModel(h.macos.launchd).fire(timer.id)).toBeNull();
  });

  it('confirm with the wrong --target is refused and changes nothing: the timer still reverts', async () => {
    const h = createPfModelHost();
    hosts.push(h);
    const context = hostContext(h.target, pfBackend);
    const first = await applyPrepared(h.target, h.prepare());
    const second = await applyPrepared(h.target, h.prepare(changedPolicy(h, 4005)), {
      confirm: { seconds: 30, revertCommand },
    });
    const timer = second.pending?.timer;
    if (timer?.kind !== 'backend') throw new Error('no LaunchDaemon timer was scheduled');
    const pendingText = readFileSync(h.target.state.file('pending-confirm.json'), 'utf8');
    const calls = h.runner.invocations.length;

    await expect(
      confirmGeneration(hostContext(h.target, registry.get('nftables'))),
    ).rejects.toThrow(
      `Cannot stop the revert timer "${timer.id}": it was scheduled by backend "pf", not by "nftables"`,
    );
    // The pending revert, its LaunchDaemon and its plist are all still there; nothing ran.
    expect(readFileSync(h.target.state.file('pending-confirm.json'), 'utf8')).toBe(pendingText);
    expect(jobs(h)).toEqual([timer.id]);
    expect(existsSync(timer.file ?? '')).toBe(true);
    expect(h.runner.invocations.length).toBe(calls);

    // So the timer, fired, still reverts; had the file gone first, it would revert nothing.
    const argv = new LaunchctlModel(h.macos.launchd).fire(timer.id);
    const outcome = await revertUnconfirmed({ ...context, generation: Number(argv?.[3]) });
    expect(outcome).toMatchObject({ kind: 'reverted', restored: first.generation.number });
  });

  it('an unconfirmed generation whose LaunchDaemon fires is reverted to the previous one', async () => {
    const h = createPfModelHost();
    hosts.push(h);
    const context = hostContext(h.target, pfBackend);
    const first = await applyPrepared(h.target, h.prepare());
    const second = await applyPrepared(h.target, h.prepare(changedPolicy(h, 4001)), {
      confirm: { seconds: 30, revertCommand },
    });
    expect(second.generation.number).toBe(first.generation.number + 1);
    const timer = second.pending?.timer;
    if (timer?.kind !== 'backend') throw new Error('no LaunchDaemon timer was scheduled');
    expect((await readStatus({ ...context, desiredHash: second.generation.hash })).liveHash).toBe(
      second.generation.hash,
    );

    const launchd = new LaunchctlModel(h.macos.launchd);
    const argv = launchd.fire(timer.id);
    expect(argv).toEqual(revertCommand(second.generation.number));
    expect(launchd.fire(timer.id)).toBeNull(); // LaunchOnlyOnce
    const outcome = await revertUnconfirmed({ ...context, generation: Number(argv?.[3]) });
    expect(outcome).toMatchObject({
      kind: 'reverted',
      generation: second.generation.number,
      restored: first.generation.number,
    });
    const status = await readStatus({ ...context, desiredHash: first.generation.hash });
    expect(status.condition, status.reasons.join('; ')).toBe('InSync');
    expect(status.liveHash).toBe(first.generation.hash);

    // The spent job stays loaded until the next schedule boots it out and deletes its plist.
    expect(jobs(h)).toEqual([timer.id]);
    const third = await applyPrepared(h.target, h.prepare(changedPolicy(h, 4002)), {
      confirm: { seconds: 60, revertCommand },
    });
    const next = third.pending?.timer;
    if (next?.kind !== 'backend') throw new Error('no LaunchDaemon timer was scheduled');
    expect(jobs(h)).toEqual([next.id]);
    expect(existsSync(timer.file ?? '')).toBe(false);
  });

  it('a Mac asleep at the deadline reverts when it wakes, not an interval later', async () => {
    const h = createPfModelHost();
    hosts.push(h);
    const context = hostContext(h.target, pfBackend);
    const first = await applyPrepared(h.target, h.prepare());
    const window = 600;
    const second = await applyPrepared(h.target, h.prepare(changedPolicy(h, 4006)), {
      confirm: { seconds: window, revertCommand },
    });
    const timer = second.pending?.timer;
    if (timer?.kind !== 'backend' || second.pending === undefined) {
      throw new Error('no LaunchDaemon timer was scheduled');
    }
    const launchd = new LaunchctlModel(h.macos.launchd);
    const loadedAt = h.macos.launchd.jobs[timer.id]?.loadedAt ?? NaN;
    const deadline = Date.parse(second.pending.deadline);
    const until = loadedAt + 3 * window * 1000;

    // Awake: once, at the deadline (StartInterval); the calendar minute after finds it spent.
    expect(launchd.launches(timer.id, { until })).toEqual([loadedAt + window * 1000]);
    expect(loadedAt + window * 1000).toBeGreaterThanOrEqual(deadline);

    // Asleep from a minute in until 15 minutes after the deadline: the StartInterval firing is
    // missed (launchd.plist(5)); the calendar entry it missed starts the job at the wake. With
    // StartInterval alone, the next firing would come at 2 × 600 s, five minutes after the wake.
    const wake = deadline + 15 * 60_000;
    const sleeps = [{ from: loadedAt + 60_000, to: wake }];
    expect(launchd.launches(timer.id, { until, sleeps })).toEqual([wake]);

    const argv = launchd.fire(timer.id);
    const outcome = await revertUnconfirmed({ ...context, generation: Number(argv?.[3]) });
    expect(outcome).toMatchObject({ kind: 'reverted', restored: first.generation.number });
    expect(launchd.launches(timer.id, { until, sleeps })).toEqual([]); // LaunchOnlyOnce
  });

  it('a newer confirmed apply supersedes the pending one: its LaunchDaemon is booted out', async () => {
    const h = createPfModelHost();
    hosts.push(h);
    const pending = await applyPrepared(h.target, h.prepare(), {
      confirm: { seconds: 30, revertCommand },
    });
    const timer = pending.pending?.timer;
    if (timer?.kind !== 'backend') throw new Error('no LaunchDaemon timer was scheduled');
    await applyPrepared(h.target, h.prepare(changedPolicy(h, 4003)));
    expect(jobs(h)).toEqual([]);
    expect(existsSync(timer.file ?? '')).toBe(false);
    expect(readPendingConfirm(h.target.state)).toBeUndefined();
  });

  it('a launchctl that refuses the bootstrap fails the apply before the pf load: nothing changed', async () => {
    const h = createPfModelHost();
    hosts.push(h);
    // A job of the same label loaded already (launchctl: "Bootstrap failed: 5").
    const first = await applyPrepared(h.target, h.prepare(), {
      confirm: { seconds: 30, revertCommand },
    });
    const timer = first.pending?.timer;
    if (timer?.kind !== 'backend') throw new Error('no LaunchDaemon timer was scheduled');
    const label = timer.id.replace(/\.\d+$/, `.${first.generation.number + 1}`);
    h.macos.launchd.jobs[label] = {
      path: '/Library/LaunchDaemons/other.plist',
      plist: '',
      programArguments: ['/usr/bin/true'],
      startInterval: null,
      launchOnlyOnce: false,
      runs: 0,
    };
    const loadsBefore = h.model.state.log.length;
    await expect(
      applyPrepared(h.target, h.prepare(changedPolicy(h, 4004)), {
        confirm: { seconds: 30, revertCommand },
      }),
    ).rejects.toThrow(
      /^Cannot schedule the revert LaunchDaemon "dev\.egressguard\.revert\.[0-9a-f]{8}\.2": launchctl bootstrap exited with 5: Bootstrap failed: 5: Input\/output error$/,
    );
    // No pfctl load ran, and the first generation's revert is still the pending one.
    expect(h.model.state.log.slice(loadsBefore).some((e) => e.argv.includes('-f'))).toBe(false);
    expect(readPendingConfirm(h.target.state)?.generation).toBe(first.generation.number);
    expect(jobs(h)).toContain(timer.id);
  });
});
