import { randomBytes } from 'node:crypto';
import {
  closeSync,
  fchmodSync,
  fchownSync,
  fstatSync,
  fsyncSync,
  openSync,
  readdirSync,
  realpathSync,
  renameSync,
  statSync,
  unlinkSync,
  writeSync,
} from 'node:fs';
import { basename, dirname, join } from 'node:path';
import type { Faults } from '../../runner/index.js';

/** Reached after the new pf.conf is on disk and before it replaces the old one. */
export const PF_CONF_RENAME_POINT = 'before-pf-conf-rename';

/**
 * Replaces pf.conf so that a crash or power loss leaves the old file or the new one, never a
 * torn one: a temporary file in the same directory (rename(2) is atomic only within one file
 * system), written, given the old file's mode and owner, fsynced, renamed over the old one, and
 * the directory fsynced so the rename itself is durable. A symlinked pf.conf (configuration
 * management often links it) stays a link: the file written is its target (realpath), or the
 * rename would replace the link with a regular file.
 */
export async function writePfConf(
  path: string,
  text: string,
  options: { readonly faults?: Faults } = {},
): Promise<void> {
  const target = realpathSync(path);
  const directory = dirname(target);
  const prefix = `.${basename(target)}.egressguard.`;
  removeStaleTemporaries(directory, prefix);
  const old = statSync(target);
  const temporary = join(directory, `${prefix}${randomBytes(6).toString('hex')}.tmp`);
  try {
    // `wx`: never through a file (or a link) someone put at that name.
    const fd = openSync(temporary, 'wx', 0o600);
    try {
      writeAll(fd, Buffer.from(text, 'utf8'));
      // Mode after the owner: chown(2) clears set-id bits. Neither is left to the umask.
      const created = fstatSync(fd);
      if (created.uid !== old.uid || created.gid !== old.gid) fchownSync(fd, old.uid, old.gid);
      fchmodSync(fd, old.mode & 0o7777);
      // macOS fsync(2) moves the data to the drive, which may still cache it (F_FULLFSYNC would
      // not; node does not offer it). It is what the rename must come after either way.
      fsyncSync(fd);
    } finally {
      closeSync(fd);
    }
    await options.faults?.hit(PF_CONF_RENAME_POINT);
    renameSync(temporary, target);
  } catch (error) {
    removeQuietly(temporary);
    throw error;
  }
  syncDirectory(directory);
}

function writeAll(fd: number, data: Buffer): void {
  let offset = 0;
  while (offset < data.length) offset += writeSync(fd, data, offset, data.length - offset);
}

/** Temporaries of a write that died before its rename (a crash, a kill). */
function removeStaleTemporaries(directory: string, prefix: string): void {
  for (const entry of readdirSync(directory)) {
    if (entry.startsWith(prefix) && entry.endsWith('.tmp')) removeQuietly(join(directory, entry));
  }
}

function removeQuietly(path: string): void {
  try {
    unlinkSync(path);
  } catch {
    // Gone already.
  }
}

function syncDirectory(directory: string): void {
  const fd = openSync(directory, 'r');
  try {
    fsyncSync(fd);
  } catch (error) {
    // Some file systems refuse fsync on a directory; the rename is done, only less durable.
    if (!['EINVAL', 'ENOTSUP', 'EISDIR'].includes((error as NodeJS.ErrnoException).code ?? '')) {
      throw error;
    }
  } finally {
    closeSync(fd);
  }
}
