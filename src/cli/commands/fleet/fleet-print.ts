import type { EventView, HostView, RolloutView } from '../../../fleet/index.js';
import { paint, printLine, printTable, type Output } from '../../output.js';

export function isReady(host: HostView): boolean {
  return host.conditions.some((c) => c.type === 'Ready' && c.status === 'True');
}

export function summarise(host: HostView): string {
  const ready = host.conditions.find((c) => c.type === 'Ready');
  const problems = host.conditions.filter(
    (c) => (c.type === 'Degraded' || c.type === 'Stalled') && c.status === 'True',
  );
  return [
    `Ready=${ready?.status ?? '?'} (${ready?.reason ?? '?'})`,
    ...problems.map((c) => `${c.type}: ${c.reason}`),
  ].join(', ');
}

export function printFleet(
  output: Output,
  hosts: readonly HostView[],
  rollouts: readonly RolloutView[],
): void {
  const rows = hosts.map((h) => {
    const status = (type: string): string =>
      h.conditions.find((c) => c.type === type)?.status ?? '?';
    return [
      h.name,
      status('Ready'),
      status('Progressing'),
      status('Degraded'),
      status('Stalled'),
      short(h.desiredHash),
      short(h.appliedHash),
      short(h.liveHash),
      h.lastCheckinAt === null ? 'never' : `${ago(h.lastCheckinAt)}${h.silent ? ' SILENT' : ''}`,
      h.suspended
        ? 'suspended'
        : (h.conditions.find(
            (c) => c.status !== 'False' && c.type !== 'Progressing' && c.reason !== 'Converged',
          )?.reason ?? ''),
    ];
  });
  printTable(
    output,
    [
      'HOST',
      'READY',
      'PROGRESSING',
      'DEGRADED',
      'STALLED',
      'DESIRED',
      'APPLIED',
      'LIVE',
      'CHECK-IN',
      'REASON',
    ],
    rows,
  );
  const active = rollouts.filter((r) => r.state === 'progressing' || r.state === 'paused');
  for (const r of active) printRollout(output, r);
  const notReady = hosts.filter((h) => !isReady(h)).length;
  printLine(
    output,
    paint(
      output,
      notReady === 0 ? 'green' : 'yellow',
      `${hosts.length} hosts, ${hosts.length - notReady} Ready`,
    ),
  );
}

export function printHost(output: Output, host: HostView, events: readonly EventView[]): void {
  printLine(
    output,
    paint(output, 'bold', host.name) + (host.silent ? paint(output, 'yellow', ' (silent)') : ''),
  );
  printLine(
    output,
    `  desired ${host.desiredHash ?? '-'}\n  applied ${host.appliedHash ?? '-'}\n  live    ${host.liveHash ?? '-'}`,
  );
  if (host.failures !== null) {
    printLine(
      output,
      `  failures: ${host.failures.count} at ${short(host.failures.hash)}; next attempt ${host.failures.nextAttemptAt === null ? 'unknown' : new Date(host.failures.nextAttemptAt).toISOString()}`,
    );
  }
  for (const c of host.conditions) {
    printLine(
      output,
      `  ${c.type}=${c.status} ${c.reason} since ${new Date(c.lastTransitionTime).toISOString()}: ${c.message}`,
    );
  }
  printLine(output, '  events:');
  for (const e of events)
    printLine(output, `    ${new Date(e.at).toISOString()} ${e.kind}: ${e.message}`);
}

export function printRollout(output: Output, rollout: RolloutView): void {
  const waves = rollout.waves.map((w) => `${w.index}:${w.state}(${w.hosts.length})`).join(' ');
  printLine(
    output,
    `rollout ${rollout.id} (push ${rollout.pushId}) ${rollout.state}, wave ${rollout.currentWave}: ${waves}${rollout.pausedReason === null ? '' : ` — ${rollout.pausedReason}`}`,
  );
}

function short(hash: string | null): string {
  return hash === null ? '-' : hash.slice(0, 12);
}

function ago(at: number): string {
  const seconds = Math.max(0, Math.round((Date.now() - at) / 1000));
  return seconds < 120
    ? `${seconds}s ago`
    : seconds < 7200
      ? `${Math.round(seconds / 60)}m ago`
      : `${Math.round(seconds / 3600)}h ago`;
}
