import { Option, type Command } from 'commander';
import { registry, type BackendOption, type BackendOptions } from '../backends/index.js';
import { createHostTarget, type HostTarget } from '../host/index.js';
import { requireNamespace } from '../runner/index.js';

/** Options every command that acts on a host takes; the backends' own ones come on top. */
export interface TargetOptions {
  readonly netns?: string | undefined;
  readonly stateDir?: string | undefined;
  readonly target?: string | undefined;
  readonly [backendOption: string]: unknown;
}

/** --netns, --state-dir, --target, and every option a registered backend declares. */
export function addTargetOptions(command: Command): Command {
  command
    .option('--netns <name>', 'act inside this network namespace (state kept apart)')
    .option(
      '--state-dir <dir>',
      'state directory (default: $EGRESSGUARD_STATE_DIR or /var/lib/egressguard)',
    )
    .option('--target <backend>', `backend (${registry.names().join(', ')}; default: the host's)`);
  for (const { option, backends } of registry.options()) {
    command.addOption(backendFlag(option, backends));
  }
  return command;
}

/** Adds the options of one set of backend options (a capability's own, like `drops`). */
export function addBackendOptions(
  command: Command,
  options: readonly { readonly option: BackendOption; readonly backends: readonly string[] }[],
): Command {
  for (const { option, backends } of options) command.addOption(backendFlag(option, backends));
  return command;
}

/** A backend's option, listed by `--help` under a heading of the backends that take it. */
function backendFlag(option: BackendOption, backends: readonly string[]): Option {
  const flag = new Option(option.flag, option.description).helpGroup(
    `Options of the ${backends.join(' and ')} backend${backends.length === 1 ? '' : 's'}:`,
  );
  return option.default === undefined ? flag : flag.default(option.default);
}

/** The values of the backends' options among a command's parsed options, by option key. */
export function backendOptionsOf(
  opts: TargetOptions,
  options: readonly { readonly option: BackendOption }[] = registry.options(),
): BackendOptions {
  const out: Record<string, string> = {};
  for (const { option } of options) {
    const value = opts[new Option(option.flag).attributeName()];
    if (typeof value === 'string') out[option.key] = value;
  }
  return out;
}

/** The host (or namespace) a command acts on; a namespace that does not exist stops it here. */
export function targetOf(opts: TargetOptions): HostTarget {
  requireNamespace(opts.netns);
  return createHostTarget({
    netns: opts.netns,
    stateDir: opts.stateDir,
    options: backendOptionsOf(opts),
    backend: opts.target,
  });
}

/** `this host` or `namespace "NAME"`, for messages. */
export function describeTarget(target: HostTarget): string {
  return target.netns === undefined ? 'this host' : `namespace "${target.netns}"`;
}

/** A warning on stderr (a class this host's labels leave out). */
export function warn(message: string): void {
  process.stderr.write(`warning: ${message}\n`);
}

/** The warning of a command that found the host lock held and waits for it. */
export function warnLockWait(message: string, timeoutMs: number): void {
  warn(`${message}; waiting up to ${Math.round(timeoutMs / 1000)}s`);
}
