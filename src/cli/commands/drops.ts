import type { Command } from 'commander';
import type { CommandContext } from '../command-context.js';
import {
  createDropDecoder,
  LOG_GROUP,
  mapRuleClasses,
  type DropRecord,
} from '../../backends/index.js';
import { EgressguardError } from '../../core/index.js';
import { createRunner, type Runner } from '../../runner/index.js';
import { EXIT } from '../exit-codes.js';
import { requirePolicy } from '../load-inputs.js';
import { paint, printLine, progress, type Output } from '../output.js';

export interface DropsOptions {
  readonly netns?: string | undefined;
  readonly group?: string | undefined;
  readonly follow?: boolean | undefined;
  readonly duration?: string | undefined;
  readonly count?: string | undefined;
  readonly json?: boolean | undefined;
}

/**
 * `drops [POLICY]`: audited and dropped packets, read from the nflog group our log rules write
 * to. tcpdump writes NFLOG as pcap (DLT_NFLOG); its text output does not show the log prefix,
 * which carries the rule id, so the pcap stream is decoded here.
 */
export async function runDrops(
  file: string | undefined,
  options: DropsOptions,
  output: Output,
): Promise<number> {
  const group = parseInteger(options.group ?? String(LOG_GROUP), '--group', { min: 0, max: 65535 });
  const count =
    options.count === undefined ? undefined : parseInteger(options.count, '--count', { min: 1 });
  const durationMs = parseDuration(options.duration ?? '5');
  const policy = file === undefined ? undefined : requirePolicy(file).policy;
  const runner = createRunner({ netns: options.netns });
  const decoder = createDropDecoder({
    ...(policy === undefined ? {} : { ruleClasses: mapRuleClasses(policy.classes) }),
    interfaceNames: await readInterfaceNames(runner),
  });

  const argv = ['tcpdump', '-i', `nflog:${group}`, '-U', '-w', '-'];
  const capture = runner.startBinary(argv, { effect: 'read' });
  const state = { stopping: false }; // set from timers and signal handlers
  const stop = (): void => {
    if (state.stopping) return;
    state.stopping = true;
    void capture.stop();
  };
  const timer = options.follow === true ? undefined : setTimeout(stop, durationMs);
  process.once('SIGINT', stop);
  process.once('SIGTERM', stop);
  progress(
    output,
    `reading nflog group ${group}${options.netns === undefined ? '' : ` in namespace "${options.netns}"`}${options.follow === true ? ' (Ctrl-C to stop)' : ''}`,
  );
  let seen = 0;
  let endedByItself = false;
  try {
    read: for await (const chunk of capture.chunks) {
      for (const record of decoder.push(chunk)) {
        printRecord(output, record, options.json === true);
        seen += 1;
        if (count !== undefined && seen >= count) break read;
      }
    }
    endedByItself = !state.stopping && (count === undefined || seen < count);
  } finally {
    clearTimeout(timer);
    process.off('SIGINT', stop);
    process.off('SIGTERM', stop);
    stop();
  }
  const exitCode = await capture.exited;
  if (endedByItself && exitCode !== 0) {
    const detail = capture.stderr().trim().split('\n').at(-1) ?? '';
    throw new EgressguardError(
      'command-failed',
      `Cannot read nflog group ${group}: "${argv.join(' ')}" ${exitCode === null ? 'could not start' : `exited with ${exitCode}`}${detail === '' ? '' : `: ${detail}`}`,
      {
        // Only one socket may bind an nflog group in a namespace.
        hint: /Operation not permitted|group index/.test(detail)
          ? `another program (ulogd, another \`egressguard drops\`) listens on nflog group ${group}: stop it, or read its log`
          : 'install tcpdump (apt-get install tcpdump) and run as root',
      },
    );
  }
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

/** ifindex → name, so records name the interfaces a packet came in and would go out by. */
async function readInterfaceNames(runner: Runner): Promise<Map<number, string>> {
  const result = await runner.run(['ip', '-j', 'link', 'show'], { effect: 'read' });
  const links = JSON.parse(result.stdout || '[]') as { ifindex?: number; ifname?: string }[];
  return new Map(
    links.flatMap((l) =>
      l.ifindex === undefined || l.ifname === undefined ? [] : [[l.ifindex, l.ifname]],
    ),
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
  program
    .command('drops')
    .description(
      'Show audited and dropped packets with class and rule id, read from the nflog group of our log rules',
    )
    .argument('[policy]', 'policy file (YAML): maps rule ids to their classes')
    .option('--netns <name>', 'read inside this network namespace')
    .option('--group <n>', 'nflog group our log rules write to', String(LOG_GROUP))
    .option('--follow', 'stream until interrupted (Ctrl-C)')
    .option('--duration <seconds>', 'without --follow: read for this long', '5')
    .option('--count <n>', 'stop after this many packets')
    .option('--json', 'print one JSON object per packet (JSON lines)')
    .addHelpText(
      'after',
      `
Log rules are rate-limited (20/s, burst 40 per rule): under a flood some packets are dropped
without a record, while the rules' named counters count every one. Messages with other
prefixes are not shown. Only one reader can bind an nflog group; needs tcpdump and root.

Exit codes:
  0  read until --duration, --count or Ctrl-C
  2  bad usage, or tcpdump could not read the group

Example:
  egressguard drops policy.yaml --follow`,
    )
    .action(async (file: string | undefined, opts: DropsOptions) => {
      ctx.setExit(await runDrops(file, opts, ctx.output));
    });
}
