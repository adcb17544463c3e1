import type { Command } from 'commander';
import {
  BackendRegistry,
  compileWithHash,
  DEFAULT_TABLE,
  LOCKDOWN_ARTIFACT,
  nftablesBackend,
  type Artifact,
  type Backend,
} from '../backends/index.js';
import { EgressguardError } from '../core/index.js';
import { gatherFacts, readHostFacts, type HostFacts } from '../facts/index.js';
import { applyGeneration, type ApplyInput, type ApplyReport } from '../apply/index.js';
import { bindHost, classesNotOnHost, lowerPolicy, type HostIR } from '../ir/index.js';
import { DEFAULT_LABELS_FILE, readHostLabels } from './host-labels.js';
import type { Policy } from '../policy/index.js';
import { createRunner, type Runner } from '../runner/index.js';
import { StateDir } from '../state/index.js';
import { requirePolicy } from './load-inputs.js';
import { VERSION } from './version.js';

export const registry = new BackendRegistry().register(nftablesBackend, { defaultFor: 'linux' });

/** Options every command that touches a host takes. */
export interface TargetOptions {
  readonly netns?: string | undefined;
  readonly table?: string | undefined;
  readonly stateDir?: string | undefined;
  readonly routeTable?: string | undefined;
  readonly rulePriority?: string | undefined;
}

export function addTargetOptions(command: Command): Command {
  return command
    .option('--netns <name>', 'act inside this network namespace (state kept apart)')
    .option('--table <name>', 'owned nftables table', DEFAULT_TABLE)
    .option(
      '--state-dir <dir>',
      'state directory (default: $EGRESSGUARD_STATE_DIR or /var/lib/egressguard)',
    )
    .option('--route-table <id>', 'first routing table id for tunnel steering (default 7350)')
    .option('--rule-priority <n>', 'first ip rule priority for tunnel steering (default 7350)');
}

/** The host (or namespace) a command acts on. */
export interface Target {
  readonly steering: { table?: number; priority?: number };
  readonly runner: Runner;
  readonly state: StateDir;
  readonly table: string;
  readonly backend: Backend;
  readonly netns: string | undefined;
}

export function resolveTarget(options: TargetOptions): Target {
  return {
    steering: {
      ...(options.routeTable === undefined
        ? {}
        : { table: parseId('--route-table', options.routeTable) }),
      ...(options.rulePriority === undefined
        ? {}
        : { priority: parseId('--rule-priority', options.rulePriority) }),
    },
    runner: createRunner({ netns: options.netns }),
    state: new StateDir({ root: options.stateDir, netns: options.netns }),
    table: options.table ?? DEFAULT_TABLE,
    backend: registry.get('nftables'),
    netns: options.netns,
  };
}

export interface Prepared {
  readonly policy: Policy;
  readonly facts: HostFacts;
  readonly ir: HostIR;
  readonly artifacts: readonly Artifact[];
  readonly lockdown: string | undefined;
  readonly hash: string;
}

/** Policy + live facts (or --facts) → IR → stamped artifacts and the host config hash. */
export async function preparePolicy(
  file: string,
  target: Target,
  options: { facts?: string | undefined; quiet?: boolean },
): Promise<Prepared> {
  // The live listings are processes: let them run while this process validates the policy.
  const gathering =
    options.facts === undefined
      ? gatherFacts(target.runner, { labels: readHostLabels(), tools: false })
      : undefined;
  gathering?.catch(() => undefined); // awaited below; never an unhandled rejection meanwhile
  const { policy } = requirePolicy(file);
  const facts = gathering === undefined ? readHostFacts(options.facts ?? '') : await gathering;
  const independent = lowerPolicy(policy);
  const ir = bindHost(independent, facts);
  // A class limited to other hosts is left out on purpose; say so, or its absence looks like a bug.
  for (const skipped of options.quiet === true ? [] : classesNotOnHost(independent, facts)) {
    const wanted = Object.entries(skipped.labels)
      .map(([k, v]) => `${k}=${v}`)
      .join(', ');
    process.stderr.write(
      `warning: class "${skipped.name}" is not enforced on this host: it needs labels ${wanted} (set them in ${process.env['EGRESSGUARD_LABELS_FILE'] ?? DEFAULT_LABELS_FILE})\n`,
    );
  }
  const { artifacts, hash } = compileWithHash(target.backend.createCompiler(), {
    ir,
    tableName: target.table,
    steering: target.steering,
    versions: { compiler: VERSION, agent: VERSION },
  });
  return {
    policy,
    facts,
    ir,
    artifacts,
    lockdown: artifacts.find((a) => a.name === LOCKDOWN_ARTIFACT)?.content,
    hash,
  };
}

/** Applies a prepared policy to the target (apply, run), with apply's own options. */
export function applyPrepared(
  target: Target,
  prepared: Prepared,
  extra: Pick<ApplyInput, 'force' | 'confirm'> = {},
): Promise<ApplyReport> {
  return applyGeneration({
    backend: target.backend,
    runner: target.runner,
    state: target.state,
    table: target.table,
    policy: prepared.policy.name,
    hash: prepared.hash,
    artifacts: prepared.artifacts,
    ...(prepared.lockdown === undefined ? {} : { lockdown: prepared.lockdown }),
    ...extra,
  });
}

/** A whole number for a steering id; the compiler checks its range. */
function parseId(option: string, text: string): number {
  if (!/^\d+$/.test(text)) {
    throw new EgressguardError('usage', `Cannot use ${option} "${text}"`, {
      hint: 'give a whole number',
    });
  }
  return Number(text);
}
