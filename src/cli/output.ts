import type { Writable } from 'node:stream';

/** Where a command writes, and whether it may colour its output. */
export interface Output {
  readonly out: Writable;
  readonly err: Writable;
  readonly color: boolean;
}

export function createOutput(): Output {
  const color =
    process.env['NO_COLOR'] === undefined &&
    (process.env['FORCE_COLOR'] !== undefined || process.stdout.isTTY);
  return { out: process.stdout, err: process.stderr, color };
}

const CODES = { red: 31, green: 32, yellow: 33, bold: 1, dim: 2, cyan: 36 } as const;

export function paint(output: Output, style: keyof typeof CODES, text: string): string {
  return output.color ? `\u001b[${CODES[style]}m${text}\u001b[0m` : text;
}

export function printLine(output: Output, line = ''): void {
  output.out.write(`${line}\n`);
}

export function printJson(output: Output, value: unknown): void {
  output.out.write(`${JSON.stringify(value, null, 2)}\n`);
}

/** Progress for long work: on stderr, only on a terminal, so pipes and --json stay clean. */
export function progress(output: Output, message: string): void {
  if (process.stderr.isTTY) output.err.write(`${paint(output, 'dim', message)}\n`);
}

/** Columns padded to their widest cell; `indent` starts every line, `headerStyle` paints the header. */
export function printTable(
  output: Output,
  header: readonly string[],
  rows: readonly (readonly string[])[],
  options: { readonly indent?: string; readonly headerStyle?: keyof typeof CODES } = {},
): void {
  const widths = header.map((h, i) => Math.max(h.length, ...rows.map((r) => (r[i] ?? '').length)));
  const format = (cells: readonly string[]): string =>
    `${options.indent ?? ''}${cells.map((c, i) => c.padEnd(widths[i] ?? 0)).join('  ')}`.trimEnd();
  const head = format(header);
  printLine(
    output,
    options.headerStyle === undefined ? head : paint(output, options.headerStyle, head),
  );
  for (const row of rows) printLine(output, format(row));
}
