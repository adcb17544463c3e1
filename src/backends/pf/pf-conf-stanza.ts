/**
 * The optional pf.conf stanza, as marked blocks that egressguard owns:
 *
 *     # BEGIN egressguard (managed by egressguard; edits are replaced)
 *     anchor "egressguard"
 *     # END egressguard
 *
 * One block when its lines can sit together; else one block per kind of line (normalization,
 * translation, filtering), each among the lines of its kind: the stock file has
 * `dummynet-anchor` between `rdr-anchor` and `anchor`, so `scrub-anchor`, `nat-anchor` and
 * `anchor` of ours cannot share one place in it.
 * Installing is idempotent (twice gives one block), migrates older unmarked lines that name our
 * anchor (`anchor "egressguard"`, `load anchor "egressguard" from …`), removes duplicates (a
 * duplicated block once made pfctl reject the whole ruleset and NAT silently stopped, DESIGN.md
 * §1A), and leaves every other byte of the file as it was (Apple's stock file has a trailing space
 * on line 12, kept). pf requires rules in order — options, normalization, queueing, translation,
 * filtering (F93 parse.y check_rulestate) — so the block goes where its lines are in order with
 * their neighbours, or the install is refused as a problem and nothing changes.
 */

export const STANZA_BEGIN = '# BEGIN egressguard (managed by egressguard; edits are replaced)';
export const STANZA_END = '# END egressguard';

export interface PfConfStanzaResult {
  readonly text: string;
  readonly changed: boolean;
  /** Lines removed from outside the block (older or duplicated stanzas), 1-based. */
  readonly migrated: readonly { readonly line: number; readonly text: string }[];
}

export interface PfConfStanzaProblem {
  readonly line: number | null;
  readonly message: string;
}

type Outcome =
  { ok: true; result: PfConfStanzaResult } | { ok: false; problem: PfConfStanzaProblem };

/** Installs (or refreshes) the marked block holding `lines` for `anchor`. */
export function installPfConfStanza(
  text: string,
  stanza: { anchor: string; lines: readonly string[] },
): Outcome {
  return rewrite(text, stanza.anchor, stanza.lines);
}

/** Removes the marked block and every older line that names `anchor`. */
export function removePfConfStanza(text: string, anchor: string): Outcome {
  return rewrite(text, anchor, null);
}

/** F93 parse.y PFCTL_STATE_*; `dummynet-anchor` between translation and filtering (Apple, unverified). */
const CLASSES: readonly [RegExp, number][] = [
  [/^set\b/, 1],
  [/^(scrub|scrub-anchor)\b/, 2],
  [/^(no\s+)?(nat|rdr|binat)\b|^(nat|rdr|binat)-anchor\b/, 4],
  [/^dummynet-anchor\b/, 5],
  [/^(pass|block|anchor|antispoof)\b/, 6],
];

function ruleClass(line: string): number | null {
  const statement = line.replace(/#.*$/, '').trim();
  for (const [pattern, value] of CLASSES) if (pattern.test(statement)) return value;
  return null;
}

function namesAnchor(line: string, anchor: string): boolean {
  const statement = line.replace(/#.*$/, '').trim();
  const name = escapeRegExp(anchor);
  const quoted = `"?${name}(/[^"\\s]*)?"?`;
  return (
    new RegExp(`^(nat-|rdr-|binat-|scrub-|dummynet-)?anchor\\s+${quoted}(\\s|$)`).test(statement) ||
    new RegExp(`^load\\s+anchor\\s+${quoted}\\s+from\\s`).test(statement)
  );
}

function escapeRegExp(text: string): string {
  return text.replace(/[.*+?^${}()|[\]\\]/g, '\\$&');
}

function rewrite(text: string, anchor: string, lines: readonly string[] | null): Outcome {
  // Lines with their own endings, so untouched lines are copied byte for byte.
  const source = text.match(/[^\n]*\n|[^\n]+$/g) ?? [];
  const newline = text.includes('\r\n') ? '\r\n' : '\n';
  const kept: string[] = [];
  const migrated: { line: number; text: string }[] = [];
  let blockAt: number | null = null;
  let openBlock: number | null = null;
  for (const [index, raw] of source.entries()) {
    const line = raw.replace(/\r?\n$/, '');
    if (openBlock !== null) {
      if (line.startsWith(STANZA_END)) openBlock = null;
      continue;
    }
    if (line.startsWith('# BEGIN egressguard')) {
      openBlock = index + 1;
      blockAt ??= kept.length;
      continue;
    }
    if (line.startsWith(STANZA_END)) {
      migrated.push({ line: index + 1, text: line });
      continue;
    }
    if (namesAnchor(line, anchor)) {
      migrated.push({ line: index + 1, text: line });
      continue;
    }
    kept.push(raw);
  }
  if (openBlock !== null) {
    return {
      ok: false,
      problem: {
        line: openBlock,
        message: `pf.conf has "# BEGIN egressguard" on line ${openBlock} without a matching "${STANZA_END}": fix the file by hand, egressguard changed nothing`,
      },
    };
  }

  let output: string[];
  if (lines === null) {
    output = kept;
  } else {
    const placed = placeBlocks(kept, lines, blockAt);
    if (!Array.isArray(placed)) return { ok: false, problem: placed };
    output = [...kept];
    // From the last place to the first, so the earlier places stay where they were computed.
    for (const { position, group } of [...placed].reverse()) {
      const block = [STANZA_BEGIN, ...group, STANZA_END].map((l) => `${l}${newline}`);
      const last = output[position - 1];
      if (last !== undefined && !last.endsWith('\n')) output[position - 1] = `${last}${newline}`;
      output.splice(position, 0, ...block);
    }
  }
  const result = output.join('');
  return { ok: true, result: { text: result, changed: result !== text, migrated } };
}

/**
 * One block where all the lines fit together, else one block per rule class, each where pf's
 * rule order holds for it; a problem when a class has no such place.
 */
function placeBlocks(
  kept: readonly string[],
  lines: readonly string[],
  preferred: number | null,
): { position: number; group: readonly string[] }[] | PfConfStanzaProblem {
  const whole = placeBlock(kept, lines, preferred);
  if (typeof whole === 'number') return [{ position: whole, group: lines }];
  const classes = [...new Set(lines.map(ruleClass))].sort((a, b) => (a ?? 0) - (b ?? 0));
  if (classes.length < 2) return whole;
  const placed: { position: number; group: readonly string[] }[] = [];
  for (const c of classes) {
    const group = lines.filter((l) => ruleClass(l) === c);
    const position = placeBlock(kept, group, null);
    if (typeof position !== 'number') return position;
    placed.push({ position, group });
  }
  return placed.sort((a, b) => a.position - b.position);
}

/**
 * Where the block can go so that pf's rule order holds: after every rule line of a lower class
 * than its lowest, before every rule line of a higher class than its highest. The old block's
 * place when that is valid, else the last valid place (appending, for a filter-only block).
 */
function placeBlock(
  kept: readonly string[],
  lines: readonly string[],
  preferred: number | null,
): number | PfConfStanzaProblem {
  const classes = lines.map(ruleClass).filter((c) => c !== null);
  if (classes.length === 0) return preferred ?? kept.length;
  const low = Math.min(...classes);
  const high = Math.max(...classes);
  const fileClasses = kept.map(ruleClass);
  const valid = (position: number): boolean =>
    fileClasses.slice(0, position).every((c) => c === null || c <= low) &&
    fileClasses.slice(position).every((c) => c === null || c >= high);
  if (preferred !== null && valid(preferred)) return preferred;
  for (let position = kept.length; position >= 0; position--) {
    if (valid(position)) return position;
  }
  // A line of a kind between ours, else where the file itself leaves pf's order.
  let blocker = fileClasses.findIndex((c) => c !== null && c > low && c < high);
  if (blocker < 0) {
    let highest = 0;
    blocker = fileClasses.findIndex((c) => {
      if (c === null) return false;
      if (c < highest) return true;
      highest = c;
      return false;
    });
  }
  return {
    line: blocker >= 0 ? blocker + 1 : null,
    message:
      'Cannot place the egressguard block in pf.conf: pf requires rules in order (options, normalization, queueing, translation, filtering) and no place in the file keeps its lines in that order' +
      (blocker >= 0 ? ` (line ${blocker + 1} sits between them)` : '') +
      ': put the file in that order, or attach through the com.apple/* anchors',
  };
}

/** What pf.conf holds of egressguard's: its marked blocks and unmarked lines naming `anchor`. */
export function findPfConfStanzas(
  text: string,
  anchor: string,
): {
  readonly blocks: readonly {
    readonly begin: number;
    readonly end: number | null;
    /** Its statements (comments and blank lines left out). */
    readonly lines: readonly string[];
  }[];
  readonly unmarked: readonly { readonly line: number; readonly text: string }[];
  /** Statements that more than one block holds: a duplicated block, in part or whole. */
  readonly duplicated: readonly string[];
} {
  const blocks: { begin: number; end: number | null; lines: string[] }[] = [];
  const unmarked: { line: number; text: string }[] = [];
  let open: { begin: number; end: number | null; lines: string[] } | null = null;
  for (const [index, raw] of text.split('\n').entries()) {
    const line = raw.replace(/\r$/, '');
    if (open !== null) {
      if (line.startsWith(STANZA_END)) {
        open.end = index + 1;
        open = null;
      } else {
        const statement = line.replace(/#.*$/, '').trim();
        if (statement !== '') open.lines.push(statement);
      }
      continue;
    }
    if (line.startsWith('# BEGIN egressguard')) {
      open = { begin: index + 1, end: null, lines: [] };
      blocks.push(open);
    } else if (namesAnchor(line, anchor)) {
      unmarked.push({ line: index + 1, text: line });
    }
  }
  const seen = new Map<string, number>();
  for (const block of blocks) {
    for (const statement of new Set(block.lines))
      seen.set(statement, (seen.get(statement) ?? 0) + 1);
  }
  const duplicated = [...seen].filter(([, n]) => n > 1).map(([statement]) => statement);
  return { blocks, unmarked, duplicated };
}
