/**
 * One argument of a systemd command line: `%` is a specifier and `$` a variable to systemd
 * (systemd.unit(5) "Specifiers", systemd.service(5) "Command lines"), and a word with spaces,
 * quotes, backslashes or control characters goes in double quotes with C-style escapes
 * (systemd.syntax(7) "Quoting").
 */
export function systemdQuote(word: string): string {
  return quoteWord(word.replaceAll('$', '$$$$'));
}

/**
 * The value of `ExecStart=` and its kin: the executable, then its arguments. The executable takes
 * specifiers but never variables, so a `$` in its path stays as written (systemd.service(5)).
 */
export function systemdCommandLine(command: string, args: readonly string[]): string {
  return [quoteWord(command), ...args.map(systemdQuote)].join(' ');
}

/**
 * The value of `Environment=` for one variable: quoted whole, with specifiers escaped; `$` has no
 * meaning there (systemd.exec(5) "Environment=").
 */
export function systemdEnvironment(name: string, value: string): string {
  return quoteWord(`${name}=${value}`);
}

function quoteWord(word: string): string {
  const escaped = word.replaceAll('%', '%%');
  if (/^[A-Za-z0-9_@%+=:,./-]+$/.test(escaped)) return escaped;
  return `"${Array.from(escaped, escapeCharacter).join('')}"`;
}

const NAMED_ESCAPES: Readonly<Record<string, string>> = {
  '\\': '\\\\',
  '"': '\\"',
  '\n': '\\n',
  '\t': '\\t',
};

function escapeCharacter(character: string): string {
  const named = NAMED_ESCAPES[character];
  if (named !== undefined) return named;
  const code = character.charCodeAt(0);
  return code < 0x20 || code === 0x7f ? `\\x${code.toString(16).padStart(2, '0')}` : character;
}
