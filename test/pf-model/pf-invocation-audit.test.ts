import { join } from 'node:path';
import { readFileSync, writeFileSync } from 'node:fs';
import { afterEach, describe, expect, it } from 'vitest';
import {
  confirmGeneration,
  readStatus,
  removeGeneration,
  restoreGeneration,
  revertUnconfirmed,
} from '../../src/apply/index.js';
import { LaunchctlModel } from '../../sim/pf/launchctl-model.js';
import { pfBackend } from '../../src/backends/pf/index.js';
import { readStockPfFiles } from '../../sim/pf/create-macos-pf-host.js';
import { PF_KILL_POINTS } from '../../src/backends/pf/pf-applier.js';
import { DEFAULT_ANCHOR } from '../../src/backends/pf/pf-options.js';
import { findForbiddenPfctlForms } from '../../sim/pf/pfctl-model.js';
import { applyPrepared, hostContext, planPrepared } from '../../src/host/index.js';
import { createPfModelHost, RUNNER_CASE, type PfModelHost } from './support.js';

// The issue: "A test inspects every pfctl invocation the applier makes in every path (including
// fault-injected ones) and fails on any other form". Every path below runs through the apply
// layer against the pfctl MODEL; then every command line is matched against the forms egressguard
// may use, and none is a form DESIGN.md §4 (pf) forbids (main -f, -F without -a, -d).
const A = DEFAULT_ANCHOR;
const hosts: PfModelHost[] = [];
afterEach(() => {
  for (const h of hosts.splice(0)) h.cleanup();
});

const ALLOWED: readonly ((args: readonly string[]) => boolean)[] = [
  (a) => same(a, ['-n', '-a', A, '-f', '-']), // validate: no side effects (NOTES §2)
  (a) => same(a, ['-a', A, '-f', '-']), // load the anchor alone, one transaction
  (a) => same(a, ['-a', A, '-v', '-s', 'rules']),
  (a) => same(a, ['-a', A, '-s', 'nat']),
  (a) =>
    a.length === 6 &&
    same(a, ['-a', A, '-t', a[3] ?? '', '-T', 'show']) &&
    /^(eg|egsrc)_/.test(a[3] ?? ''),
  (a) => same(a, ['-s', 'info']),
  (a) => same(a, ['-s', 'rules']),
  (a) => same(a, ['-s', 'nat']),
  (a) => same(a, ['-s', 'References']),
  (a) => same(a, ['-a', 'com.apple', '-s', 'Anchors']),
  (a) =>
    a.length === 4 &&
    a[0] === '-a' &&
    (a[1] ?? '').startsWith('com.apple/') &&
    (a[1] ?? '') < A &&
    same(a.slice(2), ['-s', 'rules']),
  (a) => same(a, ['-E']),
  (a) => a.length === 2 && a[0] === '-X' && /^\d+$/.test(a[1] ?? ''),
  (a) => a.length === 2 && a[0] === '-k' && /^[0-9a-f.:]+\/\d+$/.test(a[1] ?? ''),
  (a) => same(a, ['-a', A, '-F', 'all']),
];

// The confirm timer's LaunchDaemon (launchd-confirm-timer.ts): bootstrapped from the state
// directory, booted out by label; nothing else of launchctl.
const REVERT_LABEL = /^dev\.egressguard\.revert\.[0-9a-f]{8}\.\d+$/;
const LAUNCHCTL_ALLOWED: readonly ((args: readonly string[]) => boolean)[] = [
  (a) =>
    a.length === 3 &&
    same(a.slice(0, 2), ['bootstrap', 'system']) &&
    /\/confirm-timer\/dev\.egressguard\.revert\.[0-9a-f]{8}\.\d+\.plist$/.test(a[2] ?? ''),
  (a) =>
    a.length === 2 &&
    a[0] === 'bootout' &&
    REVERT_LABEL.test((a[1] ?? '').replace(/^system\//, '')),
];

function same(a: readonly string[], b: readonly string[]): boolean {
  return a.length === b.length && a.every((x, i) => x === b[i]);
}

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

describe('pfctl invocation audit', () => {
  it('runs only the allowed forms of pfctl on every path, faults included', async () => {
    const h = createPfModelHost();
    hosts.push(h);
    const context = hostContext(h.target, pfBackend);
    const outcomes: string[] = [];
    const attempt = async (what: string, run: () => Promise<unknown>) => {
      try {
        await run();
        outcomes.push(`${what}: ok`);
      } catch (error) {
        outcomes.push(`${what}: ${(error as { code?: string }).code ?? 'error'}`);
      }
    };
    const first = h.prepare();
    const fault = async (point: string, what: string, run: () => Promise<unknown>) => {
      h.faults.set(point, 'fail');
      try {
        await attempt(what, run);
      } finally {
        h.faults.set(point, 'on'); // 'on' is a switch no pf path reads: the point passes
      }
    };
    await attempt('plan', () => planPrepared(h.target, first));
    await fault('before-pf-load', 'apply, fault before the load', () =>
      applyPrepared(h.target, first),
    );
    h.model.injectTransactionCollision(A);
    await attempt('apply, another process in the anchor transaction', () =>
      applyPrepared(h.target, first),
    );
    await attempt('apply', () => applyPrepared(h.target, first));
    await attempt('apply again (no-op)', () => applyPrepared(h.target, first));
    await fault('after-pf-load', 'apply a change, fault after the load', () =>
      applyPrepared(h.target, h.prepare(changedPolicy(h, 4001))),
    );
    await fault('after-pf-reference', 'apply a change, fault after the reference', () =>
      applyPrepared(h.target, h.prepare(changedPolicy(h, 4002))),
    );
    await attempt('apply a change', () =>
      applyPrepared(h.target, h.prepare(changedPolicy(h, 4003))),
    );
    const revertCommand = (g: number) => ['egressguard', 'restore', '--unconfirmed', String(g)];
    await attempt('apply a change with a confirm window', () =>
      applyPrepared(h.target, h.prepare(changedPolicy(h, 4004)), {
        confirm: { seconds: 30, revertCommand },
      }),
    );
    await attempt('confirm', () => confirmGeneration(context));
    await fault('before-pf-load', 'apply with a confirm window, fault before the load', () =>
      applyPrepared(h.target, h.prepare(changedPolicy(h, 4005)), {
        confirm: { seconds: 30, revertCommand },
      }),
    );
    await attempt('apply a change with a confirm window, unconfirmed', () =>
      applyPrepared(h.target, h.prepare(changedPolicy(h, 4006)), {
        confirm: { seconds: 30, revertCommand },
      }),
    );
    await attempt('its LaunchDaemon fires: revert', async () => {
      const launchd = new LaunchctlModel(h.macos.launchd);
      const [label] = Object.keys(h.macos.launchd.jobs);
      const argv = launchd.fire(label ?? '');
      if (argv === null) throw new Error('no LaunchDaemon to fire');
      return revertUnconfirmed({ ...context, generation: Number(argv[3]) });
    });
    h.model.insertSystemRules('com.apple/100.other', 'pass in quick on bridge100 all\n');
    await attempt('status', () => readStatus(context));
    h.model.reboot();
    h.model.run(['-f', '/etc/pf.conf'], { pid: 1, processName: 'launchd' });
    await attempt('restore after a reboot', () => restoreGeneration(context));
    await attempt('remove', () => removeGeneration(context));
    await attempt('remove again', () => removeGeneration(context));
    await attempt('plan after remove', () => planPrepared(h.target, first));

    expect(outcomes).toEqual([
      'plan: ok',
      'apply, fault before the load: fault-injected',
      'apply, another process in the anchor transaction: apply-failed',
      'apply: ok',
      'apply again (no-op): ok',
      'apply a change, fault after the load: partially-applied',
      'apply a change, fault after the reference: partially-applied',
      'apply a change: ok',
      'apply a change with a confirm window: ok',
      'confirm: ok',
      'apply with a confirm window, fault before the load: fault-injected',
      'apply a change with a confirm window, unconfirmed: ok',
      'its LaunchDaemon fires: revert: ok',
      'status: ok',
      'restore after a reboot: ok',
      'remove: ok',
      'remove again: ok',
      'plan after remove: ok',
    ]);
    // Every fault point of the applier was reached on some path.
    for (const point of PF_KILL_POINTS) expect(h.faults.history).toContain(point);
    const launchctl = h.runner.invocations
      .filter((i) => i.argv[0] === '/bin/launchctl')
      .map((i) => i.argv.slice(1));
    // Three schedules; the confirm and the fault before the load each boot one out.
    expect(launchctl.map((a) => a[0])).toEqual([
      'bootstrap',
      'bootout',
      'bootstrap',
      'bootout',
      'bootstrap',
    ]);
    expect(launchctl.filter((a) => !LAUNCHCTL_ALLOWED.some((allowed) => allowed(a)))).toEqual([]);
    const calls = h.runner.invocations
      .filter((i) => i.argv[0] !== '/bin/launchctl')
      .map((i) => i.argv.slice(1));
    expect(calls.length).toBeGreaterThan(50);
    expect(calls.length + launchctl.length).toBe(h.runner.invocations.length);
    expect(
      h.runner.invocations.every(
        (i) => i.argv[0] === '/sbin/pfctl' || i.argv[0] === '/bin/launchctl',
      ),
    ).toBe(true);
    const other = calls.filter((args) => !ALLOWED.some((allowed) => allowed(args)));
    expect(other).toEqual([]);
    expect(calls.flatMap((args) => findForbiddenPfctlForms(args))).toEqual([]);
    // The model saw the same calls (after the system's own boot-time ones) and none forbidden.
    const ours = h.model.state.log.filter((entry) => entry.pid === 4242);
    expect(ours).toHaveLength(calls.length);
    expect(ours.flatMap((entry) => entry.forbidden)).toEqual([]);
  });

  it('fails on a forbidden form: the check is not vacuous', () => {
    for (const args of [['-f', '/etc/pf.conf'], ['-F', 'all'], ['-d'], ['-nf', '/etc/pf.conf']]) {
      expect(
        ALLOWED.some((allowed) => allowed(args)),
        args.join(' '),
      ).toBe(false);
      expect(findForbiddenPfctlForms(args).length).toBeGreaterThan(0);
    }
  });
});

// The seed incident (DESIGN.md §1A) through the real applier: the old installer's stanza in
// /etc/pf.conf, later duplicated; its `pfctl -nf` / `pfctl -f /etc/pf.conf` fail on the live host.
const OLD_FILE = '/etc/pf.anchors/egressguard';
const OLD_ANCHOR = `table <vm_sources> persist { 192.168.64.0/22 }
nat on en0 inet from <vm_sources> to any -> (en0)
block out quick on en0 inet from <vm_sources> to 10.0.0.0/8 label "block-vm-private"
`;
const OLD_STANZA = `anchor "egressguard"\nload anchor "egressguard" from "${OLD_FILE}"\n`;

describe('the seed incident through the real applier', () => {
  it('the old approach fails on the model as in the field; egressguard succeeds at bootstrap and every reconcile', async () => {
    const stock = readStockPfFiles().pfConf;
    const h = createPfModelHost({ pfConf: stock + OLD_STANZA, files: { [OLD_FILE]: OLD_ANCHOR } });
    hosts.push(h);
    expect(h.model.state.log[0]?.exitCode).toBe(0); // booted with the single stanza
    h.model.state.files['/etc/pf.conf'] =
      `${stock}${OLD_STANZA}# BEGIN egressguard\n${OLD_STANZA}# END egressguard\n`;
    // `-n` defines no table and begins no transaction (F93 pfctl.c), so it passes the file
    // that the load then refuses: a check with -n cannot catch the duplicated block.
    const check = h.model.run(['-nf', '/etc/pf.conf'], { pid: 500 });
    expect(check.exitCode).toBe(0);
    const load = h.model.run(['-f', '/etc/pf.conf'], { pid: 501 });
    expect(load.exitCode).toBe(1);
    expect(load.stderr).toContain('cannot define table vm_sources: Resource busy');
    expect(load.stderr).toContain('pf rules not loaded');

    const prepared = h.prepare();
    const context = hostContext(h.target, pfBackend);
    const report = await applyPrepared(h.target, prepared);
    expect(report.changed).toBe(true);
    for (let i = 0; i < 20; i++) {
      if (i % 5 === 2) h.model.run(['-a', A, '-F', 'rules'], { pid: 502 }); // drift: rules flushed
      await applyPrepared(h.target, prepared);
      const live = await readStatus({ ...context, desiredHash: prepared.hash });
      expect(live.condition, live.reasons.join('; ')).toBe('InSync');
    }
    // The VMs are filtered where pf sees them: a private destination is blocked in on the bridge.
    const packet = {
      family: 4 as const,
      source: 0xc0a84005,
      destination: 0x0a090909,
      protocol: 6,
      sourcePort: 50_000,
      destinationPort: 443,
      ingress: 'bridge100',
      egress: 'en0',
    };
    expect(h.model.forwardPacket(packet).verdict).toBe('block');
    expect(h.runner.invocations.flatMap((i) => findForbiddenPfctlForms(i.argv.slice(1)))).toEqual(
      [],
    );
  });
});
