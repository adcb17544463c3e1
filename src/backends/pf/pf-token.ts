import { mkdirSync, readFileSync, renameSync, rmSync, writeFileSync } from 'node:fs';
import { dirname } from 'node:path';
import { EgressguardError } from '../../core/index.js';

/** egressguard's own pf enable reference (`pfctl -E`), as recorded on disk. */
export interface OwnToken {
  readonly token: string;
  /** When it was taken (ISO time), for people reading the file. */
  readonly takenAt: string;
}

/** The recorded token, or null when none is recorded. */
export function readOwnToken(path: string): OwnToken | null {
  let text: string;
  try {
    text = readFileSync(path, 'utf8');
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code === 'ENOENT') return null;
    throw new EgressguardError('io', `Cannot read the pf token file "${path}"`, { cause: error });
  }
  try {
    const value = JSON.parse(text) as Partial<OwnToken>;
    if (typeof value.token === 'string' && /^\d+$/.test(value.token)) {
      return { token: value.token, takenAt: value.takenAt ?? '' };
    }
  } catch {
    // fall through: a torn or foreign file
  }
  throw new EgressguardError(
    'state-corrupt',
    `Cannot use the pf token file "${path}": no token in it`,
    {
      hint: 'check `pfctl -s References` for an egressguard token, release it with `pfctl -X TOKEN`, then remove the file',
    },
  );
}

export function writeOwnToken(path: string, token: string): void {
  mkdirSync(dirname(path), { recursive: true });
  const temporary = `${path}.${process.pid}.tmp`;
  writeFileSync(temporary, `${JSON.stringify({ token, takenAt: new Date().toISOString() })}\n`);
  renameSync(temporary, path);
}

export function forgetOwnToken(path: string): void {
  rmSync(path, { force: true });
}
