import { EgressguardError } from '../../core/index.js';

export const DEFAULT_TABLE = 'egressguard';

// Stricter than nft's own identifier rule on purpose: a name we interpolate into a transaction
// and into argv must never carry ";", braces, quotes or whitespace.
const TABLE_NAME = /^[A-Za-z][A-Za-z0-9_]{0,31}$/;

/** Returns the owned table's name, or throws a usage error when it is not a plain identifier. */
export function checkTableName(name: string): string {
  if (TABLE_NAME.test(name)) return name;
  throw new EgressguardError(
    'usage',
    `Cannot use nft table name "${name}": a table name is a letter followed by at most 31 letters, digits or "_"`,
  );
}

/**
 * nft identifiers for our objects. Names allow letters, digits and "/_.-" (checked on nft 1.0.6);
 * anything else in a policy id is replaced, and a suffix keeps names unique.
 */
export function createNamer(): (prefix: string, id: string) => string {
  const used = new Map<string, string>();
  return (prefix, id) => {
    const key = `${prefix}\u0000${id}`;
    const known = used.get(key);
    if (known !== undefined) return known;
    let base = `${prefix}${id.replace(/[^A-Za-z0-9/_.-]/g, '_')}`.slice(0, 60);
    const taken = new Set(used.values());
    for (let i = 2; taken.has(base); i++) base = `${base.slice(0, 56)}~${i}`.replace('~', '_');
    used.set(key, base);
    return base;
  };
}

/** A string for an nft comment or log prefix: printable ASCII, no quotes. */
export function nftString(text: string, max = 127): string {
  return `"${text.replace(/[^\x20-\x7e]|"/g, '_').slice(0, max)}"`;
}
