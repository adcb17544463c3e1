import { parsePrefix, type Family, type Prefix } from '../../core/index.js';
import {
  PROTOCOL_NUMBERS,
  type PfAddress,
  type PfAnchorRule,
  type PfAnchorRuleset,
  type PfConf,
  type PfConfProblem,
  type PfEndpoint,
  type PfFilterRule,
  type PfHost,
  type PfIcmpType,
  type PfInterfaceSpec,
  type PfLoadAnchor,
  type PfOption,
  type PfPort,
  type PfPortOp,
  type PfRedirect,
  type PfRoute,
  type PfRule,
  type PfScrubRule,
  type PfStateBinding,
  type PfStateMode,
  type PfTableDefinition,
  type PfTableEntry,
  type PfTagged,
  type PfTranslationRule,
} from './pf-rules.js';

/**
 * Parses pf.conf text in the grammar macOS pfctl accepts: OpenBSD 4.5-era pfctl, read in FreeBSD
 * 9.3 `contrib/pf/pfctl/parse.y` (NOTES.md §1, "F93"). What the newer grammar added (`match`,
 * `nat-to`, `rdr-to`, `af-to`, `received-on`) is not a keyword here and fails as pfctl fails:
 * `file:line: syntax error` (F93 parse.y keyword table 5254-5374). Problems are data; parsing goes
 * on after an error line, as pfctl's `ruleset error '\n'` production does, so every error is
 * reported. Not modelled: inline anchors (`anchor "x" { … }`), `antispoof`, queues/ALTQ, `os`,
 * `user`/`group`; each is a syntax error here.
 */
export function parsePfConf(
  text: string,
  options: {
    file: string;
    macros?: Readonly<Record<string, string>>;
    /**
     * The host's interfaces, for the checks parse.y makes while it parses (a route-to interface
     * must exist); absent: not checked (text read back from pfctl, or of no host in particular).
     */
    interfaces?: ReadonlySet<string>;
  },
): { conf: PfConf; problems: PfConfProblem[] } {
  return new Parser(text, options.file, options.macros ?? {}, options.interfaces).parse();
}

/** Formats problems the way pfctl prints them, one per line. */
export function formatPfConfProblems(problems: readonly PfConfProblem[]): string {
  return problems.map((p) => `${p.file}:${p.line}: ${p.message}\n`).join('');
}

type TokenKind = 'word' | 'string' | 'punct' | 'nl' | 'eof';

interface Token {
  readonly kind: TokenKind;
  readonly text: string;
  readonly line: number;
}

// F93 parse.y `allowed_in_string`: punctuation other than these continues a word.
const WORD_STOPPERS = new Set(['(', ')', '{', '}', '<', '>', '!', '=', '/', '#', ',']);
const TWO_CHAR_PUNCT = new Set(['<>', '><', '<=', '>=', '!=', '->']);

/**
 * The words that are keywords in F93 parse.y (5254-5374), among those this parser uses. A macro
 * name may not be one; quoted text never is one.
 */
const KEYWORDS = new Set([
  'all',
  'allow-opts',
  'anchor',
  'any',
  'binat',
  'binat-anchor',
  'bitmask',
  'block',
  'block-policy',
  'code',
  'drop',
  'dummynet-anchor',
  'dup-to',
  'fastroute',
  'file',
  'flags',
  'floating',
  'for',
  'fragment',
  'from',
  'icmp-type',
  'icmp6-type',
  'if-bound',
  'in',
  'inet',
  'inet6',
  'keep',
  'label',
  'load',
  'log',
  'modulate',
  'nat',
  'nat-anchor',
  'no',
  'no-route',
  'on',
  'out',
  'pass',
  'port',
  'proto',
  'quick',
  'random',
  'rdr',
  'rdr-anchor',
  'reply-to',
  'return',
  'round-robin',
  'route-to',
  'rtable',
  'scrub',
  'scrub-anchor',
  'self',
  'set',
  'source-hash',
  'state',
  'static-port',
  'synproxy',
  'table',
  'tag',
  'tagged',
  'to',
  'urpf-failed',
]);

// getservbyname for the services a firewall policy names; numbers are the usual way.
const SERVICES: Readonly<Record<string, number>> = {
  ftp: 21,
  ssh: 22,
  telnet: 23,
  smtp: 25,
  domain: 53,
  bootps: 67,
  bootpc: 68,
  http: 80,
  www: 80,
  ntp: 123,
  https: 443,
  submission: 587,
  imaps: 993,
};

const ICMP_TYPES: Readonly<Record<string, number>> = {
  echorep: 0,
  unreach: 3,
  squench: 4,
  redir: 5,
  echoreq: 8,
  routeradv: 9,
  routersol: 10,
  timex: 11,
  paramprob: 12,
};

const ICMP6_TYPES: Readonly<Record<string, number>> = {
  unreach: 1,
  toobig: 2,
  timex: 3,
  paramprob: 4,
  echoreq: 128,
  echorep: 129,
  routersol: 133,
  routeradv: 134,
  neighbrsol: 135,
  neighbradv: 136,
  redir: 137,
};

/** F93 parse.y PFCTL_STATE_*; dummynet sits between translation and filtering (Apple, unverified). */
const RULE_STATE = { none: 0, option: 1, scrub: 2, nat: 4, dummynet: 5, filter: 6 } as const;
type RuleState = (typeof RULE_STATE)[keyof typeof RULE_STATE];

// The message macOS pfctl prints (quoted from macOS runs in public notes); F93's older wording
// lacks "queueing".
const ORDER_MESSAGE =
  'Rules must be in order: options, normalization, queueing, translation, filtering';

class PfConfSyntaxError extends Error {
  constructor(
    readonly line: number,
    message = 'syntax error',
  ) {
    super(message);
  }
}

class Lexer {
  private pos = 0;
  private line = 1;
  /** Macro expansions being read, innermost last (pfctl pushes `$name`'s text back as input). */
  private readonly pushed: { text: string; pos: number }[] = [];
  private peeked: Token[] = [];

  constructor(
    private readonly text: string,
    private readonly macros: Map<string, string>,
    private readonly problems: PfConfProblem[],
    private readonly file: string,
  ) {}

  peek(offset = 0): Token {
    while (this.peeked.length <= offset) this.peeked.push(this.read());
    return this.peeked[offset] as Token;
  }

  next(): Token {
    const token = this.peek();
    this.peeked.shift();
    return token;
  }

  private char(offset = 0): string {
    const top = this.pushed[this.pushed.length - 1];
    if (top !== undefined) return top.text[top.pos + offset] ?? '';
    return this.text[this.pos + offset] ?? '';
  }

  private advance(): string {
    const top = this.pushed[this.pushed.length - 1];
    if (top !== undefined) {
      const c = top.text[top.pos] ?? '';
      top.pos++;
      return c;
    }
    const c = this.text[this.pos] ?? '';
    this.pos++;
    if (c === '\n') this.line++;
    return c;
  }

  private read(): Token {
    for (;;) {
      const top = this.pushed[this.pushed.length - 1];
      if (top !== undefined && top.pos >= top.text.length) {
        this.pushed.pop();
        continue;
      }
      const c = this.char();
      if (c === '') {
        if (this.pushed.length > 0) continue;
        return { kind: 'eof', text: '', line: this.line };
      }
      if (c === ' ' || c === '\t' || c === '\r') {
        this.advance();
        continue;
      }
      if (
        c === '\\' &&
        (this.char(1) === '\n' || (this.char(1) === '\r' && this.char(2) === '\n'))
      ) {
        // A backslash at the end of a line continues the statement.
        this.advance();
        if (this.char() === '\r') this.advance();
        this.advance();
        continue;
      }
      if (c === '#') {
        while (this.char() !== '\n' && this.char() !== '') this.advance();
        continue;
      }
      const line = this.line;
      if (c === '\n') {
        this.advance();
        return { kind: 'nl', text: '\n', line };
      }
      if (c === '"' || c === "'") {
        this.advance();
        let value = '';
        for (;;) {
          const d = this.char();
          if (d === '' || d === '\n') {
            this.problems.push({
              file: this.file,
              line,
              message: 'reached end of file while parsing quoted string',
            });
            break;
          }
          this.advance();
          if (d === c) break;
          if (d === '\\' && this.char() === c) {
            value += this.advance();
            continue;
          }
          value += d;
        }
        return { kind: 'string', text: value, line };
      }
      if (c === '$') {
        this.advance();
        let name = '';
        while (/[A-Za-z0-9_]/.test(this.char())) name += this.advance();
        const value = this.macros.get(name);
        if (value === undefined) {
          throw new PfConfSyntaxError(line, `macro '${name}' not defined`);
        }
        this.pushed.push({ text: value, pos: 0 });
        continue;
      }
      const two = c + this.char(1);
      if (TWO_CHAR_PUNCT.has(two)) {
        this.advance();
        this.advance();
        return { kind: 'punct', text: two, line };
      }
      if (WORD_STOPPERS.has(c)) {
        this.advance();
        return { kind: 'punct', text: c, line };
      }
      let word = '';
      while (this.char() !== '' && isWordChar(this.char())) {
        // `en0->` would otherwise swallow the arrow.
        if (this.char() === '-' && this.char(1) === '>') break;
        word += this.advance();
      }
      if (word === '') {
        this.advance();
        return { kind: 'punct', text: c, line };
      }
      return { kind: 'word', text: word, line };
    }
  }

  /** Skips to the end of the current line (pfctl's `findeol` after an error). */
  skipLine(): void {
    // Tokens already read past the end of the failing line belong to the next statement.
    const newline = this.peeked.findIndex((t) => t.kind === 'nl' || t.kind === 'eof');
    if (newline >= 0) {
      this.peeked = this.peeked.slice(newline);
      return;
    }
    this.peeked = [];
    this.pushed.length = 0;
    while (this.char() !== '\n' && this.char() !== '') {
      if (this.char() === '\\' && this.char(1) === '\n') this.advance();
      this.advance();
    }
  }
}

function isWordChar(c: string): boolean {
  if (/[A-Za-z0-9]/.test(c)) return true;
  if (WORD_STOPPERS.has(c)) return false;
  return /[!-~]/.test(c) && c !== '"' && c !== "'" && c !== '$';
}

class Parser {
  private readonly problems: PfConfProblem[] = [];
  private readonly macros: Map<string, string>;
  private readonly lexer: Lexer;
  private ruleState: RuleState = RULE_STATE.none;
  private requireOrder = true;
  private readonly options: PfOption[] = [];
  private readonly tables: PfTableDefinition[] = [];
  private readonly rules: PfRule[] = [];
  private readonly loadAnchors: PfLoadAnchor[] = [];

  constructor(
    text: string,
    private readonly file: string,
    macros: Readonly<Record<string, string>>,
    private readonly interfaces: ReadonlySet<string> | undefined,
  ) {
    this.macros = new Map(Object.entries(macros));
    this.lexer = new Lexer(text, this.macros, this.problems, file);
  }

  parse(): { conf: PfConf; problems: PfConfProblem[] } {
    for (;;) {
      let token: Token;
      try {
        token = this.lexer.peek();
      } catch (error) {
        this.report(error);
        continue;
      }
      if (token.kind === 'eof') break;
      if (token.kind === 'nl') {
        this.lexer.next();
        continue;
      }
      try {
        this.statement();
        this.endOfStatement();
      } catch (error) {
        this.report(error);
      }
    }
    return {
      conf: {
        options: this.options,
        tables: this.tables,
        rules: this.rules,
        loadAnchors: this.loadAnchors,
      },
      problems: this.problems,
    };
  }

  private report(error: unknown): void {
    if (!(error instanceof PfConfSyntaxError)) throw error;
    this.problems.push({ file: this.file, line: error.line, message: error.message });
    this.lexer.skipLine();
    if (this.lexer.peek().kind === 'nl') this.lexer.next();
  }

  private fail(token: Token, message?: string): never {
    throw new PfConfSyntaxError(token.line, message);
  }

  private endOfStatement(): void {
    const token = this.lexer.peek();
    if (token.kind === 'nl') {
      this.lexer.next();
      return;
    }
    if (token.kind !== 'eof') this.fail(token);
  }

  private isWord(text: string, offset = 0): boolean {
    const token = this.lexer.peek(offset);
    return token.kind === 'word' && token.text === text;
  }

  private isPunct(text: string, offset = 0): boolean {
    const token = this.lexer.peek(offset);
    return token.kind === 'punct' && token.text === text;
  }

  private accept(text: string): boolean {
    if (this.isWord(text) || this.isPunct(text)) {
      this.lexer.next();
      return true;
    }
    return false;
  }

  private expect(text: string): Token {
    const token = this.lexer.next();
    if ((token.kind === 'word' || token.kind === 'punct') && token.text === text) return token;
    return this.fail(token);
  }

  /** A STRING in pfctl's sense: a quoted string, or an unquoted word that is not a keyword. */
  private string(): Token {
    const token = this.lexer.next();
    if (token.kind === 'string' || (token.kind === 'word' && !KEYWORDS.has(token.text)))
      return token;
    return this.fail(token);
  }

  private skipNewlines(): void {
    while (this.lexer.peek().kind === 'nl') this.lexer.next();
  }

  private checkOrder(state: RuleState, line: number): void {
    if (this.requireOrder && this.ruleState > state)
      throw new PfConfSyntaxError(line, ORDER_MESSAGE);
    this.ruleState = state;
  }

  private statement(): void {
    const token = this.lexer.peek();
    if (token.kind === 'word' && !KEYWORDS.has(token.text) && this.isPunct('=', 1)) {
      this.macroDefinition();
      return;
    }
    if (token.kind !== 'word') this.fail(token);
    switch (token.text) {
      case 'set':
        this.option();
        return;
      case 'table':
        this.table();
        return;
      case 'load':
        this.loadAnchor();
        return;
      case 'anchor':
      case 'nat-anchor':
      case 'rdr-anchor':
      case 'binat-anchor':
      case 'scrub-anchor':
      case 'dummynet-anchor':
        this.anchorRule();
        return;
      case 'scrub':
        this.scrubRule();
        return;
      case 'nat':
      case 'rdr':
      case 'binat':
        this.translationRule(false);
        return;
      case 'no':
        if (this.isWord('nat', 1) || this.isWord('rdr', 1) || this.isWord('binat', 1)) {
          this.lexer.next();
          this.translationRule(true);
          return;
        }
        return this.fail(token);
      case 'pass':
      case 'block':
        this.filterRule();
        return;
      default:
        this.fail(token);
    }
  }

  private macroDefinition(): void {
    const name = this.lexer.next();
    this.expect('=');
    const value = this.lexer.next();
    if (value.kind !== 'string' && value.kind !== 'word') this.fail(value);
    this.macros.set(name.text, value.text);
  }

  private option(): void {
    const set = this.expect('set');
    const name = this.lexer.next();
    const known = new Set([
      'optimization',
      'timeout',
      'limit',
      'loginterface',
      'block-policy',
      'state-policy',
      'require-order',
      'fingerprints',
      'skip',
      'debug',
      'hostid',
      'ruleset-optimization',
      'state-defaults',
    ]);
    if (name.kind !== 'word' || !known.has(name.text)) this.fail(name);
    this.checkOrder(RULE_STATE.option, set.line);
    const value: string[] = [];
    while (this.lexer.peek().kind !== 'nl' && this.lexer.peek().kind !== 'eof') {
      value.push(this.lexer.next().text);
    }
    if (name.text === 'require-order') {
      if (value[0] !== 'yes' && value[0] !== 'no') this.fail(set);
      this.requireOrder = value[0] === 'yes';
    }
    if (name.text === 'block-policy' && value[0] !== 'drop' && value[0] !== 'return')
      this.fail(set);
    if (name.text === 'state-policy' && value[0] !== 'if-bound' && value[0] !== 'floating')
      this.fail(set);
    if (name.text === 'skip' && value[0] !== 'on') this.fail(set);
    this.options.push({ line: set.line, name: name.text, value });
  }

  private table(): void {
    const start = this.expect('table');
    this.expect('<');
    const name = this.string();
    this.expect('>');
    let persist = false;
    let constant = false;
    let counters = false;
    const entries: PfTableEntry[] = [];
    const files: string[] = [];
    for (;;) {
      if (this.accept('persist')) persist = true;
      else if (this.accept('const')) constant = true;
      else if (this.accept('counters')) counters = true;
      else if (this.accept('file')) files.push(this.string().text);
      else if (this.isPunct('{')) {
        this.lexer.next();
        this.skipNewlines();
        while (!this.isPunct('}')) {
          const negated = this.accept('!');
          const token = this.lexer.peek();
          const prefix = this.prefix();
          if (prefix === undefined) {
            // F93 parse.y:1411-1419: no ranges or dynamic interface addresses in a table.
            this.fail(token, `invalid address in table <${name.text}>: "${token.text}"`);
          }
          entries.push({ negated, prefix });
          this.accept(',');
          this.skipNewlines();
        }
        this.expect('}');
      } else break;
    }
    this.tables.push({
      line: start.line,
      name: name.text,
      persist,
      constant,
      counters,
      entries,
      files,
    });
  }

  /** An address with an optional `/bits`, written as one word or `word / number`. */
  private prefix(): Prefix | undefined {
    const token = this.lexer.peek();
    if (token.kind !== 'word' && token.kind !== 'string') return undefined;
    let text = token.text;
    if (this.isPunct('/', 1)) {
      const bits = this.lexer.peek(2);
      if (bits.kind !== 'word' || !/^\d+$/.test(bits.text)) return undefined;
      text = `${text}/${bits.text}`;
    }
    const prefix = parsePrefix(text.includes('/') ? text : hostPrefix(text));
    if (prefix === undefined) return undefined;
    this.lexer.next();
    if (text !== token.text) {
      this.lexer.next();
      this.lexer.next();
    }
    return prefix;
  }

  private loadAnchor(): void {
    const start = this.expect('load');
    this.expect('anchor');
    const anchor = this.string();
    this.expect('from');
    const file = this.string();
    checkAnchorName(anchor);
    this.loadAnchors.push({ line: start.line, anchor: anchor.text, file: file.text });
  }

  private anchorRule(): void {
    const keyword = this.lexer.next();
    const rulesets: Readonly<Record<string, PfAnchorRuleset>> = {
      anchor: 'filter',
      'nat-anchor': 'nat',
      'rdr-anchor': 'rdr',
      'binat-anchor': 'binat',
      'scrub-anchor': 'scrub',
      'dummynet-anchor': 'dummynet',
    };
    const ruleset = rulesets[keyword.text] ?? 'filter';
    const nameToken = this.string();
    checkAnchorName(nameToken);
    const state: RuleState =
      ruleset === 'filter'
        ? RULE_STATE.filter
        : ruleset === 'scrub'
          ? RULE_STATE.scrub
          : ruleset === 'dummynet'
            ? RULE_STATE.dummynet
            : RULE_STATE.nat;
    const wildcard = nameToken.text.endsWith('/*');
    const name = wildcard ? nameToken.text.slice(0, -2) : nameToken.text;
    if (name.includes('*')) this.fail(nameToken, 'wildcard anchor names must end with "/*"');
    const direction = this.direction();
    const interfaces = this.interfaceSpec();
    const family = this.family();
    const protocols = this.protocols();
    const { from, to } = this.hosts();
    let tagged: PfTagged | null = null;
    let label: string | null = null;
    for (;;) {
      if (this.isWord('tagged') || (this.isPunct('!') && this.isWord('tagged', 1))) {
        tagged = this.tagged();
      } else if (this.accept('label')) {
        label = this.string().text;
      } else break;
    }
    if (this.isPunct('{')) this.fail(this.lexer.peek(), 'inline anchors are not modelled');
    const rule: PfAnchorRule = {
      kind: 'anchor',
      line: keyword.line,
      ruleset,
      name,
      wildcard,
      direction,
      interfaces,
      family,
      protocols,
      from,
      to,
      tagged,
      label,
    };
    // pfctl checks the order in the rule's action, once the rule has parsed (F93 parse.y).
    this.checkOrder(state, keyword.line);
    this.rules.push(rule);
  }

  private scrubRule(): void {
    const start = this.expect('scrub');
    const direction = this.direction();
    const interfaces = this.interfaceSpec();
    const family = this.family();
    const protocols = this.protocols();
    const { from, to } = this.hosts();
    const words: string[] = [];
    while (this.lexer.peek().kind !== 'nl' && this.lexer.peek().kind !== 'eof') {
      words.push(this.lexer.next().text);
    }
    const rule: PfScrubRule = {
      kind: 'scrub',
      line: start.line,
      direction,
      interfaces,
      family,
      protocols,
      from,
      to,
      options: words.join(' '),
    };
    this.checkOrder(RULE_STATE.scrub, start.line);
    this.rules.push(rule);
  }

  private translationRule(no: boolean): void {
    const keyword = this.lexer.next();
    const kind = keyword.text as 'nat' | 'rdr' | 'binat';
    let pass = false;
    let log = false;
    if (this.accept('pass')) {
      pass = true;
      if (this.accept('log')) log = true;
    }
    const interfaces = this.interfaceSpec();
    const family = this.family();
    const protocols = this.protocols();
    const { from, to } = this.hosts();
    let tag: string | null = null;
    let tagged: PfTagged | null = null;
    for (;;) {
      if (this.accept('tag')) tag = this.string().text;
      else if (this.isWord('tagged') || (this.isPunct('!') && this.isWord('tagged', 1)))
        tagged = this.tagged();
      else break;
    }
    let redirect: PfRedirect | null = null;
    if (this.isPunct('->')) {
      const arrow = this.lexer.next();
      // F93 parse.y natrule: "translation rule with 'no' does not need '->'".
      if (no) this.fail(arrow, `translation rule with 'no' does not need '->'`);
      redirect = this.redirect(kind);
    } else if (!no) {
      this.fail(this.lexer.peek(), `translation rule requires '-> address'`);
    }
    const rule: PfTranslationRule = {
      kind,
      line: keyword.line,
      no,
      pass,
      log,
      interfaces,
      family,
      protocols,
      from,
      to,
      tag,
      tagged,
      redirect,
    };
    this.checkOrder(RULE_STATE.nat, keyword.line);
    this.rules.push(rule);
  }

  private redirect(kind: 'nat' | 'rdr' | 'binat'): PfRedirect {
    const hosts: PfAddress[] = [];
    if (this.accept('{')) {
      this.skipNewlines();
      while (!this.isPunct('}')) {
        hosts.push(this.redirectHost());
        this.accept(',');
        this.skipNewlines();
      }
      this.expect('}');
    } else {
      hosts.push(this.redirectHost());
    }
    let port: PfPort | null = null;
    let staticPort = false;
    for (;;) {
      if (this.isWord('port')) {
        const portToken = this.lexer.next();
        if (kind === 'binat') this.fail(portToken);
        const value = this.lexer.next();
        port = parsePortValue(value.text, value.line);
        if (this.isPunct(':')) {
          this.lexer.next();
          const high = this.lexer.next();
          port = { op: ':', low: port.low, high: parsePortValue(high.text, high.line).low };
        }
      } else if (this.accept('static-port')) staticPort = true;
      else if (
        this.accept('round-robin') ||
        this.accept('random') ||
        this.accept('bitmask') ||
        this.accept('sticky-address')
      ) {
        // Pool options: the model translates to the first address of the pool.
      } else if (this.accept('source-hash')) {
        if (this.lexer.peek().kind === 'word' && /^0x[0-9a-f]+$/i.test(this.lexer.peek().text))
          this.lexer.next();
      } else if (this.isWord('extfilter') || this.isWord('extmap')) {
        // Apple's NAT mapping/filtering extension, as Internet Sharing's live rules print it
        // (`-> (en0:0) extfilter ei`, NOTES §1): parsed, not evaluated.
        this.lexer.next();
        this.lexer.next();
      } else break;
    }
    return { hosts, port, staticPort };
  }

  private redirectHost(): PfAddress {
    if (this.isPunct('(')) return this.dynamicInterface();
    const token = this.lexer.peek();
    const prefix = this.prefix();
    if (prefix !== undefined) return { kind: 'prefix', prefix };
    if (token.kind === 'word' && !KEYWORDS.has(token.text)) {
      this.lexer.next();
      return interfaceAddress(token.text, false);
    }
    return this.fail(token);
  }

  private filterRule(): void {
    const actionToken = this.lexer.next();
    const action = actionToken.text as 'pass' | 'block';
    let blockPolicy: 'drop' | 'return' | null = null;
    if (action === 'block') {
      if (this.accept('drop')) blockPolicy = 'drop';
      else if (this.accept('return')) blockPolicy = 'return';
    }
    const direction = this.direction();
    let log = false;
    if (this.accept('log')) log = true;
    const quick = this.accept('quick');
    const interfaces = this.interfaceSpec();
    const route = this.route();
    const family = this.family();
    const protocols = this.protocols();
    const { from, to } = this.hosts();
    let flags: PfFilterRule['flags'] = null;
    let icmpTypes: PfIcmpType[] | null = null;
    let state: PfStateMode | null = null;
    let stateBinding: PfStateBinding | null = null;
    let tag: string | null = null;
    let tagged: PfTagged | null = null;
    let label: string | null = null;
    for (;;) {
      const token = this.lexer.peek();
      if (this.accept('flags')) {
        flags = this.flags();
      } else if (this.isWord('icmp-type') || this.isWord('icmp6-type')) {
        const six = this.lexer.next().text === 'icmp6-type';
        icmpTypes = this.icmpTypes(six ? ICMP6_TYPES : ICMP_TYPES);
      } else if (this.isWord('keep') || this.isWord('modulate') || this.isWord('synproxy')) {
        state = this.lexer.next().text as PfStateMode;
        this.expect('state');
        stateBinding = this.stateOptions() ?? stateBinding;
      } else if (this.isWord('no') && this.isWord('state', 1)) {
        this.lexer.next();
        this.lexer.next();
        state = 'no';
      } else if (this.accept('tag')) {
        tag = this.string().text;
      } else if (this.isWord('tagged') || (this.isPunct('!') && this.isWord('tagged', 1))) {
        tagged = this.tagged();
      } else if (this.accept('label')) {
        label = this.string().text;
      } else if (this.accept('rtable')) {
        const value = this.lexer.next();
        if (!/^\d+$/.test(value.text)) this.fail(value);
      } else if (this.accept('allow-opts') || this.accept('fragment')) {
        // Accepted; the evaluator has no IP options or fragments.
      } else {
        if (token.kind === 'word' && (token.text === 'route-to' || token.text === 'reply-to')) {
          // route-to comes before the address family and hosts (NOTES §1, parse.y:1842).
          this.fail(token);
        }
        break;
      }
    }
    const rule: PfFilterRule = {
      kind: 'filter',
      line: actionToken.line,
      action,
      blockPolicy,
      direction,
      log,
      quick,
      interfaces,
      route,
      family,
      protocols,
      from,
      to,
      flags,
      icmpTypes,
      state,
      stateBinding,
      tag,
      tagged,
      label,
    };
    this.checkOrder(RULE_STATE.filter, actionToken.line);
    this.rules.push(rule);
  }

  private direction(): 'in' | 'out' | null {
    if (this.accept('in')) return 'in';
    if (this.accept('out')) return 'out';
    return null;
  }

  private interfaceSpec(): PfInterfaceSpec[] | null {
    if (!this.accept('on')) return null;
    const one = (): PfInterfaceSpec => {
      const negated = this.accept('!');
      const name = this.string();
      return { negated, name: name.text };
    };
    if (this.accept('{')) {
      const list: PfInterfaceSpec[] = [];
      this.skipNewlines();
      while (!this.isPunct('}')) {
        list.push(one());
        this.accept(',');
        this.skipNewlines();
      }
      this.expect('}');
      return list;
    }
    return [one()];
  }

  private route(): PfRoute | null {
    const token = this.lexer.peek();
    if (token.kind !== 'word') return null;
    if (token.text === 'fastroute') {
      this.lexer.next();
      return { kind: 'fastroute', targets: [] };
    }
    if (token.text !== 'route-to' && token.text !== 'reply-to' && token.text !== 'dup-to')
      return null;
    this.lexer.next();
    const kind = token.text;
    const targets: { interface: string; address: Prefix | null }[] = [];
    const host = (): void => {
      // parse.y `route_host : STRING | '(' STRING host ')'` (OpenBSD parse.y 1.291 of 2003,
      // 1.449 of 2004, F93 parse.y:4205-4218): a bare interface name, or one with an address in
      // parentheses. `(ifname)` alone is a syntax error (after `( STRING` the grammar wants a
      // host, and `)` starts none); only the 2002 grammar (1.199) had `'(' STRING ')'`, and
      // pf.conf(5)'s `"(" interface-name [ address ] ")"` (F93 pf.conf.5:2959) is the man
      // page's, not the parser's (Daniel Hartmeier on freebsd-pf, 2011-09-08, "route-to rule":
      // the BNF is wrong there; parentheses go with an address, and without one are refused).
      let name: Token;
      let address: Prefix | null = null;
      if (this.accept('(')) {
        name = this.string();
        const addressToken = this.lexer.peek();
        address = this.prefix() ?? this.fail(addressToken);
        this.expect(')');
      } else {
        name = this.string();
      }
      // Both actions check the interface as they reduce (1.291, 1.449: `if (ifa_exists(ifname)
      // == NULL) yyerror("routeto: unknown interface %s")`), so `-n` refuses it too. F93's
      // parse.y has dropped the check; the model keeps it, the stricter of the two, since
      // Apple's pfctl is closed (docs/macos.md, "route-to and pfctl's grammar").
      if (this.interfaces !== undefined && !this.interfaces.has(name.text)) {
        this.fail(name, `routeto: unknown interface ${name.text}`);
      }
      targets.push({ interface: name.text, address });
    };
    if (this.accept('{')) {
      while (!this.isPunct('}')) {
        host();
        this.accept(',');
      }
      this.expect('}');
    } else host();
    return { kind, targets };
  }

  private family(): Family | null {
    if (this.accept('inet')) return 4;
    if (this.accept('inet6')) return 6;
    return null;
  }

  private protocols(): number[] | null {
    if (!this.accept('proto')) return null;
    const one = (): number => {
      const token = this.lexer.next();
      if (token.kind === 'word' && /^\d+$/.test(token.text)) {
        const n = Number(token.text);
        if (n > 255) this.fail(token, `protocol outside range`);
        return n;
      }
      const n = PROTOCOL_NUMBERS[token.text];
      if (n === undefined) this.fail(token, `unknown protocol ${token.text}`);
      return n;
    };
    if (this.accept('{')) {
      const list: number[] = [];
      while (!this.isPunct('}')) {
        list.push(one());
        this.accept(',');
      }
      this.expect('}');
      return list;
    }
    return [one()];
  }

  private hosts(): { from: PfEndpoint; to: PfEndpoint } {
    const any: PfEndpoint = { hosts: [{ negated: false, address: { kind: 'any' } }], ports: null };
    if (this.accept('all')) return { from: any, to: any };
    let from = any;
    let to = any;
    if (this.accept('from')) from = this.endpoint();
    if (this.accept('to')) to = this.endpoint();
    return { from, to };
  }

  private endpoint(): PfEndpoint {
    let hosts: PfHost[] = [{ negated: false, address: { kind: 'any' } }];
    if (!this.isWord('port')) {
      if (this.accept('{')) {
        hosts = [];
        this.skipNewlines();
        while (!this.isPunct('}')) {
          hosts.push(this.host());
          this.accept(',');
          this.skipNewlines();
        }
        this.expect('}');
      } else {
        hosts = [this.host()];
      }
    }
    let ports: PfPort[] | null = null;
    if (this.accept('port')) {
      if (this.accept('{')) {
        ports = [];
        while (!this.isPunct('}')) {
          ports.push(this.port());
          this.accept(',');
        }
        this.expect('}');
      } else {
        ports = [this.port()];
      }
    }
    return { hosts, ports };
  }

  private host(): PfHost {
    const negated = this.accept('!');
    const token = this.lexer.peek();
    if (this.accept('any')) return { negated, address: { kind: 'any' } };
    if (this.accept('self')) return { negated, address: { kind: 'self' } };
    if (this.accept('no-route')) return { negated, address: { kind: 'no-route' } };
    if (this.accept('urpf-failed')) return { negated, address: { kind: 'urpf-failed' } };
    if (this.accept('<')) {
      const name = this.string();
      this.expect('>');
      return { negated, address: { kind: 'table', name: name.text } };
    }
    if (this.isPunct('(')) return { negated, address: this.dynamicInterface() };
    const prefix = this.prefix();
    if (prefix !== undefined) return { negated, address: { kind: 'prefix', prefix } };
    if ((token.kind === 'word' || token.kind === 'string') && !KEYWORDS.has(token.text)) {
      this.lexer.next();
      // A host name or an interface name; pfctl resolves both at load time (host(), F93
      // pfctl_parser.c), the model against its interfaces (expand-pf-rules.ts).
      return { negated, address: interfaceAddress(token.text, false) };
    }
    return this.fail(token);
  }

  private dynamicInterface(): PfAddress {
    this.expect('(');
    const name = this.string();
    this.expect(')');
    return interfaceAddress(name.text, true);
  }

  private port(): PfPort {
    const token = this.lexer.peek();
    const unary: PfPortOp[] = ['=', '!=', '<', '<=', '>', '>='];
    if (token.kind === 'punct' && unary.includes(token.text as PfPortOp)) {
      this.lexer.next();
      const value = this.lexer.next();
      const n = parsePortValue(value.text, value.line).low;
      return { op: token.text as PfPortOp, low: n, high: n };
    }
    const value = this.lexer.next();
    const first = parsePortValue(value.text, value.line);
    const next = this.lexer.peek();
    if (next.kind === 'punct' && (next.text === '<>' || next.text === '><' || next.text === ':')) {
      this.lexer.next();
      const high = this.lexer.next();
      return { op: next.text, low: first.low, high: parsePortValue(high.text, high.line).low };
    }
    return first;
  }

  private flags(): PfFilterRule['flags'] {
    if (this.accept('any')) return 'any';
    const token = this.lexer.next();
    // `S/SA` lexes as `S` `/` `SA`; `/SA` (no set bits) as `/` `SA`.
    let set = '';
    if (token.kind === 'word') {
      set = token.text;
      this.expect('/');
    } else if (!(token.kind === 'punct' && token.text === '/')) this.fail(token);
    const mask = this.lexer.next();
    if (mask.kind !== 'word' || !/^[FSRPAUEW]+$/.test(mask.text) || !/^[FSRPAUEW]*$/.test(set))
      this.fail(mask);
    return { set, mask: mask.text };
  }

  private icmpTypes(names: Readonly<Record<string, number>>): PfIcmpType[] {
    const one = (): PfIcmpType => {
      const token = this.lexer.next();
      const type = /^\d+$/.test(token.text) ? Number(token.text) : names[token.text];
      if (type === undefined || type > 255) this.fail(token, `unknown icmp-type ${token.text}`);
      let code: number | null = null;
      if (this.accept('code')) {
        const value = this.lexer.next();
        if (!/^\d+$/.test(value.text)) this.fail(value);
        code = Number(value.text);
      }
      return { type, code };
    };
    if (this.accept('{')) {
      const list: PfIcmpType[] = [];
      while (!this.isPunct('}')) {
        list.push(one());
        this.accept(',');
      }
      this.expect('}');
      return list;
    }
    return [one()];
  }

  /** `(if-bound)`, `(floating)`, `(max 100, no-sync, …)` after `keep state`. */
  private stateOptions(): PfStateBinding | null {
    if (!this.accept('(')) return null;
    let binding: PfStateBinding | null = null;
    while (!this.isPunct(')')) {
      const token = this.lexer.next();
      if (token.kind === 'eof' || token.kind === 'nl') this.fail(token);
      if (token.text === 'if-bound' || token.text === 'floating') binding = token.text;
    }
    this.expect(')');
    return binding;
  }

  private tagged(): PfTagged {
    const negated = this.accept('!');
    this.expect('tagged');
    return { negated, name: this.string().text };
  }
}

function hostPrefix(text: string): string {
  return text.includes(':') ? `${text}/128` : `${text}/32`;
}

function interfaceAddress(text: string, dynamic: boolean): PfAddress {
  const match = /^(.+?):(network|broadcast|peer|0)$/.exec(text);
  return match === null
    ? { kind: 'interface', name: text, modifier: null, dynamic }
    : {
        kind: 'interface',
        name: match[1] as string,
        modifier: match[2] as 'network' | 'broadcast' | 'peer' | '0',
        dynamic,
      };
}

function parsePortValue(text: string, line: number): PfPort {
  const range = /^(\w+):(\w+)$/.exec(text);
  if (range !== null) {
    const low = parsePortValue(range[1] as string, line).low;
    const high = parsePortValue(range[2] as string, line).low;
    return { op: ':', low, high };
  }
  const n = /^\d+$/.test(text) ? Number(text) : SERVICES[text];
  if (n === undefined) throw new PfConfSyntaxError(line, `unknown port ${text}`);
  if (n > 65535) throw new PfConfSyntaxError(line, `illegal port value ${text}`);
  return { op: '=', low: n, high: n };
}

function checkAnchorName(token: Token): void {
  // parse.y:786-791: names starting with "_" are reserved for pfctl's own use.
  const last = token.text.replace(/\/\*$/, '').split('/').pop() ?? '';
  if (last.startsWith('_'))
    throw new PfConfSyntaxError(
      token.line,
      "anchor names beginning with '_' are reserved for internal use",
    );
}
