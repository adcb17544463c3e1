import { join } from 'node:path';
import { EgressguardError } from '../core/index.js';

const DEFAULT_ROOT = '/var/lib/egressguard';

/** The server's state directory: `$EGRESSGUARD_STATE_DIR/server`, else /var/lib/egressguard/server. */
export function serverStateDir(): string {
  return join(process.env['EGRESSGUARD_STATE_DIR'] ?? DEFAULT_ROOT, 'server');
}

/** The controller operators talk to: --server, else $EGRESSGUARD_SERVER, else this machine. */
export function defaultServerUrl(): string {
  return process.env['EGRESSGUARD_SERVER'] ?? 'https://127.0.0.1:8443';
}

/** A whole number of at least `min` (the one number parser of the fleet commands). */
export function parseWholeNumber(text: string, option: string, min = 0): number {
  const value = Number(text);
  if (!/^\d+$/.test(text.trim()) || !Number.isSafeInteger(value) || value < min) {
    throw new EgressguardError(
      'usage',
      `Cannot use ${option} "${text}": expected a whole number of at least ${min}`,
    );
  }
  return value;
}

/** `90s`, `15m`, `24h`, `7d` or plain seconds. */
export function parseDurationMs(text: string, option: string): number {
  const match = /^(\d+)(ms|s|m|h|d)?$/.exec(text.trim());
  if (match === null) {
    throw new EgressguardError(
      'usage',
      `Cannot use ${option} "${text}": expected a duration such as 90s, 15m, 24h or 7d`,
    );
  }
  const unit = { ms: 1, s: 1000, m: 60_000, h: 3_600_000, d: 86_400_000 }[match[2] ?? 's'] ?? 1000;
  return Number(match[1]) * unit;
}
