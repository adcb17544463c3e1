import { createHash } from 'node:crypto';
import { EgressguardError } from '../../core/index.js';

// How sets are written in a compiled ruleset and read back from it: the compiler and the applier
// share these, so the two cannot drift apart.

/** The set whose comment carries the host config hash. */
export const STAMP_SET = 'stamp';

/**
 * The comment of the sets that say who a class is and where its kill switch lets it go. They are
 * small, the inspector fingerprints their elements, and every apply refills them.
 */
export const CLASS_SET_COMMENT = /^class /;

/** A set block: `\tset NAME {`, its definition (type, flags, comment, elements), `\t}`. */
export function setBlock(name: string, definition: string): string {
  return `\tset ${name} {\n${definition}\n\t}`;
}

/** The hash a set's name ends in: of its whole definition. */
export function definitionHash(definition: string): string {
  return createHash('sha256').update(definition).digest('hex').slice(0, 12);
}

/** Whether a set block's name ends in the hash of its definition (older names carry none). */
export function isNamedByContent(block: Block): boolean {
  const hash = /_([0-9a-f]{12})$/.exec(block.name)?.[1];
  if (hash === undefined) return false;
  const definition = block.text.slice(block.text.indexOf('\n') + 1, block.text.lastIndexOf('\n'));
  return hash === definitionHash(definition);
}

export interface Block {
  readonly kind: string;
  readonly name: string;
  readonly text: string;
}

/** The set, counter and chain blocks of the table definition in a compiled ruleset. */
export function definitionBlocks(ruleset: string, table: string): Block[] {
  const opening = `\ntable inet ${table} {\n`;
  const start = ruleset.indexOf(opening);
  const end = ruleset.lastIndexOf('\n}');
  if (start === -1 || end < start) {
    throw new EgressguardError(
      'state-corrupt',
      `Cannot find the definition of table inet ${table} in the compiled ruleset`,
      { hint: 'compile the policy again: the ruleset was not written by this egressguard' },
    );
  }
  // Blocks are separated by an empty line, and none has one inside (elements never do).
  return ruleset
    .slice(start + opening.length, end)
    .split('\n\n')
    .map((text) => {
      const match = /^\t(set|chain|counter) (\S+) \{/.exec(text);
      if (match === null) {
        throw new EgressguardError(
          'state-corrupt',
          `Cannot read a block of the compiled ruleset: ${JSON.stringify(text.slice(0, 60))}`,
          { hint: 'compile the policy again: the ruleset was not written by this egressguard' },
        );
      }
      return { kind: match[1] ?? '', name: match[2] ?? '', text };
    });
}

/** Elements in a set block: one more than the separators of its list, none without one. */
export function elementCount(block: Block): number {
  const start = block.text.indexOf('elements = {');
  if (start === -1) return 0;
  let count = 1;
  for (let i = block.text.indexOf(',', start); i !== -1; i = block.text.indexOf(',', i + 1))
    count++;
  return count;
}
