import {
  cpSync,
  existsSync,
  mkdirSync,
  mkdtempSync,
  readFileSync,
  readdirSync,
  rmSync,
} from 'node:fs';
import { symlinkSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { execa } from 'execa';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { enginesExcluding, type LockPackage } from './engines-check.js';

const REPO = fileURLToPath(new URL('../..', import.meta.url));

/** npm's own variables (set when the suite runs under `npm test`) would steer the child npm. */
function cleanEnv(extra: Record<string, string> = {}): Record<string, string> {
  const env: Record<string, string> = {};
  for (const [key, value] of Object.entries(process.env)) {
    if (value !== undefined && !/^npm_/i.test(key)) env[key] = value;
  }
  return { ...env, NO_COLOR: '1', ...extra };
}

/** The README's tour: its `console` blocks, each command (`$ …`) with the output printed under it. */
function tourCommands(readme: string): { command: string; expected: string[] }[] {
  const start = readme.indexOf('## A five-minute tour');
  const end = readme.indexOf('\n## ', start + 1);
  const tour = readme.slice(start, end);
  const steps: { command: string; expected: string[] }[] = [];
  for (const [, block = ''] of tour.matchAll(/```console\n([\s\S]*?)```/g)) {
    for (const line of block.trimEnd().split('\n')) {
      if (line.startsWith('$ ')) steps.push({ command: line.slice(2), expected: [] });
      else steps.at(-1)?.expected.push(line);
    }
  }
  return steps;
}

/** Every package installed under `dir` (nested node_modules too), keyed by its path from `dir`. */
function installedPackages(dir: string, base = ''): Record<string, LockPackage> {
  const out: Record<string, LockPackage> = {};
  const modules = join(dir, 'node_modules');
  if (!existsSync(modules)) return out;
  for (const entry of readdirSync(modules)) {
    const names = entry.startsWith('@')
      ? readdirSync(join(modules, entry)).map((name) => `${entry}/${name}`)
      : entry.startsWith('.')
        ? []
        : [entry];
    for (const name of names) {
      const path = `${base}node_modules/${name}`;
      const manifest = join(modules, name, 'package.json');
      if (!existsSync(manifest)) continue;
      out[path] = JSON.parse(readFileSync(manifest, 'utf8')) as LockPackage;
      Object.assign(out, installedPackages(join(modules, name), `${path}/`));
    }
  }
  return out;
}

/** A transcript's expected lines as one pattern: a line `…` stands for any lines. */
function transcriptPattern(expected: readonly string[]): RegExp {
  const escape = (s: string): string => s.replace(/[.*+?^${}()|[\]\\]/g, '\\$&');
  const body = expected
    .map((line) => (line.trim() === '…' ? '(?:[^\\n]*\\n)*?' : `${escape(line)}\\n`))
    .join('');
  return new RegExp(`^${body}$`);
}

// The path a new user takes (README "Install"): a clone without dist/, `npm pack` (whose prepack
// builds the bundle), `npm install -g` of the tarball, then the tour with `egressguard` from PATH.
describe('install from the package tarball, then the README tour', () => {
  const work = mkdtempSync(join(tmpdir(), 'eg-install-'));
  const clone = join(work, 'clone');
  const prefix = join(work, 'prefix');
  const installed = join(prefix, 'lib/node_modules/egressguard');
  const path = [
    join(prefix, 'bin'),
    dirname(process.execPath),
    '/usr/sbin',
    '/usr/bin',
    '/sbin',
    '/bin',
  ];
  let tarball = '';
  let tarballFiles: string[] = [];
  let installLog = '';

  beforeAll(async () => {
    // The files a clone has (tracked, and new ones not yet committed), so no dist/ from a build.
    const listed = await execa(
      'git',
      ['ls-files', '-z', '--cached', '--others', '--exclude-standard'],
      { cwd: REPO },
    );
    for (const file of listed.stdout.split('\0')) {
      if (file === '' || !existsSync(join(REPO, file))) continue; // deleted, not yet committed
      mkdirSync(dirname(join(clone, file)), { recursive: true });
      cpSync(join(REPO, file), join(clone, file));
    }
    expect(existsSync(join(clone, 'dist'))).toBe(false);
    // The dependencies `npm ci` would install: the same tree, linked rather than installed again.
    symlinkSync(join(REPO, 'node_modules'), join(clone, 'node_modules'));
    await execa('npm', ['pack', '--pack-destination', work], { cwd: clone, env: cleanEnv() });
    const name = readdirSync(work).find((f) => f.endsWith('.tgz'));
    if (name === undefined) throw new Error(`npm pack wrote no tarball into ${work}`);
    tarball = join(work, name);
    tarballFiles = (await execa('tar', ['-tzf', tarball])).stdout.split('\n');
    // From here on nothing of the clone's build can stand in for the installed package.
    rmSync(join(clone, 'node_modules'));
    rmSync(join(clone, 'dist'), { recursive: true, force: true });
    // --ignore-scripts: better-sqlite3's addon build (~80 s here) is the fleet store's and npm's
    // business; the tour opens no store. npm's cache, warm from `npm ci`, serves the packages.
    const install = await execa(
      'npm',
      [
        'install',
        '--global',
        '--prefix',
        prefix,
        tarball,
        '--prefer-offline',
        '--ignore-scripts',
        '--no-audit',
        '--no-fund',
      ],
      { cwd: work, env: cleanEnv(), all: true },
    );
    installLog = install.all;
  }, 900_000);

  afterAll(() => {
    rmSync(work, { recursive: true, force: true });
  });

  const shell = (script: string, cwd = clone) =>
    execa('bash', ['-c', script], {
      cwd,
      env: cleanEnv({ PATH: path.join(':') }),
      all: true,
      reject: false,
    });

  it('packs the CLI that prepack built, and none of the sources or tests', () => {
    for (const file of [
      'package/bin/egressguard.js',
      'package/dist/bundle/egressguard.cjs',
      'package/dist/index.js',
      'package/schema/policy.schema.json',
      'package/scripts/lab/probe.py',
    ]) {
      expect(tarballFiles).toContain(file);
    }
    expect(tarballFiles.filter((f) => /^package\/(src|test|testdata)\//.test(f))).toEqual([]);
  });

  it('installs with no package that excludes the Node versions egressguard supports', () => {
    expect(installLog).not.toMatch(/EBADENGINE/);
    const manifest = JSON.parse(readFileSync(join(REPO, 'package.json'), 'utf8')) as {
      engines: { node: string };
    };
    // A global install writes no lockfile: read the installed packages' own package.json.
    const packages = installedPackages(installed);
    expect(Object.keys(packages)).toContain('node_modules/fastify');
    expect(enginesExcluding(manifest.engines.node, packages)).toEqual([]);
  });

  it('puts egressguard on PATH, which prints its version', async () => {
    const which = await shell('command -v egressguard');
    expect(which.all).toBe(join(prefix, 'bin/egressguard'));
    const version = await shell('egressguard --version', work);
    expect(version.exitCode).toBe(0);
    expect(version.all.split('\n').slice(0, 2)).toEqual([
      'egressguard 0.1.0',
      // The copy it was packed from is no git checkout.
      'commit    unknown (built outside a git checkout)',
    ]);
  });

  it("runs the README tour's commands and prints what the README shows", async () => {
    const readme = readFileSync(join(REPO, 'README.md'), 'utf8');
    // `sudo` steps need root and build a lab (prove --lab): test/netns/prove.test.ts runs them.
    const steps = tourCommands(readme).filter((s) => !s.command.startsWith('sudo '));
    expect(steps.map((s) => s.command.split(' ')[0])).toEqual(
      expect.arrayContaining(['cd', 'egressguard']),
    );
    // One shell, so a `cd` holds for the steps after it; a marker line before each step.
    const marker = (i: number): string => `@@tour-step-${i}@@`;
    const script = steps.map((s, i) => `echo '${marker(i)}'\n${s.command} 2>&1`).join('\n');
    const result = await shell(script);
    const outputs = result.all.split(/^@@tour-step-\d+@@\n?/m).slice(1);
    expect(outputs).toHaveLength(steps.length);
    steps.forEach((step, i) => {
      const output = (outputs[i] ?? '').replace(/[ \t]+$/gm, '');
      const text = output === '' || output.endsWith('\n') ? output : `${output}\n`;
      const expected = step.expected.map((line) => line.replace(/[ \t]+$/, ''));
      expect(text, `$ ${step.command}`).toMatch(transcriptPattern(expected));
    });
  });

  it("writes the installed binary's path into the units' ExecStart", async () => {
    const units = await shell('egressguard units --policy /etc/egressguard/policy.yaml', work);
    expect(units.exitCode).toBe(0);
    const execStarts = units.all.split('\n').filter((line) => line.startsWith('ExecStart='));
    expect(execStarts.length).toBeGreaterThanOrEqual(2);
    for (const line of execStarts) {
      expect(line).toContain(`${process.execPath} ${join(installed, 'bin/egressguard.js')} `);
      expect(line).not.toContain(REPO);
    }
  });
});
