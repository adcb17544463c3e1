import { existsSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { dirname } from 'node:path';
import { EgressguardError } from '../core/index.js';
import { createSecret } from '../fleet/index.js';

export const OPERATOR_TOKEN_ENV = 'EGRESSGUARD_OPERATOR_TOKEN';

/** The scrape credential `/metrics` asks for, when not in a file. */
export const METRICS_TOKEN_ENV = 'EGRESSGUARD_METRICS_TOKEN';

/**
 * The operator token, from a file or the environment, never from argv (it would show in `ps`).
 * With neither, the server creates `fallbackFile` (0600) on first start.
 */
export function loadOperatorToken(options: {
  file?: string | undefined;
  fallbackFile: string;
  create: boolean;
}): { token: string; source: string } {
  return loadToken({ ...options, env: OPERATOR_TOKEN_ENV, prefix: 'ego1' });
}

/** The metrics scrape token: like the operator token, from its own file or variable. */
export function loadMetricsToken(options: { file?: string | undefined; fallbackFile: string }): {
  token: string;
  source: string;
} {
  return loadToken({ ...options, create: true, env: METRICS_TOKEN_ENV, prefix: 'egm1' });
}

function loadToken(options: {
  file?: string | undefined;
  fallbackFile: string;
  create: boolean;
  env: string;
  prefix: string;
}): { token: string; source: string } {
  if (options.file !== undefined) return { token: readToken(options.file), source: options.file };
  const fromEnv = process.env[options.env];
  if (fromEnv !== undefined && fromEnv.trim() !== '')
    return { token: fromEnv.trim(), source: options.env };
  if (existsSync(options.fallbackFile))
    return { token: readToken(options.fallbackFile), source: options.fallbackFile };
  if (!options.create) {
    throw new EgressguardError(
      'usage',
      `Cannot find an operator token: "${options.fallbackFile}" does not exist`,
      {
        hint: `pass --operator-token-file FILE or set ${options.env}`,
      },
    );
  }
  mkdirSync(dirname(options.fallbackFile), { recursive: true, mode: 0o700 });
  const token = `${options.prefix}.${createSecret()}`;
  writeFileSync(options.fallbackFile, `${token}\n`, { mode: 0o600, flag: 'wx' });
  return { token, source: options.fallbackFile };
}

function readToken(file: string): string {
  let text: string;
  try {
    text = readFileSync(file, 'utf8').trim();
  } catch (error) {
    throw new EgressguardError(
      'io',
      `Cannot read the operator token "${file}": ${(error as Error).message}`,
    );
  }
  if (text.length < 16) {
    throw new EgressguardError(
      'usage',
      `Cannot use the operator token in "${file}": it is shorter than 16 characters`,
    );
  }
  return text;
}
