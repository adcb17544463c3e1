import { createHash } from 'node:crypto';
import { EgressguardError } from '../../core/index.js';
import type { CommandResult, Runner } from '../../runner/index.js';
import { fingerprintTable, selectTable } from './nft-json.js';
import { CLASS_SET_COMMENT, STAMP_SET } from './nft-sets.js';

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
  /** Every set, chain and counter of the table, as the terse listing has them. */
  readonly objects: readonly { readonly kind: string; readonly body: Record<string, unknown> }[];
}

const STAMP = /eg-hash:([0-9a-f]{64})/;

/**
 * Our table's objects from the terse listing alone, without the element listings of the class
 * sets: what planning a load needs, in one process. Its fingerprint is not the one to record.
 */
export async function listLiveTable(
  runner: Runner,
  table: string,
): Promise<Pick<LiveTable, 'present' | 'objects'>> {
  return parseLiveTable(await listRuleset(runner), table);
}

/** `nft -j -t list ruleset`: terse, so fast even beside a million set elements. */
async function listRuleset(runner: Runner): Promise<string> {
  return (await runner.run(['nft', '-j', '-t', 'list', 'ruleset'], { effect: 'read' })).stdout;
}

/**
 * A table whose sets hold at most this many elements in all is listed whole (`nft -j list table`,
 * elements included) in one process. Measured here (nft 1.0.6): ~10 µs an element, so 1,000 cost
 * ~10 ms, about what two more nft processes cost; 100k cost ~1 s, so a larger table is listed
 * terse, and only its class sets with their elements, one process each.
 */
export const WHOLE_LISTING_MAX_ELEMENTS = 1000;

/**
 * The live table, with the elements of its class sets fingerprinted. `expectedClassSets` (the
 * class sets of the ruleset just applied) are listed at once, beside the ruleset listing, instead
 * of after it: a read-back saves one round of processes. Which sets count is still the live
 * listing's: an expected set that is not live is ignored, a live one not expected is listed too.
 * With `whole` (the expected table is small, see WHOLE_LISTING_MAX_ELEMENTS) the table is listed
 * with its elements in one process instead; both ways give the same fingerprint.
 */
export async function readLiveTable(
  runner: Runner,
  table: string,
  options: { readonly expectedClassSets?: readonly string[]; readonly whole?: boolean } = {},
): Promise<LiveTable> {
  if (options.whole === true) return readWholeTable(runner, table);
  const listSet = (name: string): Promise<CommandResult> =>
    runner.run(['nft', '-j', 'list', 'set', 'inet', table, name], {
      effect: 'read',
      allowFailure: true,
    });
  const early = new Map((options.expectedClassSets ?? []).map((name) => [name, listSet(name)]));
  const settled = Promise.allSettled(early.values());
  const listing = await listRuleset(runner).finally(() => settled);
  const live = parseLiveTable(listing, table);
  if (!live.present) return live;
  // The terse listing has no set elements, so an added exception would be invisible. The sets
  // that decide who a class is and where its kill switch lets it go are small: list those
  // (~10 ms each, even beside a 100k-element blocklist, which is never listed) and fingerprint
  // their elements too.
  const watched = classSetNames(selectTable(listing, table).objects);
  const elements = await Promise.all(
    watched.map(async (name) => {
      const set = await (early.get(name) ?? listSet(name));
      return classSetLine(name, set.exitCode === 0 ? elementsOf(set.stdout) : undefined);
    }),
  );
  return withClassSets(live, elements);
}

/** `nft -j list table`: our table with every element, in one process; absent is not an error. */
async function readWholeTable(runner: Runner, table: string): Promise<LiveTable> {
  const result = await runner.run(['nft', '-j', 'list', 'table', 'inet', table], {
    effect: 'read',
    allowFailure: true,
  });
  if (result.exitCode !== 0) {
    if (/No such file or directory/.test(result.stderr)) return parseLiveTable('{}', table);
    throw new EgressguardError(
      'command-failed',
      `Cannot list table inet "${table}": nft exited with ${result.exitCode}: ${result.stderr.trim()}`,
    );
  }
  const live = parseLiveTable(result.stdout, table);
  if (!live.present) return live;
  const objects = selectTable(result.stdout, table).objects;
  const elements = classSetNames(objects).map((name) =>
    classSetLine(
      name,
      objects.find((o) => o.kind === 'set' && o.body['name'] === name)?.body['elem'] ?? [],
    ),
  );
  return withClassSets(live, elements);
}

function classSetNames(objects: ReturnType<typeof selectTable>['objects']): string[] {
  return objects
    .filter((o) => o.kind === 'set' && CLASS_SET_COMMENT.test(stringOf(o.body['comment'])))
    .map((o) => stringOf(o.body['name']))
    .sort();
}

function classSetLine(name: string, elements: unknown): string {
  return `${name}:${elements === undefined ? 'unreadable' : JSON.stringify(elements)}`;
}

/** The structural fingerprint extended by the elements of the class sets. */
function withClassSets(live: LiveTable, elements: readonly string[]): LiveTable {
  return {
    ...live,
    fingerprint: createHash('sha256')
      .update(`${live.fingerprint ?? ''}\n${elements.join('\n')}`)
      .digest('hex'),
  };
}

function elementsOf(json: string): unknown {
  const parsed = JSON.parse(json) as { nftables?: { set?: { elem?: unknown } }[] };
  return parsed.nftables?.find((o) => o.set !== undefined)?.set?.elem ?? [];
}

/** Pure: the live-table view of one `nft -j -t list ruleset` output. */
export function parseLiveTable(json: string, table: string): LiveTable {
  const selected = selectTable(json, table);
  if (selected.table === undefined) {
    return { present: false, hash: null, fingerprint: null, counters: new Map(), objects: [] };
  }
  let hash: string | null = null;
  const counters = new Map<string, CounterValue & { id: string }>();
  for (const { kind, body } of selected.objects) {
    if (kind === 'set' && body['name'] === STAMP_SET) {
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
  return {
    present: true,
    hash,
    fingerprint: fingerprintTable(selected.objects),
    counters,
    objects: selected.objects.filter((o) => o.kind !== 'rule'),
  };
}

function stringOf(value: unknown): string {
  return typeof value === 'string' ? value : '';
}
