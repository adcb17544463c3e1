import {
  isMap,
  isPair,
  isScalar,
  isSeq,
  visit,
  type Document,
  type LineCounter,
  type Node,
} from 'yaml';
import { ISSUE_CODES, formatPath, type IssueCode, type PolicyIssue } from './issue.js';

export type Path = readonly (string | number)[];

/** Turns document paths into file positions and collects issues. */
/** Declares that an issue reports the absence of `field` in the object at `object`. */
export interface Absence {
  readonly object: Path;
  readonly field: string;
}

export class IssueCollector {
  readonly issues: PolicyIssue[] = [];
  // Issues that report a field's absence, and unknown fields that look like that field misspelled:
  // `ordered` puts each cause ahead of what it causes ("ingres" before "no ingress interfaces").
  private readonly absences = new Map<PolicyIssue, string>();
  private readonly misspellings: {
    readonly issue: PolicyIssue;
    readonly key: string;
    readonly meant: string;
  }[] = [];

  constructor(
    readonly file: string,
    private readonly doc: Document,
    private readonly lines: LineCounter,
  ) {}

  /**
   * Reports at the value at `path`, or at its nearest existing ancestor; `absent`: the issue is
   * the consequence of a field missing there (placed after an unknown field that misspells it).
   */
  at(path: Path, code: IssueCode, message: string, options: { absent?: Absence } = {}): void {
    this.push(path, this.offsetOf(path, false), code, message, options.absent);
  }

  /** Reports at the key of the entry at `path` (unknown and duplicate fields). */
  atKey(path: Path, code: IssueCode, message: string, options: { absent?: Absence } = {}): void {
    this.push(path, this.offsetOf(path, true), code, message, options.absent);
  }

  /** Reports an unknown field `path` that looks like the known field `meant` misspelled. */
  misspelled(path: Path, meant: string, message: string): void {
    this.atKey(path, 'unknown-field', message);
    const issue = this.issues.at(-1);
    const key = path.at(-1);
    if (issue === undefined || key === undefined) return;
    this.misspellings.push({
      issue,
      key: String(key),
      meant: `${formatPath(path.slice(0, -1))} ${meant}`,
    });
  }

  /**
   * The issues in file order, except that whatever a misspelled field causes (its intended field
   * reported missing) comes right after the misspelling, saying so: the cause first.
   */
  ordered(): PolicyIssue[] {
    const sorted = [...this.issues].sort(
      (a, b) => a.file.localeCompare(b.file) || a.line - b.line || a.column - b.column,
    );
    for (const { issue: cause, key, meant } of this.misspellings) {
      const effects = sorted.filter((i) => this.absences.get(i) === meant);
      if (effects.length === 0) continue;
      const rest = sorted.filter((i) => !effects.includes(i));
      const at = rest.indexOf(cause) + 1;
      const field = meant.split(' ').at(-1) ?? '';
      const explained = effects.map((effect) => ({
        ...effect,
        message: `${effect.message} (the likely cause: "${key}" on line ${cause.line}, "${field}" misspelled)`,
      }));
      sorted.splice(0, sorted.length, ...rest.slice(0, at), ...explained, ...rest.slice(at));
    }
    return sorted;
  }

  /** Reports at a position in another file (a network list file). */
  inFile(
    file: string,
    position: { line: number; column: number },
    path: Path,
    code: IssueCode,
    message: string,
  ): void {
    this.issues.push({
      code,
      severity: ISSUE_CODES[code],
      file,
      line: position.line,
      column: position.column,
      path: formatPath(path),
      message,
    });
  }

  atOffset(offset: number, code: IssueCode, message: string): void {
    this.push([], offset, code, message, undefined);
  }

  /** The key that starts at `offset` and the path of its mapping (for duplicate keys). */
  keyAtOffset(offset: number): { key: string; parent: Path } | undefined {
    const search = (node: unknown, path: Path): { key: string; parent: Path } | undefined => {
      if (isMap(node)) {
        for (const pair of node.items) {
          if (!isScalar(pair.key)) continue;
          const key = String(pair.key.value);
          if (rangeStart(pair.key) === offset) return { key, parent: path };
          const found = search(pair.value, [...path, key]);
          if (found !== undefined) return found;
        }
      } else if (isSeq(node)) {
        for (const [i, item] of node.items.entries()) {
          const found = search(item, [...path, i]);
          if (found !== undefined) return found;
        }
      }
      return undefined;
    };
    return search(this.doc.contents, []);
  }

  /** The plain value at `path`, or undefined when the document does not spell it out. */
  valueAt(path: Path): unknown {
    const node: unknown = this.doc.getIn(path, false);
    return isMap(node) || isSeq(node) ? node.toJSON() : node;
  }

  /** The first alias whose anchor is not defined before it, with the anchors that are. */
  findUnresolvedAlias(): { name: string; offset: number; anchors: string[] } | undefined {
    const anchors: string[] = [];
    let found: { name: string; offset: number; anchors: string[] } | undefined;
    visit(this.doc, {
      Alias: (_key, alias) => {
        if (anchors.includes(alias.source)) return undefined;
        found = { name: alias.source, offset: rangeStart(alias) ?? 0, anchors };
        return visit.BREAK;
      },
      Node: (_key, node) => {
        if (node.anchor !== undefined) anchors.push(node.anchor);
        return undefined;
      },
    });
    return found;
  }

  /** Whether an error was reported at `path` or anywhere under it. */
  hasErrorsUnder(path: Path): boolean {
    const at = formatPath(path);
    return this.issues.some(
      (i) =>
        i.severity === 'error' &&
        (i.path === at || i.path.startsWith(`${at}.`) || i.path.startsWith(`${at}[`)),
    );
  }

  /** Whether the document spells out this key (as opposed to a schema default). */
  has(path: Path): boolean {
    return this.doc.hasIn(path);
  }

  private push(
    path: Path,
    offset: number,
    code: IssueCode,
    message: string,
    absent: Absence | undefined,
  ): void {
    const pos = this.lines.linePos(offset);
    const issue: PolicyIssue = {
      code,
      severity: ISSUE_CODES[code],
      file: this.file,
      line: pos.line,
      column: pos.col,
      path: formatPath(path),
      message,
    };
    this.issues.push(issue);
    if (absent !== undefined) {
      this.absences.set(issue, `${formatPath(absent.object)} ${absent.field}`);
    }
  }

  private offsetOf(path: Path, key: boolean): number {
    let node: unknown = this.doc.contents;
    let offset = rangeStart(node) ?? 0;
    for (let i = 0; i < path.length; i++) {
      const segment = path[i];
      const last = i === path.length - 1;
      if (isMap(node)) {
        const pair = node.items.find(
          (p) => isPair(p) && isScalar(p.key) && String(p.key.value) === String(segment),
        );
        if (pair === undefined) return offset;
        if (last && key) return rangeStart(pair.key) ?? offset;
        node = pair.value;
        offset = rangeStart(node) ?? rangeStart(pair.key) ?? offset;
      } else if (isSeq(node) && typeof segment === 'number') {
        node = node.items[segment];
        if (node === undefined) return offset;
        offset = rangeStart(node) ?? offset;
      } else {
        return offset;
      }
    }
    return offset;
  }
}

function rangeStart(node: unknown): number | undefined {
  const range = (node as Node | null | undefined)?.range;
  return range ? range[0] : undefined;
}
