import { createStepTimer, EgressguardError, type StepTimer } from '../../core/index.js';
import type { Runner } from '../../runner/index.js';
import {
  CLASS_SET_COMMENT,
  definitionBlocks,
  elementCount,
  isNamedByContent,
  STAMP_SET,
  type Block,
} from './nft-sets.js';

/**
 * Loads one transaction with `nft -f -`: the kernel takes all of it or none, so no separate
 * `nft -c` is needed first (it would cost as much as the load).
 */
export async function loadRuleset(runner: Runner, ruleset: string): Promise<void> {
  await runner.run(['nft', '-f', '-'], { effect: 'change', input: ruleset });
}

/** The test fault that makes apply load a ruleset the kernel rejects (EGRESSGUARD_FAULTS). */
export const BROKEN_RULESET_FAULT = 'compile.broken-ruleset';

/**
 * Test fault only: appends a jump loop to `ruleset` (the swap). nft parses and evaluates it; the
 * kernel refuses it at commit ("Too many links"), after the batch already flushed the old rules
 * and deleted sets, so it proves the whole transaction is rolled back, not just that nft's parser
 * is strict; and that the sets staged before it are deleted again.
 */
export function breakRuleset(ruleset: string, table: string): string {
  const chain = (name: string): string => `inet ${table} eg_fault_${name}`;
  return `${ruleset}
# fault ${BROKEN_RULESET_FAULT}: a jump loop the kernel rejects
add chain ${chain('a')}
add chain ${chain('b')}
add rule ${chain('a')} jump eg_fault_b
add rule ${chain('b')} jump eg_fault_a
add rule inet ${table} forward jump eg_fault_a
`;
}

/** Validates a ruleset without loading it (`plan`); returns nft's complaint, or null. */
export async function checkRuleset(runner: Runner, ruleset: string): Promise<string | null> {
  const result = await runner.run(['nft', '-c', '-f', '-'], {
    effect: 'read',
    input: ruleset,
    allowFailure: true,
  });
  return result.exitCode === 0 ? null : result.stderr.trim();
}

export async function deleteTable(runner: Runner, table: string): Promise<boolean> {
  const result = await runner.run(['nft', 'delete', 'table', 'inet', table], {
    effect: 'change',
    allowFailure: true,
  });
  if (result.exitCode === 0) return true;
  if (/No such file or directory/.test(result.stderr)) return false;
  throw new EgressguardError(
    'command-failed',
    `Cannot delete table inet "${table}": ${result.stderr.trim()}`,
  );
}

/** A set, chain or counter of the live table, as the terse listing has it. */
export interface LiveObject {
  readonly kind: string;
  readonly body: Record<string, unknown>;
}

/**
 * How a compiled ruleset goes onto a host: `stage` creates the sets the live table lacks, in
 * transactions of their own that may run in parallel (nothing refers to those sets yet, so no
 * packet meets them); `swap` is the one transaction that changes what packets meet.
 */
export interface LoadPlan {
  readonly stage: readonly string[];
  readonly swap: string;
  /** The sets each staging transaction creates: deleted again if the load fails. */
  readonly staged: readonly (readonly string[])[];
  /** What happens to each set but the stamp, for `plan`; sets left alone are not listed. */
  readonly sets: readonly SetChange[];
}

export interface SetChange {
  readonly name: string;
  /** staged before the swap; refilled (flushed, defined) or recreated in it; deleted by it. */
  readonly action: 'stage' | 'refill' | 'recreate' | 'delete';
  readonly elements: number;
}

/** A staging transaction is worth an nft process of its own from about this much text on. */
const STAGE_CHUNK_CHARS = 256 * 1024;

/**
 * Plans the load of a compiled ruleset (declare, delete, define) onto the live table, which is
 * replaced in place, never deleted: the swap flushes the rules, deletes what the new definition
 * no longer has, and defines the rest; counters carry on. Set names end in a hash of the set's
 * content (the compiler sees to it): a live set whose name is the hash of the content wanted is
 * left alone, and a set the live table lacks is staged first. Live sets of a wanted name are
 * refilled in the swap when their name is not such a hash (a generation written before names
 * carried one), when they are class sets (small, fingerprinted by the inspector: an element
 * slipped into one is drift, and a plain apply undoes it), and, with `force`, all of them.
 *
 * Measured under traffic (prove's reapply scenario): deleting and recreating the table lost 1–6
 * allowed packets per 1,000 replaces, and so did recreating only the sets inside a kept table: a
 * set created in the transaction that makes rules refer to it matches nothing for an instant
 * during the commit, so anti-spoofing dropped legitimate sources. A set staged by an earlier
 * transaction is complete when the rules switch to it. Flushing and refilling a kept set in the
 * swap is lossless too, but the kernel walks every old element (+60 ms at 100k).
 */
export function planLoad(
  ruleset: string,
  table: string,
  live: readonly LiveObject[],
  options: { readonly force?: boolean; readonly parallel?: number } = {},
): LoadPlan {
  const target = `inet ${table}`;
  const blocks = definitionBlocks(ruleset, table);
  const wanted = new Map(blocks.map((b) => [`${b.kind} ${b.name}`, b]));
  const header = [`table ${target} {}`, `flush table ${target}`];
  const sets: SetChange[] = [];
  const liveSets = new Map<string, 'keep' | 'refill' | 'recreate'>();
  for (const { kind, body } of live) {
    if (kind !== 'set' && kind !== 'chain' && kind !== 'counter') continue;
    const name = typeof body['name'] === 'string' ? body['name'] : '';
    const block = wanted.get(`${kind} ${name}`);
    if (block === undefined || (kind === 'set' && name === STAMP_SET)) {
      header.push(`delete ${kind} ${target} ${name}`);
      if (kind === 'set' && name !== STAMP_SET) sets.push({ name, action: 'delete', elements: 0 });
    } else if (kind === 'set') {
      const fate = liveSetFate(block, body, options.force === true);
      liveSets.set(name, fate);
      if (fate !== 'keep') {
        header.push(`${fate === 'refill' ? 'flush' : 'delete'} set ${target} ${name}`);
        sets.push({ name, action: fate, elements: elementCount(block) });
      }
    }
  }
  const defined: string[] = [];
  const staged: Block[] = [];
  for (const block of blocks) {
    const fate = liveSets.get(block.name);
    if (block.kind !== 'set' || block.name === STAMP_SET) defined.push(block.text);
    else if (fate === undefined) staged.push(block);
    else if (fate !== 'keep') defined.push(block.text);
  }
  sets.push(
    ...staged.map((b) => ({ name: b.name, action: 'stage' as const, elements: elementCount(b) })),
  );
  const groups = groupByWeight(staged, options.parallel ?? 1);
  return {
    stage: groups.map((group) =>
      [`table ${target} {`, group.map((b) => b.text).join('\n\n'), '}', ''].join('\n'),
    ),
    swap: [...header, `table ${target} {`, defined.join('\n\n'), '}', ''].join('\n'),
    staged: groups.map((group) => group.map((b) => b.name)),
    sets,
  };
}

/** What the swap does with a live set of a wanted name (see planLoad). */
function liveSetFate(
  block: Block,
  live: Record<string, unknown>,
  force: boolean,
): 'keep' | 'refill' | 'recreate' {
  const end = block.text.indexOf('\n\t\telements');
  const head = end === -1 ? block.text : block.text.slice(0, end);
  const type = /\n\t\ttype (\S+)/.exec(head)?.[1];
  const flags = /\n\t\tflags ([^\n]+)/.exec(head)?.[1]?.split(/,\s*/) ?? [];
  const liveFlags = Array.isArray(live['flags']) ? (live['flags'] as unknown[]).map(String) : [];
  const declared =
    live['type'] === type &&
    flags.length === liveFlags.length &&
    flags.every((f) => liveFlags.includes(f));
  // A set of another type (made by hand) cannot be flushed into shape: it is recreated.
  if (!declared) return 'recreate';
  const comment = /\n\t\tcomment "([^"]*)"/.exec(head)?.[1] ?? '';
  if (force || CLASS_SET_COMMENT.test(comment) || !isNamedByContent(block)) return 'refill';
  return 'keep';
}

/**
 * Loads a compiled ruleset as `planLoad` plans it: the staging transactions in parallel, then
 * the swap. If anything fails, the staged sets are deleted again (the table, if there was none
 * before), so a rejected load leaves the host as it was. `beforeSwap` runs in between.
 */
export async function loadTable(
  runner: Runner,
  table: string,
  plan: LoadPlan,
  options: {
    readonly tableWasAbsent: boolean;
    readonly beforeSwap?: () => Promise<void>;
    readonly timer?: StepTimer;
  },
): Promise<void> {
  const timer = options.timer ?? createStepTimer();
  const results = await timer.time('stage sets', () =>
    Promise.allSettled(plan.stage.map((t) => loadRuleset(runner, t))),
  );
  const loaded = plan.staged.filter((_, i) => results[i]?.status === 'fulfilled').flat();
  let step = 'Cannot load the new sets before the swap';
  try {
    const failed = results.find((r) => r.status === 'rejected');
    if (failed !== undefined) throw failed.reason;
    await options.beforeSwap?.();
    step = 'Cannot switch to the new table: the kernel rejected the swap transaction';
    await timer.time('swap', () => loadRuleset(runner, plan.swap));
  } catch (error) {
    const undo = options.tableWasAbsent
      ? [`delete table inet ${table}`]
      : loaded.map((name) => `delete set inet ${table} ${name}`);
    let undone = 'nothing changed';
    if (undo.length > 0) {
      const result = await runner.run(['nft', '-f', '-'], {
        effect: 'change',
        input: `${undo.join('\n')}\n`,
        allowFailure: true,
      });
      undone =
        result.exitCode === 0
          ? 'nothing changed (the staged sets were removed again)'
          : `the staged sets could not be removed (${result.stderr.trim()}); unused, they go with the next apply`;
    }
    // nft's line numbers count in a transaction that is on no disk: say which one it was.
    if (!(error instanceof EgressguardError) || error.code !== 'command-failed') throw error;
    throw new EgressguardError(error.code, `${step}; ${undone}: ${error.message}`, {
      cause: error,
      hint: 'run `egressguard plan POLICY`: it checks the whole ruleset with `nft -c` and lists the sets',
    });
  }
}

/** At most `parallel` groups of similar size: each block, largest first, to the lightest. */
function groupByWeight(blocks: readonly Block[], parallel: number): Block[][] {
  if (blocks.length === 0) return [];
  const total = blocks.reduce((sum, b) => sum + b.text.length, 0);
  const count = Math.max(
    1,
    Math.min(parallel, blocks.length, Math.ceil(total / STAGE_CHUNK_CHARS)),
  );
  const groups = Array.from({ length: count }, () => ({ weight: 0, blocks: [] as Block[] }));
  for (const block of [...blocks].sort((a, b) => b.text.length - a.text.length)) {
    const lightest = groups.reduce((min, g) => (g.weight < min.weight ? g : min));
    lightest.blocks.push(block);
    lightest.weight += block.text.length;
  }
  return groups.map((g) => g.blocks);
}
