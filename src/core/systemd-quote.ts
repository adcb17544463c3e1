/**
 * One word of a systemd command line: `%` and `$` are specifiers and variables to systemd, and a
 * word with spaces or quotes goes in double quotes with C-style escapes (systemd.syntax(7)).
 */
export function systemdQuote(word: string): string {
  const escaped = word.replaceAll('%', '%%').replaceAll('$', '$$$$');
  if (/^[A-Za-z0-9_@%+=:,./-]+$/.test(escaped)) return escaped;
  return `"${escaped.replaceAll('\\', '\\\\').replaceAll('"', '\\"')}"`;
}
