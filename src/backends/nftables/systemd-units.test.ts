import { chmodSync, mkdirSync, mkdtempSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { execa } from 'execa';
import { afterAll, describe, expect, it } from 'vitest';
import { renderUnits } from './systemd-units.js';

/**
 * systemd's own reading of a rendered unit. `systemd --test` dumps each unit as loaded (quotes
 * and specifiers resolved) and refuses to run as root, so it runs as nobody.
 */
async function loadWithSystemd(
  unitDir: string,
  unit: string,
): Promise<{ environment: string[]; commandLine: string }> {
  const asNobody =
    process.getuid?.() === 0 ? ['setpriv', '--reuid=65534', '--regid=65534', '--clear-groups'] : [];
  const argv = [...asNobody, '/lib/systemd/systemd', '--test', '--system', `--unit=${unit}`];
  const result = await execa(argv[0] ?? '', argv.slice(1), {
    // The trailing colon keeps the standard search path after ours, for sysinit.target.
    env: { SYSTEMD_UNIT_PATH: `${unitDir}:`, HOME: '/' },
    reject: false,
  });
  expect(result.exitCode, result.stderr).toBe(0);
  const lines = result.stdout.split('\n');
  const start = lines.indexOf(`\t-> Unit ${unit}:`);
  expect(start, `systemd --test did not dump ${unit}`).toBeGreaterThanOrEqual(0);
  const end = lines.findIndex((line, i) => i > start && line.startsWith('\t-> Unit '));
  const section = lines.slice(start, end < 0 ? undefined : end);
  const values = (key: string): string[] =>
    section
      .filter((l) => l.trim().startsWith(`${key}: `))
      .map((l) => l.trim().slice(key.length + 2));
  const commandLines = values('Command Line');
  expect(commandLines).toHaveLength(1);
  return { environment: values('Environment'), commandLine: commandLines[0] ?? '' };
}

/** The dump prints a command line with shell quoting: `"…"` with `\` before `"`, `\`, `$` and `` ` ``. */
function splitDumpedCommandLine(line: string): string[] {
  const words: string[] = [];
  for (const match of line.matchAll(/"((?:[^"\\]|\\.)*)"|(\S+)/g)) {
    words.push(match[1] !== undefined ? match[1].replace(/\\(.)/g, '$1') : (match[2] ?? ''));
  }
  return words;
}

/**
 * What the process receives in an argument once systemd substitutes variables at exec time
 * (systemd.service(5) "Command lines"): `$$` is one `$`, `${NAME}` is replaced, and so is a word
 * that is only `$NAME`. Replacements show as `<NAME>` here so that an unescaped `$` cannot pass.
 */
function substituteVariables(word: string): string {
  if (/^\$[A-Za-z_][A-Za-z0-9_]*$/.test(word)) return `<${word.slice(1)}>`;
  return word.replace(/\$\$|\$\{([A-Za-z_][A-Za-z0-9_]*)\}/g, (whole, name?: string) =>
    name === undefined ? '$' : `<${name}>`,
  );
}

describe('renderUnits', () => {
  // Every character that means something to systemd in one path: a specifier (`%h`, the home
  // directory) and a lone `%`, variables in both forms, an escaped dollar, and spaces.
  const base = mkdtempSync(join(tmpdir(), 'eg units %h 100% ${HOME} $$ '));
  const unitDir = mkdtempSync(join(tmpdir(), 'eg-units-out-'));
  afterAll(() => {
    rmSync(base, { recursive: true, force: true });
    rmSync(unitDir, { recursive: true, force: true });
  });

  it('keeps paths with %, $, spaces, quotes and backslashes as they are, as systemd reads them', async () => {
    chmodSync(base, 0o755);
    chmodSync(unitDir, 0o755);
    const node = join(base, 'node');
    symlinkSync(process.execPath, node);
    mkdirSync(join(base, 'bin'));
    const options = {
      node,
      bin: join(base, 'bin', 'egressguard.js'),
      stateDir: join(base, 'state'),
      policy: join(base, 'policy "edge" \\ $HOME.yaml'),
    };
    const units = renderUnits(options);
    for (const unit of units)
      writeFileSync(join(unitDir, unit.name), unit.content, { mode: 0o644 });
    const services = ['egressguard-restore.service', 'egressguard.service'];

    // verify resolves the specifiers and checks that the executable's path names a program.
    const verify = await execa(
      'systemd-analyze',
      ['verify', ...services.map((name) => join(unitDir, name))],
      { reject: false },
    );
    expect(verify.stderr).toBe('');
    expect(verify.exitCode).toBe(0);

    const expected: Record<string, string[]> = {
      'egressguard-restore.service': [options.bin, 'restore'],
      'egressguard.service': [options.bin, 'run', options.policy],
    };
    for (const name of services) {
      const loaded = await loadWithSystemd(unitDir, name);
      // Environment= takes no variables: its `$` is the path's own.
      expect(loaded.environment).toEqual([`EGRESSGUARD_STATE_DIR=${options.stateDir}`]);
      const [command, ...args] = splitDumpedCommandLine(loaded.commandLine);
      // The executable is never substituted (systemd.service(5)); verify found it above.
      expect(command).toBe(node);
      expect(args.map(substituteVariables)).toEqual(expected[name]);
    }
  });
});
