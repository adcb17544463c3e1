import {
  chmodSync,
  chownSync,
  lstatSync,
  mkdirSync,
  mkdtempSync,
  readdirSync,
  readFileSync,
  readlinkSync,
  rmSync,
  statSync,
  symlinkSync,
  writeFileSync,
} from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { Faults } from '../../runner/index.js';
import { PF_CONF_RENAME_POINT, writePfConf } from './write-pf-conf.js';

const dirs: string[] = [];
afterEach(() => {
  for (const d of dirs.splice(0)) rmSync(d, { recursive: true, force: true });
});

function scratch(): string {
  const dir = mkdtempSync(join(tmpdir(), 'eg-pf-conf-write-'));
  dirs.push(dir);
  return dir;
}

describe('writePfConf: pf.conf replaced atomically', () => {
  it('writes through a symlinked pf.conf onto its target: the link stays a link', async () => {
    const dir = scratch();
    mkdirSync(join(dir, 'managed'));
    const real = join(dir, 'managed', 'pf.conf');
    writeFileSync(real, 'old\n');
    const link = join(dir, 'pf.conf');
    symlinkSync('managed/pf.conf', link);
    await writePfConf(link, 'new\n');
    expect(lstatSync(link).isSymbolicLink()).toBe(true);
    expect(readlinkSync(link)).toBe('managed/pf.conf');
    expect(readFileSync(real, 'utf8')).toBe('new\n');
    // The temporary sat beside the target (one file system for rename(2)), and is gone.
    expect(readdirSync(join(dir, 'managed'))).toEqual(['pf.conf']);
    expect(readdirSync(dir).sort()).toEqual(['managed', 'pf.conf']);
  });

  it('keeps the mode, whatever the umask would give', async () => {
    const dir = scratch();
    const path = join(dir, 'pf.conf');
    writeFileSync(path, 'old\n');
    chmodSync(path, 0o664); // group-writable: a umask of 022 would take that bit away
    await writePfConf(path, 'new\n');
    expect(statSync(path).mode & 0o7777).toBe(0o664);
    expect(readFileSync(path, 'utf8')).toBe('new\n');
  });

  it.runIf(process.getuid?.() === 0)('keeps the owner and group (as root)', async () => {
    const dir = scratch();
    const path = join(dir, 'pf.conf');
    writeFileSync(path, 'old\n');
    chownSync(path, 4321, 4322);
    chmodSync(path, 0o644);
    await writePfConf(path, 'new\n');
    const after = statSync(path);
    expect([after.uid, after.gid, after.mode & 0o7777]).toEqual([4321, 4322, 0o644]);
  });

  it('leaves the old file whole when it stops before the rename, and the next write tidies up', async () => {
    const dir = scratch();
    const path = join(dir, 'pf.conf');
    writeFileSync(path, 'old\n');
    const faults = new Faults();
    faults.set(PF_CONF_RENAME_POINT, 'fail');
    await expect(writePfConf(path, 'new\n', { faults })).rejects.toThrow(
      `Fault injected at "${PF_CONF_RENAME_POINT}"`,
    );
    expect(readFileSync(path, 'utf8')).toBe('old\n');
    expect(readdirSync(dir)).toEqual(['pf.conf']);
    // A write killed there leaves its temporary; the next one removes it.
    writeFileSync(join(dir, '.pf.conf.egressguard.0123456789ab.tmp'), 'half');
    await writePfConf(path, 'new\n');
    expect(readdirSync(dir)).toEqual(['pf.conf']);
    expect(readFileSync(path, 'utf8')).toBe('new\n');
  });
});
