import { Option, type Command } from 'commander';
import { describeLiveProblem, registry } from '../../backends/index.js';
import { recordFailure } from '../../apply/index.js';
import { EgressguardError, isEgressguardError, packagePath } from '../../core/index.js';
import { applyPrepared, preparePolicy, type HostTarget } from '../../host/index.js';
import type { CommandContext } from '../command-context.js';
import { EXIT } from '../exit-codes.js';
import { checkMissingIngress } from '../missing-ingress.js';
import { paint, printJson, printLine } from '../output.js';
import {
  addTargetOptions,
  describeTarget,
  targetOf,
  warn,
  type TargetOptions,
} from '../target-options.js';

/** Parses 90, 90s, 5m, 1h into seconds (at least `minimum`: 5 s to confirm by default). */
export function parseDuration(text: string, minimum = 5): number {
  const match = /^(\d+)(s|m|h)?$/.exec(text.trim());
  if (match === null) {
    throw new EgressguardError('usage', `Cannot parse duration "${text}"`, {
      hint: 'write 90s, 5m or 1h',
    });
  }
  const unit = { s: 1, m: 60, h: 3600 }[(match[2] ?? 's') as 's' | 'm' | 'h'];
  const seconds = Number(match[1]) * unit;
  if (seconds < minimum)
    throw new EgressguardError('usage', `Duration "${text}" is too short`, {
      hint: `give at least ${minimum}s`,
    });
  return seconds;
}

/** The argv that re-runs this CLI (for timers that outlive this process). */
export function selfCommand(args: readonly string[]): string[] {
  const bin = packagePath('bin', 'egressguard.js');
  return [process.execPath, bin, ...args];
}

/** Registers `apply`. */
export function registerApply(program: Command, ctx: CommandContext): void {
  addTargetOptions(
    program
      .command('apply')
      .description(
        'Apply a policy atomically: the firewall first, then routes and rules; read back and record it',
      )
      .argument('<policy>', 'policy file (YAML)')
      .option('--facts <file>', 'host facts instead of reading the live host')
      .option(
        '--live-tunnels',
        'with --facts: read the tunnels found by `match` from the live host, the rest from the file (a utun is renumbered on every VPN reconnect)',
      )
      .option(
        '--confirm-within <duration>',
        'revert to the previous generation unless `egressguard confirm` runs in time (e.g. 60s)',
      )
      .option(
        '--force',
        'apply even when live state looks unchanged (edits of set elements are not visible to the check)',
      )
      .option(
        '--lock-timeout <duration>',
        'wait this long while another egressguard (a resident repair, a restore) holds the host lock; 0: fail at once',
        '30s',
      )
      .option(
        '--allow-missing-ingress',
        'apply although a class names an ingress interface the host does not have (yet)',
      )
      .option('--json', 'print the result as JSON'),
  )
    .addHelpText(
      'after',
      '\nExample (over SSH, with a safety net):\n  egressguard apply policy.yaml --confirm-within 60s && egressguard confirm',
    )
    .action(
      async (
        file: string,
        opts: TargetOptions & {
          facts?: string;
          liveTunnels?: boolean;
          json?: boolean;
          confirmWithin?: string;
          force?: boolean;
          allowMissingIngress?: boolean;
          lockTimeout: string;
        },
        command: Command,
      ) => {
        const seconds =
          opts.confirmWithin === undefined ? undefined : parseDuration(opts.confirmWithin);
        const lockWaitMs = parseDuration(opts.lockTimeout, 0) * 1000;
        const target = targetOf(opts);
        try {
          await applyPolicy(file, opts, { target, seconds, lockWaitMs, command, ctx });
        } catch (error) {
          // Kept for `status`: the re-converge LaunchDaemon runs this, and its log is read by no one.
          try {
            recordFailure(target.state, {
              operation: 'apply',
              message: (error as Error).message,
              code: isEgressguardError(error) ? error.code : null,
            });
          } catch {
            // A state directory this user cannot write: the error below is still the one to see.
          }
          throw error;
        }
      },
    );
}

/** Prepares and applies the policy, and prints what happened (`apply`'s action, less the record). */
async function applyPolicy(
  file: string,
  opts: TargetOptions & {
    facts?: string;
    liveTunnels?: boolean;
    json?: boolean;
    force?: boolean;
    allowMissingIngress?: boolean;
    lockTimeout: string;
  },
  run: {
    target: HostTarget;
    seconds: number | undefined;
    lockWaitMs: number;
    command: Command;
    ctx: CommandContext;
  },
): Promise<void> {
  const { target, seconds, lockWaitMs, command, ctx } = run;
  const prepared = await preparePolicy(target, {
    policy: file,
    facts: opts.facts,
    ...(opts.liveTunnels === true ? { liveTunnels: true } : {}),
    warn,
  });
  checkMissingIngress(prepared, { allowed: opts.allowMissingIngress === true, warn });
  // The revert must act on the same target: the same backend and its options.
  const passthrough = [
    ...(opts.netns === undefined ? [] : ['--netns', opts.netns]),
    ...(opts.stateDir === undefined ? [] : ['--state-dir', opts.stateDir]),
    '--target',
    prepared.backend.name,
    ...prepared.backend.options.flatMap((o) => {
      const value = target.options[o.key];
      return value === undefined ? [] : [o.flag.split(' ')[0] ?? '', value];
    }),
  ];
  // The confirm timer goes in with the apply: it must be set before the firewall commit.
  const report = await applyPrepared(target, prepared, {
    lockWaitMs,
    onLockWait: (message) => {
      warn(`${message}; waiting up to ${opts.lockTimeout}`);
    },
    ...(opts.force === true ? { force: true } : {}),
    ...(seconds === undefined
      ? {}
      : {
          confirm: {
            seconds,
            revertCommand: (generation: number) =>
              selfCommand(['restore', '--unconfirmed', String(generation), ...passthrough]),
          },
        }),
  });
  const pending = report.pending;
  if (opts.json === true) {
    printJson(ctx.output, {
      changed: report.changed,
      generation: report.generation.number,
      hash: report.generation.hash,
      previousHash: report.previous?.hash ?? null,
      deferred: report.deferred,
      timings: report.timings,
      confirmBy: pending?.deadline ?? null,
    });
  } else {
    const where = describeTarget(target);
    printLine(
      ctx.output,
      report.changed
        ? paint(
            ctx.output,
            'green',
            `applied ${prepared.policy.name} to ${where}: generation ${report.generation.number}, hash ${report.generation.hash.slice(0, 12)}`,
          )
        : `no change: ${where} already runs hash ${report.generation.hash.slice(0, 12)}`,
    );
    for (const d of report.deferred)
      printLine(ctx.output, paint(ctx.output, 'yellow', `  waiting: ${describeLiveProblem(d)}`));
    if (pending !== undefined) {
      printLine(
        ctx.output,
        paint(
          ctx.output,
          'yellow',
          `  run \`${confirmCommand(opts, command)}\` before ${pending.deadline}, or it reverts`,
        ),
      );
    }
  }
  ctx.setExit(EXIT.ok);
}

/** The `confirm` to run, with the target options this apply was given (a copy-paste must work). */
function confirmCommand(opts: TargetOptions, command: Command): string {
  const args = ['egressguard', 'confirm'];
  if (opts.netns !== undefined) args.push('--netns', opts.netns);
  if (opts.stateDir !== undefined) args.push('--state-dir', opts.stateDir);
  for (const { option } of registry.options()) {
    const name = new Option(option.flag).attributeName();
    const value = opts[name];
    if (typeof value === 'string' && command.getOptionValueSource(name) === 'cli') {
      args.push(option.flag.split(' ')[0] ?? '', value);
    }
  }
  return args.map(shellQuote).join(' ');
}

function shellQuote(word: string): string {
  return /^[\w@%+=:,./-]+$/.test(word) ? word : `'${word.replaceAll("'", `'\\''`)}'`;
}
