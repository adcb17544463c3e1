/**
 * ` (did you mean "x"?)` for the closest candidate within a small edit distance, else ''.
 * Case is ignored and a swap of two neighbouring letters counts as one edit ("tnu0" → "tun0").
 */
export function didYouMean(input: string, candidates: Iterable<string>): string {
  const best = closestName(input, candidates);
  return best === undefined ? '' : ` (did you mean "${best}"?)`;
}

/** The candidate within a small edit distance of `input` (the one didYouMean names), if any. */
export function closestName(input: string, candidates: Iterable<string>): string | undefined {
  let best: string | undefined;
  let bestDistance = Infinity;
  for (const candidate of candidates) {
    if (candidate === input) continue;
    const d = editDistance(input.toLowerCase(), candidate.toLowerCase());
    if (d < bestDistance) {
      best = candidate;
      bestDistance = d;
    }
  }
  // One edit in three letters, at least one: "ab" must not suggest "id".
  const limit = Math.max(1, Math.floor(input.length / 3));
  return best !== undefined && bestDistance <= limit ? best : undefined;
}

/** Optimal string alignment distance: insertions, deletions, substitutions, transpositions. */
function editDistance(a: string, b: string): number {
  const rows: number[][] = [Array.from({ length: b.length + 1 }, (_, j) => j)];
  for (let i = 1; i <= a.length; i++) {
    const row = [i];
    for (let j = 1; j <= b.length; j++) {
      const cost = a[i - 1] === b[j - 1] ? 0 : 1;
      let d = Math.min(
        (rows[i - 1]?.[j] ?? 0) + 1,
        (row[j - 1] ?? 0) + 1,
        (rows[i - 1]?.[j - 1] ?? 0) + cost,
      );
      if (i > 1 && j > 1 && a[i - 1] === b[j - 2] && a[i - 2] === b[j - 1]) {
        d = Math.min(d, (rows[i - 2]?.[j - 2] ?? 0) + 1);
      }
      row[j] = d;
    }
    rows.push(row);
  }
  return rows[a.length]?.[b.length] ?? 0;
}
