import { readFileSync } from 'node:fs';
import { EgressguardError } from '../core/index.js';

/** Where a host's labels live: `key=value` lines, `#` comments. */
export const DEFAULT_LABELS_FILE = '/etc/egressguard/labels';

/** The labels file this host reads: $EGRESSGUARD_LABELS_FILE, else /etc/egressguard/labels. */
export function labelsFile(): string {
  return process.env['EGRESSGUARD_LABELS_FILE'] ?? DEFAULT_LABELS_FILE;
}

/** Parses `key=value` entries (from --label or a labels file line). */
export function parseLabel(entry: string, where: string): [string, string] {
  const eq = entry.indexOf('=');
  const key = entry.slice(0, eq).trim();
  if (eq <= 0 || !/^[A-Za-z0-9_./-]+$/.test(key)) {
    throw new EgressguardError('usage', `Cannot parse label "${entry}" in ${where}`, {
      hint: 'write key=value, e.g. role=vpn-gateway',
    });
  }
  return [key, entry.slice(eq + 1).trim()];
}

/**
 * The labels of this host: the labels file ($EGRESSGUARD_LABELS_FILE or /etc/egressguard/labels),
 * so `apply`, `run` and the boot units see the same labels the fleet assigned.
 */
export function readHostLabels(): Record<string, string> {
  const file = labelsFile();
  let text: string;
  try {
    text = readFileSync(file, 'utf8');
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code === 'ENOENT') return {};
    throw new EgressguardError(
      'io',
      `Cannot read host labels "${file}": ${(error as Error).message}`,
    );
  }
  const labels: Record<string, string> = {};
  text.split('\n').forEach((raw, i) => {
    const line = raw.replace(/#.*/, '').trim();
    if (line === '') return;
    const [key, value] = parseLabel(line, `${file}:${i + 1}`);
    labels[key] = value;
  });
  return labels;
}
