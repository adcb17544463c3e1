import { EgressguardError } from '../../core/index.js';
import type { BackendOption, BackendOptions } from '../backend.js';
import { checkTableName, DEFAULT_TABLE } from './nft-names.js';
import { STEERING_DEFAULTS } from './steering.js';

/** The options the nftables backend declares; commands offer them as flags. */
export const NFT_OPTIONS: readonly BackendOption[] = [
  {
    key: 'table',
    flag: '--table <name>',
    description: 'owned nftables table (inet family)',
    default: DEFAULT_TABLE,
  },
  {
    key: 'routeTable',
    flag: '--route-table <id>',
    description: 'first routing table id for tunnel steering',
    default: String(STEERING_DEFAULTS.table),
  },
  {
    key: 'rulePriority',
    flag: '--rule-priority <n>',
    description: 'first ip rule priority for tunnel steering',
    default: String(STEERING_DEFAULTS.priority),
  },
];

/** The nftables backend's options, parsed: a usage error names the flag and the value. */
export interface NftOptions {
  readonly table: string;
  readonly steering: { readonly table: number; readonly priority: number };
}

export function parseNftOptions(options: BackendOptions = {}): NftOptions {
  return {
    // The name is written into nft transactions: "x {}; flush ruleset; table inet x" would
    // otherwise be a ruleset of its own.
    table: checkTableName(options['table'] ?? DEFAULT_TABLE),
    steering: {
      table: parseId('--route-table', options['routeTable'], STEERING_DEFAULTS.table),
      priority: parseId('--rule-priority', options['rulePriority'], STEERING_DEFAULTS.priority),
    },
  };
}

/** A whole number for a steering id; the compiler checks its range. */
function parseId(flag: string, text: string | undefined, fallback: number): number {
  if (text === undefined) return fallback;
  if (!/^\d+$/.test(text)) {
    throw new EgressguardError('usage', `Cannot use ${flag} "${text}"`, {
      hint: 'give a whole number',
    });
  }
  return Number(text);
}
