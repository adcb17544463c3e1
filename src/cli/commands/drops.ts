import type { Command } from 'commander';
import type { CommandContext } from '../command-context.js';
import { registry, type BackendOption, type DropRecord } from '../../backends/index.js';
import { EgressguardError } from '../../core/index.js';
import { lowerPolicy } from '../../ir/index.js';
import { backendOf, requirePolicy } from '../../host/index.js';
import { EXIT } from '../exit-codes.js';
import { paint, printLine, progress, type Output } from '../output.js';
import {
  addBackendOptions,
  addTargetOptions,
  backendOptionsOf,
  targetOf,
  type TargetOptions,
} from '../target-options.js';

export interface DropsOptions extends TargetOptions {
  readonly follow?: boolean | undefined;
  readonly duration?: string | undefined;
  readonly count?: string | undefined;
  readonly json?: boolean | undefined;
}

/** The options of every backend's `drops` (the nflog group on Linux). */
function dropsOptions(): { option: BackendOption; backends: string[] }[] {
  return registry
    .all()
    .flatMap((b) => (b.drops?.options ?? []).map((option) => ({ option, backends: [b.name] })));
}

/** `drops [POLICY]`: audited and dropped packets, live, with class and rule id. */
export async function runDrops(
  file: string | undefined,
  options: DropsOptions,
  output: Output,
): Promise<number> {
  const count =
    options.count === undefined ? undefined : parseInteger(options.count, '--count', { min: 1 });
  const durationMs = parseDuration(options.duration ?? '5');
  const policy = file === undefined ? undefined : requirePolicy(file).policy;
  const target = targetOf(options);
  const backend = backendOf(target);
  if (backend.drops === undefined) {
    throw new EgressguardError('unsupported', `Backend "${backend.name}" reports no drops`, {
      hint: 'read its counters with `egressguard status`',
    });
  }
  const stream = await backend.drops.open({
    runner: target.runner,
    options: { ...target.options, ...backendOptionsOf(options, dropsOptions()) },
    policy: policy === undefined ? undefined : lowerPolicy(policy),
  });
  const state = { stopping: false }; // set from timers and signal handlers
  const stop = (): void => {
    if (state.stopping) return;
    state.stopping = true;
    void stream.stop();
  };
  const timer = options.follow === true ? undefined : setTimeout(stop, durationMs);
  process.once('SIGINT', stop);
  process.once('SIGTERM', stop);
  progress(
    output,
    `reading ${stream.source}${options.netns === undefined ? '' : ` in namespace "${options.netns}"`}${options.follow === true ? ' (Ctrl-C to stop)' : ''}`,
  );
  let seen = 0;
  try {
    for await (const record of stream.records) {
      printRecord(output, record, options.json === true);
      seen += 1;
      if (count !== undefined && seen >= count) break;
    }
  } finally {
    clearTimeout(timer);
    process.off('SIGINT', stop);
    process.off('SIGTERM', stop);
    stop();
  }
  await stream.finished();
  if (options.json !== true && options.follow !== true) {
    printLine(output, paint(output, 'dim', `${seen} packet${seen === 1 ? '' : 's'}`));
  }
  return EXIT.ok;
}

function printRecord(output: Output, record: DropRecord, json: boolean): void {
  if (json) {
    printLine(output, JSON.stringify(record));
    return;
  }
  const time = new Date(record.time);
  const clock = `${time.toTimeString().slice(0, 8)}.${String(time.getMilliseconds()).padStart(3, '0')}`;
  const action =
    record.action === 'drop' ? paint(output, 'red', 'drop ') : paint(output, 'yellow', 'audit');
  const what =
    record.icmp !== null
      ? `${record.protocol ?? '?'} type ${record.icmp.type} code ${record.icmp.code}`
      : record.port !== null
        ? `${record.protocol ?? '?'} ${record.port}`
        : (record.protocol ?? '?');
  const path = [
    record.hook,
    record.in === null ? undefined : `in ${record.in}`,
    record.out === null ? undefined : `out ${record.out}`,
  ].filter((p) => p !== undefined && p !== null);
  printLine(
    output,
    [
      clock,
      action,
      (record.class ?? '-').padEnd(12),
      record.rule.padEnd(24),
      `${record.src ?? '?'} → ${record.dst ?? '?'}`,
      what,
      paint(output, 'dim', `(${path.join(', ')})`),
    ].join('  '),
  );
}

function parseInteger(text: string, option: string, range: { min: number; max?: number }): number {
  const n = Number(text);
  if (!/^\d+$/.test(text) || n < range.min || (range.max !== undefined && n > range.max)) {
    throw new EgressguardError('usage', `Cannot use ${option} "${text}"`, {
      hint: `use a whole number from ${range.min}${range.max === undefined ? ' up' : ` to ${range.max}`}`,
    });
  }
  return n;
}

function parseDuration(text: string): number {
  const seconds = Number(text);
  if (!/^\d+(\.\d+)?$/.test(text) || seconds <= 0) {
    throw new EgressguardError('usage', `Cannot use --duration "${text}"`, {
      hint: 'use a number of seconds greater than 0, e.g. 5 or 0.5',
    });
  }
  return seconds * 1000;
}

/** Registers `drops`. */
export function registerDrops(program: Command, ctx: CommandContext): void {
  addBackendOptions(
    addTargetOptions(
      program
        .command('drops')
        .description(
          "Show audited and dropped packets with class and rule id, read from the backend's log of them",
        )
        .argument('[policy]', 'policy file (YAML): maps rule ids to their classes')
        .option('--follow', 'stream until interrupted (Ctrl-C)')
        .option('--duration <seconds>', 'without --follow: read for this long', '5')
        .option('--count <n>', 'stop after this many packets')
        .option('--json', 'print one JSON object per packet (JSON lines)'),
    ),
    dropsOptions(),
  )
    .addHelpText(
      'after',
      `
Log rules are rate-limited (20/s, burst 40 per rule): under a flood some packets are dropped
without a record, while the rules' named counters count every one. Messages with other
prefixes are not shown. On Linux only one reader can bind an nflog group; needs tcpdump and root.
A tunnel class's packets that routing drops while its tunnel is down (the blackhole route) show
as <class>/blackhole, logged just before routing drops them; a host class's sends that routing
refuses never become packets (the program gets an error) and show nowhere.

Exit codes:
  0  read until --duration, --count or Ctrl-C
  2  bad usage, or the log could not be read

Example:
  egressguard drops policy.yaml --follow`,
    )
    .action(async (file: string | undefined, opts: DropsOptions) => {
      ctx.setExit(await runDrops(file, opts, ctx.output));
    });
}
