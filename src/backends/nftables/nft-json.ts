import { createHash } from 'node:crypto';

/** One object of `nft -j list ruleset` (a table, chain, set, counter, rule, …). */
export type NftObject = Record<string, Record<string, unknown>>;

export interface NftTableObjects {
  readonly table: Record<string, unknown> | undefined;
  readonly objects: readonly { readonly kind: string; readonly body: Record<string, unknown> }[];
}

/**
 * Our table's objects from `nft -j -t list ruleset`. That listing is ~20 ms even with 1M set
 * elements (terse omits elements); `list table` or `list counters` cost ~1 s at 100k.
 */
export function selectTable(json: string, table: string, family = 'inet'): NftTableObjects {
  const parsed = JSON.parse(json) as { nftables?: NftObject[] };
  let own: Record<string, unknown> | undefined;
  const objects: { kind: string; body: Record<string, unknown> }[] = [];
  for (const item of parsed.nftables ?? []) {
    const [kind, body] = Object.entries(item)[0] ?? [];
    if (kind === undefined || body === undefined || kind === 'metainfo') continue;
    if (body['family'] !== family) continue;
    if (kind === 'table') {
      if (body['name'] === table) own = body;
      continue;
    }
    if (body['table'] === table) objects.push({ kind, body });
  }
  return { table: own, objects };
}

/**
 * A fingerprint of the table's structure: chains, set metadata, counter names and rules, with
 * handles and counter values removed, so it changes when someone edits the table and not when
 * packets flow.
 */
export function fingerprintTable(objects: NftTableObjects['objects']): string {
  // nft lists a table's objects in creation order, which an in-place replace changes: sort them
  // (rules keep their order within their chain, which is what decides).
  const lines = objects.map(({ kind, body }, index) => ({
    key:
      kind === 'rule'
        ? `rule ${String(body['chain'])} ${String(index).padStart(9, '0')}`
        : `${kind} ${String(body['name'])}`,
    text: `${kind}:${JSON.stringify(normalise(kind, body))}\n`,
  }));
  lines.sort((a, b) => (a.key < b.key ? -1 : a.key > b.key ? 1 : 0));
  const hash = createHash('sha256');
  for (const line of lines) hash.update(line.text);
  return hash.digest('hex');
}

const VOLATILE = new Set(['handle', 'packets', 'bytes', 'elem']);

function normalise(kind: string, body: Record<string, unknown>): unknown {
  const rest = Object.fromEntries(Object.entries(body).filter(([k]) => !VOLATILE.has(k)));
  if (kind === 'rule') return { ...rest, expr: stripCounters(rest['expr']) };
  return rest;
}

function stripCounters(value: unknown): unknown {
  if (Array.isArray(value)) return value.map(stripCounters);
  if (value !== null && typeof value === 'object') {
    const out: Record<string, unknown> = {};
    for (const [k, v] of Object.entries(value)) {
      if (k === 'counter' && v !== null && typeof v === 'object' && 'packets' in v) continue;
      out[k] = stripCounters(v);
    }
    return out;
  }
  return value;
}
