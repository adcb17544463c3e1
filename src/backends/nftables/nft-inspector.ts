import type { Runner } from '../../runner/index.js';
import { fingerprintTable, selectTable } from './nft-json.js';

export interface CounterValue {
  readonly packets: number;
  readonly bytes: number;
}

/** Our table as the kernel has it now. */
export interface LiveTable {
  readonly present: boolean;
  /** The host config hash stamped in the table, if any. */
  readonly hash: string | null;
  readonly fingerprint: string | null;
  /** By nft counter name. */
  readonly counters: ReadonlyMap<string, CounterValue & { readonly id: string }>;
}

const STAMP = /eg-hash:([0-9a-f]{64})/;

export async function readLiveTable(runner: Runner, table: string): Promise<LiveTable> {
  const listing = await runner.run(['nft', '-j', '-t', 'list', 'ruleset'], { effect: 'read' });
  return parseLiveTable(listing.stdout, table);
}

/** Pure: the live-table view of one `nft -j -t list ruleset` output. */
export function parseLiveTable(json: string, table: string): LiveTable {
  const selected = selectTable(json, table);
  if (selected.table === undefined) {
    return { present: false, hash: null, fingerprint: null, counters: new Map() };
  }
  let hash: string | null = null;
  const counters = new Map<string, CounterValue & { id: string }>();
  for (const { kind, body } of selected.objects) {
    if (kind === 'set' && body['name'] === 'stamp') {
      hash = STAMP.exec(stringOf(body['comment']))?.[1] ?? null;
    }
    if (kind === 'counter') {
      counters.set(String(body['name']), {
        id: stringOf(body['comment']) || stringOf(body['name']),
        packets: Number(body['packets'] ?? 0),
        bytes: Number(body['bytes'] ?? 0),
      });
    }
  }
  return { present: true, hash, fingerprint: fingerprintTable(selected.objects), counters };
}

function stringOf(value: unknown): string {
  return typeof value === 'string' ? value : '';
}
