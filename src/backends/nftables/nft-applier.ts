import { EgressguardError } from '../../core/index.js';
import type { Runner } from '../../runner/index.js';

/**
 * Loads a whole ruleset transaction with `nft -f -`. The transaction declares, deletes and
 * defines our table, so the kernel either takes all of it or keeps the old table: no separate
 * `nft -c` is needed first (it would cost as much as the load).
 */
export async function loadRuleset(runner: Runner, ruleset: string): Promise<void> {
  await runner.run(['nft', '-f', '-'], { effect: 'change', input: ruleset });
}

/** The test fault that makes apply load a ruleset the kernel rejects (EGRESSGUARD_FAULTS). */
export const BROKEN_RULESET_FAULT = 'compile.broken-ruleset';

/**
 * Test fault only: appends a jump loop to `ruleset`. nft parses and evaluates it; the kernel
 * refuses it at commit ("Too many links"), after the batch already deleted the old table, so it
 * proves the whole transaction is rolled back, not just that nft's parser is strict.
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

interface DeclaredSet {
  readonly type: string;
  readonly flags: readonly string[];
  readonly comment: string;
}

/**
 * Rewrites a compiled transaction to replace a live table in place: flush its rules and the
 * elements of the sets it keeps, drop what the new definition no longer has, and define the rest.
 * Deleting and recreating the whole table instead lost 1–6 allowed packets per 1,000 replaces under
 * traffic (prove's reapply scenario): for an instant during the commit the freshly created source
 * sets matched nothing, so anti-spoofing dropped legitimate sources. In place: 0 in 2,000. It is
 * still one transaction, and counters keep counting without being seeded.
 */
export function replaceInPlace(
  ruleset: string,
  table: string,
  live: readonly { readonly kind: string; readonly body: Record<string, unknown> }[],
): string {
  const declared = {
    set: new Map<string, DeclaredSet>(),
    chain: new Set<string>(),
    counter: new Set<string>(),
  };
  const lines = ruleset.split('\n');
  lines.forEach((line, i) => {
    const match = /^\t(set|chain|counter) (\S+) \{$/.exec(line);
    if (match === null) return;
    const [, kind, name = ''] = match;
    if (kind === 'chain') declared.chain.add(name);
    else if (kind === 'counter') declared.counter.add(name);
    else declared.set.set(name, readDeclaredSet(lines, i + 1));
  });
  const target = `inet ${table}`;
  const commands: string[] = [`table ${target} {}`, `flush table ${target}`];
  for (const { kind, body } of live) {
    const name = typeof body['name'] === 'string' ? body['name'] : '';
    if (kind === 'chain' && !declared.chain.has(name))
      commands.push(`delete chain ${target} ${name}`);
    if (kind === 'counter' && !declared.counter.has(name)) {
      commands.push(`delete counter ${target} ${name}`);
    }
    if (kind === 'set') {
      const wanted = declared.set.get(name);
      // A set whose type, flags or comment change is recreated; the others keep their object and
      // only swap elements. The stamp's comment carries the hash, so it is always recreated.
      commands.push(
        wanted !== undefined && sameSet(wanted, body)
          ? `flush set ${target} ${name}`
          : `delete set ${target} ${name}`,
      );
    }
  }
  const definition = lines.findIndex((l) => l === `table ${target} {`);
  return [...commands, ...lines.slice(definition)].join('\n');
}

function readDeclaredSet(lines: readonly string[], from: number): DeclaredSet {
  let type = '';
  let flags: string[] = [];
  let comment = '';
  for (let i = from; i < lines.length && lines[i] !== '\t}'; i++) {
    const line = (lines[i] ?? '').trim();
    if (line.startsWith('type ')) type = line.slice(5);
    else if (line.startsWith('flags ')) flags = line.slice(6).split(/,\s*/);
    else if (line.startsWith('comment ')) comment = JSON.parse(line.slice(8)) as string;
    else if (line.startsWith('elements')) break;
  }
  return { type, flags, comment };
}

function sameSet(wanted: DeclaredSet, live: Record<string, unknown>): boolean {
  const flags = Array.isArray(live['flags']) ? (live['flags'] as unknown[]).map(String) : [];
  return (
    live['type'] === wanted.type &&
    live['comment'] === wanted.comment &&
    flags.length === wanted.flags.length &&
    wanted.flags.every((f) => flags.includes(f))
  );
}
