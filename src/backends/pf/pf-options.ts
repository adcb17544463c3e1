import { EgressguardError } from '../../core/index.js';
import type { BackendOption, BackendOptions } from '../backend.js';

/** A sub-anchor of the stock `anchor "com.apple/*"` hooks: live without editing pf.conf. */
export const DEFAULT_ANCHOR = 'com.apple/250.egressguard';
export const DEFAULT_TOKEN_FILE = '/var/lib/egressguard/pf-token.json';
export const DEFAULT_PFCTL = '/sbin/pfctl';
export const DEFAULT_PF_CONF = '/etc/pf.conf';
/** The top-level anchor a pf.conf stanza attaches when `--pf-attach stanza` (not under com.apple/). */
export const DEFAULT_STANZA_ANCHOR = 'egressguard';
export type PfAttach = 'anchor' | 'stanza';
/** Names the pfctl to run when `--pfctl` is not given (the pfctl model's shim, in tests). */
export const PFCTL_ENV = 'EGRESSGUARD_PFCTL';

/** The options the pf backend declares; commands offer them as flags. */
export const PF_OPTIONS: readonly BackendOption[] = [
  {
    key: 'anchor',
    flag: '--anchor <path>',
    // No declared default: it depends on --pf-attach.
    description: `pf anchor egressguard owns (default: "${DEFAULT_ANCHOR}", or "${DEFAULT_STANZA_ANCHOR}" with --pf-attach stanza)`,
  },
  {
    key: 'pfTokenFile',
    flag: '--pf-token-file <file>',
    description: 'where egressguard keeps its own pf enable token (pfctl -E)',
    default: DEFAULT_TOKEN_FILE,
    hostOnly: true,
  },
  {
    key: 'pfctl',
    flag: '--pfctl <path>',
    description: `the pfctl to run (default: $${PFCTL_ENV} or ${DEFAULT_PFCTL})`,
    hostOnly: true,
  },
  {
    key: 'pfAttach',
    flag: '--pf-attach <mode>',
    description: `how pf reaches the anchor: "anchor" (a sub-anchor of the stock com.apple/* hooks, pf.conf untouched) or "stanza" (one marked block in pf.conf, anchor "${DEFAULT_STANZA_ANCHOR}", effective from the next boot)`,
    hostOnly: true,
  },
  {
    key: 'pfConf',
    flag: '--pf-conf <file>',
    description: 'the pf.conf doctor reads and --pf-attach stanza edits',
    default: DEFAULT_PF_CONF,
    hostOnly: true,
  },
];

export interface PfOptions {
  readonly anchor: string;
  readonly tokenFile: string;
  readonly pfctl: string;
  readonly attach: PfAttach;
  readonly pfConf: string;
}

/** The pf backend's options, parsed: a usage error names the flag and the value. */
export function parsePfOptions(options: BackendOptions): PfOptions {
  return {
    anchor: parseAnchorOption(options),
    tokenFile: options['pfTokenFile'] ?? DEFAULT_TOKEN_FILE,
    pfctl: options['pfctl'] ?? process.env[PFCTL_ENV] ?? DEFAULT_PFCTL,
    attach: parseAttach(options),
    pfConf: options['pfConf'] ?? DEFAULT_PF_CONF,
  };
}

function parseAttach(options: BackendOptions): PfAttach {
  const attach = options['pfAttach'] ?? 'anchor';
  if (attach !== 'anchor' && attach !== 'stanza') {
    throw new EgressguardError('usage', `Cannot use --pf-attach "${attach}"`, {
      hint: 'give "anchor" (default: through the stock com.apple/* hooks) or "stanza" (a marked block in pf.conf)',
    });
  }
  return attach;
}

/** The anchor option alone (the compiler's: it reads no environment). */
export function parseAnchorOption(options: BackendOptions): string {
  const attach = parseAttach(options);
  const anchor =
    options['anchor'] ?? (attach === 'stanza' ? DEFAULT_STANZA_ANCHOR : DEFAULT_ANCHOR);
  // A stanza in pf.conf evaluates the anchor from the main ruleset: under com.apple/ it would be
  // evaluated a second time through anchor "com.apple/*".
  if (attach === 'stanza' && anchor.startsWith('com.apple/')) {
    throw new EgressguardError(
      'usage',
      `Cannot attach anchor "${anchor}" with --pf-attach stanza: pf evaluates it through anchor "com.apple/*" already`,
      {
        hint: `give a top-level --anchor such as "${DEFAULT_STANZA_ANCHOR}" (the default with stanza), or drop --pf-attach stanza`,
      },
    );
  }
  // pf.conf(5) ANCHORS: names starting with "_" are reserved (F93 parse.y:786-791); a path of
  // slash-separated names, at most MAXPATHLEN; ours holds no quote, space or wildcard.
  if (!/^[A-Za-z0-9.][A-Za-z0-9._-]*(\/[A-Za-z0-9.][A-Za-z0-9._-]*)*$/.test(anchor)) {
    throw new EgressguardError('usage', `Cannot use --anchor "${anchor}"`, {
      hint: `give an anchor path such as "${DEFAULT_ANCHOR}" (letters, digits, ".", "_", "-", separated by "/", not starting with "_")`,
    });
  }
  return anchor;
}
