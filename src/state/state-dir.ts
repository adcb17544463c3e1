import {
  mkdirSync,
  readFileSync,
  renameSync,
  writeFileSync,
  openSync,
  fsyncSync,
  closeSync,
} from 'node:fs';
import { open, rename, writeFile } from 'node:fs/promises';
import { join } from 'node:path';

const DEFAULT_STATE_DIR = '/var/lib/egressguard';

/**
 * The one directory where egressguard keeps state. Each network namespace gets its own
 * subdirectory, so lab runs never read or overwrite the host's state.
 */
export class StateDir {
  readonly path: string;

  constructor(options: { root?: string | undefined; netns?: string | undefined } = {}) {
    const root = options.root ?? process.env['EGRESSGUARD_STATE_DIR'] ?? DEFAULT_STATE_DIR;
    this.path =
      options.netns === undefined ? join(root, 'host') : join(root, 'netns', options.netns);
  }

  file(name: string): string {
    return join(this.path, name);
  }

  ensure(): void {
    mkdirSync(this.path, { recursive: true, mode: 0o700 });
  }

  read(name: string): string | undefined {
    try {
      return readFileSync(this.file(name), 'utf8');
    } catch (error) {
      if ((error as NodeJS.ErrnoException).code === 'ENOENT') return undefined;
      throw error;
    }
  }

  /** Writes atomically: a crash leaves the old file or the new one, never half of either. */
  write(name: string, content: string): void {
    const { target, temp } = this.prepareWrite(name);
    writeFileSync(temp, content, { mode: 0o600 });
    const fd = openSync(temp, 'r');
    try {
      fsyncSync(fd);
    } finally {
      closeSync(fd);
    }
    renameSync(temp, target);
  }

  /** `write` off the event loop (libuv's thread pool), for large files written alongside work. */
  async writeAsync(name: string, content: string): Promise<void> {
    const { target, temp } = this.prepareWrite(name);
    await writeFile(temp, content, { mode: 0o600 });
    const handle = await open(temp, 'r');
    try {
      await handle.sync();
    } finally {
      await handle.close();
    }
    await rename(temp, target);
  }

  /** The file and the temporary one it is written to first, in an existing directory. */
  private prepareWrite(name: string): { target: string; temp: string } {
    this.ensure();
    const target = this.file(name);
    return { target, temp: `${target}.${process.pid}.tmp` };
  }
}
