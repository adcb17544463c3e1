import { EgressguardError } from '../../core/index.js';
import type { Runner } from '../../runner/index.js';
import type { CounterValue } from './nft-inspector.js';

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

/**
 * Carries counters over a replace: the transaction recreates them at 0, but nft accepts seeded
 * counters (`packets N bytes M`), so the ones we had keep counting from where they were.
 */
export function seedCounters(ruleset: string, counters: ReadonlyMap<string, CounterValue>): string {
  if (counters.size === 0) return ruleset;
  return ruleset.replace(
    /^(\tcounter (\S+) \{\n)(\t\tcomment "[^"\n]*"\n)(\t\})/gm,
    (whole, open: string, name: string, comment: string, close: string) => {
      const value = counters.get(name);
      if (value === undefined) return whole;
      return `${open}${comment}\t\tpackets ${value.packets} bytes ${value.bytes}\n${close}`;
    },
  );
}
