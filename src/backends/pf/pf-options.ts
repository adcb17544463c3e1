import { EgressguardError } from '../../core/index.js';
import type { BackendOption, BackendOptions } from '../backend.js';

/** A sub-anchor of the stock `anchor "com.apple/*"` hooks: live without editing pf.conf. */
export const DEFAULT_ANCHOR = 'com.apple/250.egressguard';
export const DEFAULT_TOKEN_FILE = '/var/lib/egressguard/pf-token.json';
export const DEFAULT_PFCTL = '/sbin/pfctl';
/** Names the pfctl to run when `--pfctl` is not given (the pfctl model's shim, in tests). */
export const PFCTL_ENV = 'EGRESSGUARD_PFCTL';

/** The options the pf backend declares; commands offer them as flags. */
export const PF_OPTIONS: readonly BackendOption[] = [
  {
    key: 'anchor',
    flag: '--anchor <path>',
    description: 'pf anchor egressguard owns',
    default: DEFAULT_ANCHOR,
  },
  {
    key: 'pfTokenFile',
    flag: '--pf-token-file <file>',
    description: 'where egressguard keeps its own pf enable token (pfctl -E)',
    default: DEFAULT_TOKEN_FILE,
  },
  {
    key: 'pfctl',
    flag: '--pfctl <path>',
    description: `the pfctl to run (default: $${PFCTL_ENV} or ${DEFAULT_PFCTL})`,
  },
];

export interface PfOptions {
  readonly anchor: string;
  readonly tokenFile: string;
  readonly pfctl: string;
}

/** The pf backend's options, parsed: a usage error names the flag and the value. */
export function parsePfOptions(options: BackendOptions): PfOptions {
  return {
    anchor: parseAnchorOption(options),
    tokenFile: options['pfTokenFile'] ?? DEFAULT_TOKEN_FILE,
    pfctl: options['pfctl'] ?? process.env[PFCTL_ENV] ?? DEFAULT_PFCTL,
  };
}

/** The anchor option alone (the compiler's: it reads no environment). */
export function parseAnchorOption(options: BackendOptions): string {
  const anchor = options['anchor'] ?? DEFAULT_ANCHOR;
  // pf.conf(5) ANCHORS: names starting with "_" are reserved (F93 parse.y:786-791); a path of
  // slash-separated names, at most MAXPATHLEN; ours holds no quote, space or wildcard.
  if (!/^[A-Za-z0-9.][A-Za-z0-9._-]*(\/[A-Za-z0-9.][A-Za-z0-9._-]*)*$/.test(anchor)) {
    throw new EgressguardError('usage', `Cannot use --anchor "${anchor}"`, {
      hint: `give an anchor path such as "${DEFAULT_ANCHOR}" (letters, digits, ".", "_", "-", separated by "/", not starting with "_")`,
    });
  }
  return anchor;
}
