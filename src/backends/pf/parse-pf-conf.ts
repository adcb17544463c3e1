import { parseAddress, parsePrefix, type Family, type Prefix } from '../../core/index.js';
import { icmpCodeByName, icmpTypeByName, SERVICES } from './pf-services.js';
import {
  PROTOCOL_NUMBERS,
  type PfAddress,
  type PfAnchorRule,
  type PfAnchorRuleset,
  type PfBlockPolicy,
  type PfConf,
  type PfConfProblem,
  type PfEndpoint,
  type PfFilterRule,
  type PfHost,
  type PfIcmpType,
  type PfInterfaceSpec,
  type PfLoadAnchor,
  type PfLog,
  type PfOption,
  type PfPool,
  type PfPort,
  type PfPortOp,
  type PfRedirect,
  type PfRoute,
  type PfRule,
  type PfScrubRule,
  type PfStateBinding,
  type PfStateMode,
  type PfTableDefinition,
  type PfTableItem,
  type PfTagged,
  type PfTranslationRule,
} from './pf-rules.js';

/**
 * Parses pf.conf text as a MODEL of macOS pfctl's parser: FreeBSD 9.3's `contrib/pf/pfctl/
 * parse.y` ("F93", OpenBSD 4.4/4.5 era, NOTES.md §1; Apple's own pfctl is closed), its lexer
 * (yylex), keyword table (lookup) and productions, with the checks its actions make. Apple's
 * additions seen in stock files are accepted too (`scrub-anchor`, `dummynet-anchor`, the NAT
 * `extfilter`/`extmap` words of Internet Sharing). Problems are data, `file:line: message` as
 * pfctl prints them, and parsing goes on after a bad line (parse.y `ruleset error '\n'`), so every
 * problem is reported. What the model does not implement is refused with a message that starts
 * "not modelled:" (inline anchors, antispoof, queues, user/group, OS fingerprints, divert-to,
 * host names other than localhost), never with a made-up syntax error.
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
    /** Reads a file `include` names; absent: include is refused. */
    readFile?: (path: string) => string | undefined;
  },
): { conf: PfConf; problems: PfConfProblem[] } {
  return new Parser(text, options).parse();
}

/** Formats problems the way pfctl prints them, one per line. */
export function formatPfConfProblems(problems: readonly PfConfProblem[]): string {
  return problems.map((p) => `${p.file}:${p.line}: ${p.message}\n`).join('');
}

/** Whether a problem is the model's refusal of a construct it does not implement. */
export function isNotModelled(problem: PfConfProblem): boolean {
  return problem.message.startsWith(NOT_MODELLED);
}

const NOT_MODELLED = 'not modelled: ';

type TokenKind = 'word' | 'string' | 'number' | 'punct' | 'nl' | 'eof';

interface Token {
  readonly kind: TokenKind;
  readonly text: string;
  readonly line: number;
}

/**
 * F93 parse.y lookup(): the keyword table (sorted there; a Set here), plus Apple's anchor points
 * of the stock pf.conf. A word that is one is never a STRING: not a macro name, not an
 * interface, not a host (quoted text always is a STRING).
 */
const KEYWORDS = new Set([
  'all',
  'allow-opts',
  'altq',
  'anchor',
  'antispoof',
  'any',
  'bandwidth',
  'binat',
  'binat-anchor',
  'bitmask',
  'block',
  'block-policy',
  'cbq',
  'code',
  'crop',
  'debug',
  'divert-reply',
  'divert-to',
  'drop',
  'drop-ovl',
  'dup-to',
  'fastroute',
  'file',
  'fingerprints',
  'flags',
  'floating',
  'flush',
  'for',
  'fragment',
  'from',
  'global',
  'group',
  'hfsc',
  'hostid',
  'icmp-type',
  'icmp6-type',
  'if-bound',
  'in',
  'include',
  'inet',
  'inet6',
  'keep',
  'label',
  'limit',
  'linkshare',
  'load',
  'log',
  'loginterface',
  'max',
  'max-mss',
  'max-src-conn',
  'max-src-conn-rate',
  'max-src-nodes',
  'max-src-states',
  'min-ttl',
  'modulate',
  'nat',
  'nat-anchor',
  'no',
  'no-df',
  'no-route',
  'no-sync',
  'on',
  'optimization',
  'os',
  'out',
  'overload',
  'pass',
  'pflow',
  'port',
  'priority',
  'priq',
  'probability',
  'proto',
  'qlimit',
  'queue',
  'quick',
  'random',
  'random-id',
  'rdr',
  'rdr-anchor',
  'realtime',
  'reassemble',
  'reply-to',
  'require-order',
  'return',
  'return-icmp',
  'return-icmp6',
  'return-rst',
  'round-robin',
  'route',
  'route-to',
  'rtable',
  'rule',
  'ruleset-optimization',
  'scrub',
  'set',
  'set-tos',
  'skip',
  'sloppy',
  'source-hash',
  'source-track',
  'state',
  'state-defaults',
  'state-policy',
  'static-port',
  'sticky-address',
  'synproxy',
  'table',
  'tag',
  'tagged',
  'tbrsize',
  'timeout',
  'to',
  'tos',
  'ttl',
  'upperlimit',
  'urpf-failed',
  'user',
  // Apple's (stock /etc/pf.conf): not in F93.
  'scrub-anchor',
  'dummynet-anchor',
]);

// pf's fixed buffers, NUL included (XNU pfvar.h): PF_RULE_LABEL_SIZE 64, PF_TAG_NAME_SIZE 64,
// PF_TABLE_NAME_SIZE 32, IFNAMSIZ 16.
const LABEL_MAX = 63;
const TAG_MAX = 63;
const TABLE_NAME_MAX = 31;
const IFNAME_MAX = 15;

// F93 parse.y PFCTL_STATE_*; dummynet sits between translation and filtering (Apple, unverified).
const RULE_STATE = { none: 0, option: 1, scrub: 2, queue: 3, nat: 4, dummynet: 5, filter: 6 };

// The message macOS pfctl prints (quoted from macOS runs in public notes): F93 check_rulestate.
const ORDER_MESSAGE =
  'Rules must be in order: options, normalization, queueing, translation, filtering';

// F93 pfctl.c pf_timeouts, pf_limits, pf_hints.
const TIMEOUTS = new Set([
  'tcp.first',
  'tcp.opening',
  'tcp.established',
  'tcp.closing',
  'tcp.finwait',
  'tcp.closed',
  'tcp.tsdiff',
  'udp.first',
  'udp.single',
  'udp.multiple',
  'icmp.first',
  'icmp.error',
  'other.first',
  'other.single',
  'other.multiple',
  'frag',
  'interval',
  'adaptive.start',
  'adaptive.end',
  'src.track',
]);
const LIMITS = new Set(['states', 'src-nodes', 'frags', 'tables', 'table-entries']);
const HINTS = new Set(['normal', 'satellite', 'high-latency', 'conservative', 'aggressive']);

// pfctl's defaults for `return` and `return-icmp` (F93 parse.y returnicmpdefault).
const RETURN_ICMP = (3 << 8) | 3; // unreach, port-unr
const RETURN_ICMP6 = (1 << 8) | 4; // unreach, port-unr

/** A host name the model resolves (getaddrinfo on the test machine: ::1 first). */
const HOSTS: Readonly<Record<string, readonly string[]>> = { localhost: ['::1', '127.0.0.1'] };

class PfConfSyntaxError extends Error {
  constructor(
    readonly line: number,
    message = 'syntax error',
  ) {
    super(message);
  }
}

function notModelled(line: number, what: string): never {
  throw new PfConfSyntaxError(line, `${NOT_MODELLED}${what}`);
}

/** F93 parse.y yylex, lgetc, findeol. */
class Lexer {
  private readonly inputs: { text: string; pos: number; line: number; file: string }[];
  /** The text of the macro being read (parse.y parsebuf); null when reading the file. */
  private expansion: { text: string; pos: number } | null = null;
  private peeked: Token[] = [];

  constructor(
    text: string,
    file: string,
    private readonly macros: Map<string, string>,
  ) {
    this.inputs = [{ text, pos: 0, line: 1, file }];
  }

  get file(): string {
    return (this.inputs[this.inputs.length - 1] as { file: string }).file;
  }

  /** Starts reading another file where this one stands (parse.y include → pushfile). */
  include(text: string, file: string): void {
    this.inputs.push({ text, pos: 0, line: 1, file });
    // The include statement ends there (parse.y include: lungetc('\n')).
    this.peeked.unshift({ kind: 'nl', text: '\n', line: 1 });
  }

  peek(offset = 0): Token {
    while (this.peeked.length <= offset) this.peeked.push(this.read());
    return this.peeked[offset] as Token;
  }

  next(): Token {
    const token = this.peek();
    this.peeked.shift();
    return token;
  }

  private top() {
    return this.inputs[this.inputs.length - 1] as { text: string; pos: number; line: number };
  }

  private char(offset = 0): string {
    if (this.expansion !== null) {
      const c = this.expansion.text[this.expansion.pos + offset];
      if (c !== undefined) return c;
      offset -= this.expansion.text.length - this.expansion.pos;
    }
    const input = this.top();
    // A backslash before a newline continues the line (lgetc).
    let pos = input.pos;
    for (let i = 0; ; i++) {
      while (input.text[pos] === '\\' && input.text[pos + 1] === '\n') pos += 2;
      if (i === offset) return input.text[pos] ?? '';
      pos++;
    }
  }

  private advance(): string {
    if (this.expansion !== null) {
      const c = this.expansion.text[this.expansion.pos];
      if (c !== undefined) {
        this.expansion.pos++;
        return c;
      }
      this.expansion = null;
    }
    const input = this.top();
    while (input.text[input.pos] === '\\' && input.text[input.pos + 1] === '\n') {
      input.pos += 2;
      input.line++;
    }
    const c = input.text[input.pos] ?? '';
    if (c !== '') input.pos++;
    if (c === '\n') input.line++;
    return c;
  }

  private line(): number {
    return this.top().line;
  }

  private read(): Token {
    for (;;) {
      while (this.char() === ' ' || this.char() === '\t' || this.char() === '\r') this.advance();
      const line = this.line();
      if (this.char() === '#') {
        while (this.char() !== '\n' && this.char() !== '') this.advance();
      }
      const c = this.char();
      if (c === '') {
        if (this.inputs.length > 1) {
          this.inputs.pop(); // popfile: back to the including file
          continue;
        }
        return { kind: 'eof', text: '', line };
      }
      if (c === '$' && this.expansion === null) {
        this.advance();
        let name = '';
        while (/[A-Za-z0-9_]/.test(this.char())) name += this.advance();
        const value = this.macros.get(name);
        if (value === undefined) throw new PfConfSyntaxError(line, `macro '${name}' not defined`);
        this.expansion = { text: value, pos: 0 };
        continue;
      }
      if (c === '"' || c === "'") {
        this.advance();
        let value = '';
        for (;;) {
          const d = this.advance();
          if (d === '') {
            throw new PfConfSyntaxError(line, 'reached end of file while parsing quoted string');
          }
          if (d === '\\') {
            const next = this.char();
            if (next === c) {
              value += this.advance();
              continue;
            }
          }
          if (d === c) break;
          if (d !== '\n') value += d;
        }
        return { kind: 'string', text: value, line };
      }
      if (c === '\n') {
        this.advance();
        return { kind: 'nl', text: '\n', line };
      }
      const two = c + this.char(1);
      if (two === '<>' || two === '><' || two === '->') {
        this.advance();
        this.advance();
        return { kind: 'punct', text: two, line };
      }
      if (c === '-' || /[0-9]/.test(c)) {
        // A number only when it ends where a number may (allowed_to_end_number).
        let n = 0;
        let digits = c;
        while (/[0-9]/.test(this.char(n + 1))) digits += this.char(++n);
        const end = this.char(n + 1);
        if (!(digits === '-') && (end === '' || /[\s),/}=]/.test(end))) {
          for (let i = 0; i <= n; i++) this.advance();
          return { kind: 'number', text: digits, line };
        }
        if (c === '-') {
          this.advance();
          return { kind: 'punct', text: '-', line };
        }
      }
      if (/[A-Za-z0-9:_]/.test(c)) {
        let word = '';
        while (isInString(this.char())) word += this.advance();
        return { kind: 'word', text: word, line };
      }
      this.advance();
      return { kind: 'punct', text: c, line };
    }
  }

  /** Skips to the end of the line (findeol after an error). */
  skipLine(): void {
    const newline = this.peeked.findIndex((t) => t.kind === 'nl' || t.kind === 'eof');
    if (newline >= 0) {
      this.peeked = this.peeked.slice(newline);
      return;
    }
    this.peeked = [];
    this.expansion = null;
    while (this.char() !== '\n' && this.char() !== '') this.advance();
  }
}

/** parse.y allowed_in_string: alphanumerics and punctuation but ( ) { } < > ! = / # , */
function isInString(c: string): boolean {
  if (c === '') return false;
  if (/[A-Za-z0-9]/.test(c)) return true;
  return /[!-/:-@[-`{-~]/.test(c) && !'(){}<>!=/#,'.includes(c);
}

/** A port operand as parseport/getservice read it. */
function servicePort(text: string, line: number): number {
  if (/^\d+$/.test(text) || /^0x[0-9a-f]+$/i.test(text)) {
    const n = Number(text);
    if (n > 65535) throw new PfConfSyntaxError(line, `illegal port value ${n}`);
    return n;
  }
  const n = SERVICES[text];
  if (n !== undefined) return n;
  // getservbyname(3) of something no services(5) line can name: pfctl says "unknown port".
  if (!/^[A-Za-z][A-Za-z0-9+_-]*$/.test(text)) {
    throw new PfConfSyntaxError(line, `unknown port ${text}`);
  }
  return notModelled(line, `the service name "${text}" (the model's services table lacks it)`);
}

interface Range {
  readonly low: number;
  readonly high: number;
  /** `a:b` (a range), `a:*` (from a, rdr only), or a single port. */
  readonly kind: 'single' | 'range' | 'star';
}

class Parser {
  private readonly problems: PfConfProblem[] = [];
  private readonly macros: Map<string, string>;
  private readonly lexer: Lexer;
  private ruleState = RULE_STATE.none;
  private requireOrder = true;
  private blockPolicy: PfBlockPolicy = { kind: 'drop' };
  private statePolicy: PfStateBinding | null = null;
  private readonly options: PfOption[] = [];
  private readonly tables: PfTableDefinition[] = [];
  private readonly rules: PfRule[] = [];
  private readonly loadAnchors: PfLoadAnchor[] = [];
  private readonly interfaces: ReadonlySet<string> | undefined;
  private readonly readFile: ((path: string) => string | undefined) | undefined;

  constructor(
    text: string,
    options: {
      file: string;
      macros?: Readonly<Record<string, string>>;
      interfaces?: ReadonlySet<string>;
      readFile?: (path: string) => string | undefined;
    },
  ) {
    this.macros = new Map(Object.entries(options.macros ?? {}));
    this.lexer = new Lexer(text, options.file, this.macros);
    this.interfaces = options.interfaces;
    this.readFile = options.readFile;
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
    this.problems.push({ file: this.lexer.file, line: error.line, message: error.message });
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

  /** A STRING: quoted text, or an unquoted word that is not a keyword. */
  private isString(offset = 0): boolean {
    const token = this.lexer.peek(offset);
    return token.kind === 'string' || (token.kind === 'word' && !KEYWORDS.has(token.text));
  }

  private string(): Token {
    const token = this.lexer.next();
    if (token.kind === 'string' || (token.kind === 'word' && !KEYWORDS.has(token.text))) {
      return token;
    }
    return this.fail(token);
  }

  /** parse.y `string: STRING string | STRING`: words joined by a space. */
  private strings(): Token {
    const first = this.string();
    let text = first.text;
    while (this.isString()) text += ` ${this.lexer.next().text}`;
    return { ...first, text };
  }

  /** parse.y numberstring: a NUMBER or a STRING. */
  private numberString(): Token {
    if (this.lexer.peek().kind === 'number') return this.lexer.next();
    return this.string();
  }

  private number(): number {
    const token = this.lexer.next();
    if (token.kind !== 'number') this.fail(token);
    return Number(token.text);
  }

  private optnl(): void {
    while (this.lexer.peek().kind === 'nl') this.lexer.next();
  }

  /** A list `{ a, b c }` (commas optional, newlines allowed) or one item. */
  private list<T>(item: () => T): T[] {
    if (!this.accept('{')) return [item()];
    this.optnl();
    const out: T[] = [];
    while (!this.isPunct('}')) {
      if (this.lexer.peek().kind === 'eof') this.fail(this.lexer.peek());
      out.push(item());
      this.accept(',');
      this.optnl();
    }
    this.expect('}');
    return out;
  }

  private checkOrder(state: number, line: number): void {
    if (this.requireOrder && this.ruleState > state) {
      throw new PfConfSyntaxError(line, ORDER_MESSAGE);
    }
    this.ruleState = state;
  }

  private statement(): void {
    const token = this.lexer.peek();
    if (this.isString() && this.isPunct('=', 1)) {
      this.varset();
      return;
    }
    if (token.kind !== 'word') this.fail(token);
    switch (token.text) {
      case 'include':
        this.include();
        return;
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
        this.scrubRule(false);
        return;
      case 'nat':
      case 'rdr':
        this.translationRule(false);
        return;
      case 'binat':
        this.binatRule(false);
        return;
      case 'no':
        this.lexer.next();
        if (this.isWord('scrub')) this.scrubRule(true);
        else if (this.isWord('nat') || this.isWord('rdr')) this.translationRule(true);
        else if (this.isWord('binat')) this.binatRule(true);
        else this.fail(this.lexer.peek());
        return;
      case 'pass':
      case 'block':
        this.filterRule();
        return;
      case 'antispoof':
        notModelled(token.line, 'antispoof');
        break;
      case 'altq':
      case 'queue':
        notModelled(token.line, 'queueing (altq, queue)');
        break;
      default:
        this.fail(token);
    }
  }

  /** parse.y varset: `name = value [value ...]`, the words joined by a space. */
  private varset(): void {
    const name = this.lexer.next();
    this.expect('=');
    const first = this.numberString();
    let value = first.text;
    while (this.lexer.peek().kind === 'number' || this.isString()) {
      value += ` ${this.lexer.next().text}`;
    }
    this.macros.set(name.text, value);
  }

  private include(): void {
    const start = this.expect('include');
    const file = this.string();
    const text = this.readFile?.(file.text);
    if (text === undefined) {
      this.fail(start, `failed to include file ${file.text}`);
    }
    this.lexer.include(text, file.text);
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
    const value: string[] = [];
    const order = (): void => {
      this.checkOrder(RULE_STATE.option, set.line);
    };
    switch (name.text) {
      case 'optimization': {
        order();
        const hint = this.string();
        if (!HINTS.has(hint.text)) this.fail(hint, `unknown optimization ${hint.text}`);
        value.push(hint.text);
        break;
      }
      case 'ruleset-optimization': {
        const level = this.string();
        if (!['none', 'basic', 'profile'].includes(level.text)) {
          this.fail(level, `unknown ruleset-optimization ${level.text}`);
        }
        value.push(level.text);
        break;
      }
      case 'timeout':
      case 'limit': {
        order();
        const one = (): void => {
          const key = this.string();
          const n = this.number();
          if (name.text === 'timeout' && !TIMEOUTS.has(key.text)) {
            this.fail(key, `unknown timeout ${key.text}`);
          }
          if (name.text === 'limit' && !LIMITS.has(key.text)) {
            this.fail(key, `unable to set limit ${key.text} ${n}`);
          }
          value.push(key.text, String(n));
        };
        this.list(one);
        break;
      }
      case 'loginterface': {
        order();
        const iface = this.lexer.next();
        if (!(iface.kind === 'word' && iface.text === 'all') && !this.isStringToken(iface)) {
          this.fail(iface);
        }
        value.push(iface.text);
        break;
      }
      case 'hostid': {
        order();
        const n = this.lexer.peek().kind === 'number' ? this.number() : Number(this.string().text);
        if (!Number.isInteger(n) || n === 0 || n > 0xffffffff) {
          this.fail(set, 'hostid must be non-zero');
        }
        value.push(String(n));
        break;
      }
      case 'block-policy': {
        order();
        if (this.accept('drop')) this.blockPolicy = { kind: 'drop' };
        else if (this.accept('return')) this.blockPolicy = { kind: 'return' };
        else this.fail(this.lexer.peek());
        value.push(this.blockPolicy.kind);
        break;
      }
      case 'require-order': {
        const answer = this.lexer.next();
        if (answer.kind === 'word' && answer.text === 'no') this.requireOrder = false;
        else if (this.isStringToken(answer) && answer.text === 'yes') this.requireOrder = true;
        else this.fail(answer, `invalid value '${answer.text}', expected 'yes' or 'no'`);
        value.push(this.requireOrder ? 'yes' : 'no');
        break;
      }
      case 'fingerprints':
        notModelled(set.line, 'OS fingerprints (set fingerprints)');
        break;
      case 'state-policy': {
        if (this.accept('if-bound')) this.statePolicy = 'if-bound';
        else if (this.accept('floating')) this.statePolicy = 'floating';
        else this.fail(this.lexer.peek());
        value.push(this.statePolicy);
        break;
      }
      case 'debug': {
        order();
        const level = this.string();
        if (!['none', 'urgent', 'misc', 'loud'].includes(level.text)) {
          this.fail(level, `error setting debuglevel ${level.text}`);
        }
        value.push(level.text);
        break;
      }
      case 'skip': {
        const interfaces = this.interfaceSpec();
        if (interfaces === null) this.fail(this.lexer.peek());
        for (const i of interfaces) {
          if (i.negated) this.fail(set, 'skip on ! <interface> is not supported');
          value.push(i.name);
        }
        break;
      }
      case 'state-defaults':
        value.push(...this.stateOptionList().options);
        break;
    }
    this.options.push({ line: set.line, name: name.text, value });
  }

  private isStringToken(token: Token): boolean {
    return token.kind === 'string' || (token.kind === 'word' && !KEYWORDS.has(token.text));
  }

  private table(): void {
    const start = this.expect('table');
    this.expect('<');
    const name = this.string();
    this.expect('>');
    if (name.text.length > TABLE_NAME_MAX) {
      this.fail(name, `table name too long, max ${TABLE_NAME_MAX} chars`);
    }
    let persist = false;
    let constant = false;
    let counters = false;
    const entries: PfTableItem[] = [];
    const files: string[] = [];
    for (;;) {
      if (this.isWord('file')) {
        this.lexer.next();
        files.push(this.string().text);
      } else if (this.isPunct('{')) {
        this.lexer.next();
        this.optnl();
        while (!this.isPunct('}')) {
          for (const host of this.hostListItem()) {
            const kind = host.address.kind;
            if (kind === 'range') {
              this.fail(start, 'address ranges are not permitted inside tables');
            }
            if (kind === 'interface' && host.address.dynamic) {
              this.fail(start, 'dynamic addresses are not permitted inside tables');
            }
            if (kind === 'table') this.fail(start, 'tables cannot contain tables');
            if (kind === 'no-route') this.fail(start, '"no-route" is not permitted inside tables');
            if (kind === 'urpf-failed') {
              this.fail(start, '"urpf-failed" is not permitted inside tables');
            }
            if (kind === 'any') this.fail(start);
            entries.push({ negated: host.negated, address: host.address });
          }
          this.accept(',');
          this.optnl();
        }
        this.expect('}');
      } else if (this.isString()) {
        const option = this.lexer.next();
        if (option.text === 'persist') persist = true;
        else if (option.text === 'const') constant = true;
        else if (option.text === 'counters') counters = true;
        else this.fail(option, `invalid table option '${option.text}'`);
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

  private loadAnchor(): void {
    const start = this.expect('load');
    this.expect('anchor');
    const anchor = this.strings();
    this.expect('from');
    const file = this.strings();
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
    // `anchor` takes an optional name (an inline anchor may be unnamed); the others a string.
    const nameToken = ruleset === 'filter' && !this.isString() ? null : this.strings();
    const name = nameToken?.text ?? '';
    if (name.startsWith('_') || name.includes('/_')) {
      this.fail(keyword, "anchor names beginning with '_' are reserved for internal use");
    }
    const wildcard = name.endsWith('/*');
    const path = wildcard ? name.slice(0, -2) : name;
    if (path.includes('*')) this.fail(keyword, 'wildcard anchor names must end with "/*"');
    const direction = ruleset === 'filter' ? this.direction() : null;
    const quick = ruleset === 'filter' ? this.accept('quick') : false;
    const interfaces = this.interfaceSpec();
    const family = this.family();
    const protocols = this.protocols();
    const { from, to } = this.fromTo();
    let tagged: PfTagged | null = null;
    let label: string | null = null;
    if (ruleset === 'filter') {
      const opts = this.filterOptions(keyword);
      if (opts.state !== null) this.fail(keyword, 'cannot specify state handling on anchors');
      tagged = opts.tagged;
      label = opts.label;
    } else if (this.accept('rtable')) {
      this.number();
    }
    if (this.isPunct('{')) notModelled(keyword.line, 'inline anchors (anchor … { rules })');
    if (nameToken === null)
      this.fail(keyword, 'anchors without explicit rules must specify a name');
    const rule: PfAnchorRule = {
      kind: 'anchor',
      line: keyword.line,
      ruleset,
      name: path,
      wildcard,
      direction,
      quick,
      interfaces,
      family,
      protocols,
      from,
      to,
      tagged,
      label,
    };
    const state =
      ruleset === 'filter'
        ? RULE_STATE.filter
        : ruleset === 'scrub'
          ? RULE_STATE.scrub
          : ruleset === 'dummynet'
            ? RULE_STATE.dummynet
            : RULE_STATE.nat;
    this.checkOrder(state, keyword.line);
    this.rules.push(rule);
  }

  /** parse.y scrubrule: `[no] scrub dir logquick interface af proto fromto scrub_opts`. */
  private scrubRule(no: boolean): void {
    const start = this.expect('scrub');
    const direction = this.direction();
    const { log, quick } = this.logQuick();
    if (quick) this.fail(start, "scrub rules do not support 'quick'");
    const interfaces = this.interfaceSpec();
    const family = this.family();
    const protocols = this.protocols();
    const { from, to } = this.fromTo();
    const options: string[] = [];
    const seen = new Set<string>();
    const once = (what: string): void => {
      if (seen.has(what)) this.fail(start, `${what} cannot be respecified`);
      seen.add(what);
    };
    let fragments: PfScrubRule['fragments'] = 'reassemble';
    let reassembleTcp = false;
    for (;;) {
      if (this.accept('no-df')) {
        once('no-df');
        options.push('no-df');
      } else if (this.accept('min-ttl')) {
        once('min-ttl');
        const n = this.number();
        if (n < 0 || n > 255) this.fail(start, `illegal min-ttl value ${n}`);
        options.push(`min-ttl ${n}`);
      } else if (this.accept('max-mss')) {
        once('max-mss');
        const n = this.number();
        if (n < 0 || n > 65535) this.fail(start, `illegal max-mss value ${n}`);
        options.push(`max-mss ${n}`);
      } else if (this.accept('set-tos')) {
        once('set-tos');
        options.push(`set-tos 0x${this.tos().toString(16).padStart(2, '0')}`);
      } else if (this.accept('fragment')) {
        once('fragcache');
        // F93 parse.y fragcache: reassemble, crop or drop-ovl; nothing else (no `no reassemble`).
        if (this.accept('reassemble')) fragments = 'reassemble';
        else if (this.accept('crop')) fragments = 'crop';
        else if (this.accept('drop-ovl')) fragments = 'drop-ovl';
        else this.fail(this.lexer.peek());
      } else if (this.accept('reassemble')) {
        const what = this.string();
        if (what.text.toLowerCase() !== 'tcp') {
          this.fail(what, `scrub reassemble supports only tcp, not '${what.text}'`);
        }
        once('reassemble tcp');
        reassembleTcp = true;
      } else if (this.accept('random-id')) {
        once('random-id');
        options.push('random-id');
      } else if (this.accept('rtable')) {
        options.push(`rtable ${this.number()}`);
      } else if (this.isWord('tagged') || (this.isPunct('!') && this.isWord('tagged', 1))) {
        const tagged = this.tagged();
        options.push(`${tagged.negated ? '! ' : ''}tagged ${tagged.name}`);
      } else break;
    }
    if (reassembleTcp) {
      if (direction !== null) this.fail(start, 'reassemble tcp rules can not specify direction');
      options.unshift('reassemble tcp');
    }
    const rule: PfScrubRule = {
      kind: 'scrub',
      line: start.line,
      no,
      direction,
      log,
      interfaces,
      family,
      protocols,
      from,
      to,
      fragments,
      options,
    };
    this.checkOrder(RULE_STATE.scrub, start.line);
    this.rules.push(rule);
  }

  /** parse.y natrule: `[no] nat|rdr [pass] [log] interface af proto fromto tag tagged rtable -> …`. */
  private translationRule(no: boolean): void {
    const keyword = this.lexer.next();
    const kind = keyword.text as 'nat' | 'rdr';
    const { pass, log } = this.natPassLog(no, keyword);
    const interfaces = this.interfaceSpec();
    const family = this.family();
    const protocols = this.protocols();
    const { from, to } = this.fromTo();
    let tag: string | null = null;
    if (this.accept('tag')) tag = this.tagName(keyword);
    let tagged: PfTagged | null = null;
    if (this.isWord('tagged') || (this.isPunct('!') && this.isWord('tagged', 1))) {
      tagged = this.tagged();
    }
    if (this.accept('rtable')) this.number();
    let redirect: PfRedirect | null = null;
    if (this.isPunct('->')) {
      const arrow = this.lexer.next();
      if (no) this.fail(arrow, "translation rule with 'no' does not need '->'");
      redirect = this.redirection(kind, keyword);
    } else if (!no) {
      this.fail(keyword, "translation rule requires '-> address'");
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

  /** parse.y binatrule: `[no] binat natpasslog interface af proto FROM host toipspec … -> host`. */
  private binatRule(no: boolean): void {
    const keyword = this.expect('binat');
    const { pass, log } = this.natPassLog(no, keyword);
    const interfaces = this.interfaceSpec();
    if (interfaces !== null && interfaces.length > 1) this.fail(keyword);
    const family = this.family();
    const protocols = this.protocols();
    if (protocols !== null && protocols.length > 1) this.fail(keyword);
    this.expect('from');
    const source = this.host();
    let destination: PfHost[] = [{ negated: false, address: { kind: 'any' } }];
    if (this.accept('to')) destination = this.ipspec();
    let tag: string | null = null;
    if (this.accept('tag')) tag = this.tagName(keyword);
    let tagged: PfTagged | null = null;
    if (this.isWord('tagged') || (this.isPunct('!') && this.isWord('tagged', 1))) {
      tagged = this.tagged();
    }
    if (this.accept('rtable')) this.number();
    let redirect: PfRedirect | null = null;
    if (this.accept('->')) {
      if (no) this.fail(keyword, "'no binat' rule does not need '->'");
      const hosts = this.host();
      if (hosts.length !== 1) this.fail(keyword, 'binat rule must redirect to a single address');
      redirect = {
        hosts: hosts.map((h) => h.address),
        port: null,
        staticPort: false,
        pool: { type: null, stickyAddress: false },
      };
    } else if (!no) {
      this.fail(keyword, "'binat' rule requires '-> address'");
    }
    if (source.length !== 1) this.fail(keyword, 'multiple binat ip addresses');
    const rule: PfTranslationRule = {
      kind: 'binat',
      line: keyword.line,
      no,
      pass,
      log,
      interfaces,
      family,
      protocols,
      from: { hosts: source, ports: null },
      to: { hosts: destination, ports: null },
      tag,
      tagged,
      redirect,
    };
    this.checkOrder(RULE_STATE.nat, keyword.line);
    this.rules.push(rule);
  }

  private natPassLog(no: boolean, keyword: Token): { pass: boolean; log: PfLog | null } {
    const pass = this.accept('pass');
    if (no && pass) this.fail(keyword, '"pass" not valid with "no"');
    const log = this.isWord('log') ? this.log() : null;
    return { pass, log };
  }

  /** `-> redirspec [port portstar] pool_opts` (F93 parse.y redirpool and the natrule checks). */
  private redirection(kind: 'nat' | 'rdr', keyword: Token): PfRedirect {
    const hosts: PfAddress[] = [];
    const addHosts = (list: PfHost[]): void => {
      for (const h of list) hosts.push(h.address);
    };
    if (this.accept('{')) {
      this.optnl();
      while (!this.isPunct('}')) {
        addHosts(this.host());
        this.accept(',');
        this.optnl();
      }
      this.expect('}');
    } else {
      addHosts(this.host());
    }
    let port: PfPort | null = null;
    if (this.accept('port')) {
      const range = this.portRange(true);
      port = {
        op: range.kind === 'single' ? '=' : ':',
        low: range.low,
        high: range.kind === 'star' ? 0 : range.high,
      };
    }
    const pool = this.poolOptions();
    // Apple's NAT mapping and filtering extension, as Internet Sharing's live rules print it
    // (`-> (en0:0) extfilter ei`, NOTES §1): parsed, not evaluated.
    while (this.isWord('extfilter') || this.isWord('extmap')) {
      this.lexer.next();
      this.string();
    }
    const multiAddress =
      hosts.length > 1 ||
      hosts.some((h) => h.kind === 'table' || (h.kind === 'interface' && isMultiAddress(h)));
    const type = pool.type ?? (multiAddress ? 'round-robin' : null);
    if (type !== 'round-robin') {
      const table = hosts.find((h) => h.kind === 'table');
      if (table !== undefined) {
        this.fail(keyword, 'tables are only supported in round-robin redirection pools');
      }
      const alias = hosts.find((h) => h.kind === 'interface' && isMultiAddress(h));
      if (alias !== undefined) {
        this.fail(
          keyword,
          `interface (${alias.kind === 'interface' ? alias.name : ''}) is only supported in round-robin redirection pools`,
        );
      }
      if (hosts.length > 1) {
        this.fail(keyword, 'only round-robin valid for multiple redirection addresses');
      }
    }
    if (pool.staticPort) {
      if (kind !== 'nat')
        this.fail(keyword, "the 'static-port' option is only valid with nat rules");
      if (port !== null) {
        this.fail(keyword, "the 'static-port' option can't be used when specifying a port range");
      }
    }
    return {
      hosts,
      port,
      staticPort: pool.staticPort,
      pool: { type, stickyAddress: pool.stickyAddress },
    };
  }

  private poolOptions(): { type: PfPool['type']; stickyAddress: boolean; staticPort: boolean } {
    let type: PfPool['type'] = null;
    let stickyAddress = false;
    let staticPort = false;
    for (;;) {
      const token = this.lexer.peek();
      const setType = (t: NonNullable<PfPool['type']>): void => {
        if (type !== null) this.fail(token, 'pool type cannot be redefined');
        type = t;
      };
      if (this.accept('bitmask')) setType('bitmask');
      else if (this.accept('random')) setType('random');
      else if (this.accept('round-robin')) setType('round-robin');
      else if (this.accept('source-hash')) {
        setType('source-hash');
        if (this.isString()) {
          const key = this.strings();
          if (key.text.startsWith('0x') && key.text.length !== 34) {
            this.fail(key, 'hex key must be 128 bits (32 hex digits) long');
          }
        }
      } else if (this.accept('static-port')) {
        if (staticPort) this.fail(token, 'static-port cannot be redefined');
        staticPort = true;
      } else if (this.accept('sticky-address')) {
        stickyAddress = true;
      } else break;
    }
    return { type, stickyAddress, staticPort };
  }

  private filterRule(): void {
    const actionToken = this.lexer.next();
    const action = actionToken.text as 'pass' | 'block';
    const blockPolicy = action === 'block' ? this.blockSpec() : null;
    const direction = this.direction();
    const { log, quick } = this.logQuick();
    const interfaces = this.interfaceSpec();
    const route = this.route();
    const family = this.family();
    const protocols = this.protocols();
    const { from, to } = this.fromTo();
    const opts = this.filterOptions(actionToken);
    const flags = opts.flags;
    if (flags !== null && flags !== 'any') {
      // TCP flag letters are ASCII: splitting by code unit is exact.
      if (flags.set.split('').some((f) => !flags.mask.includes(f))) {
        this.fail(actionToken, 'flags always false');
      }
      if (protocols !== null && !protocols.includes(6)) {
        this.fail(actionToken, 'flags only apply to tcp');
      }
    }
    if (route !== null && route.kind !== 'fastroute' && direction === null) {
      this.fail(actionToken, 'direction must be explicit with rules that specify routing');
    }
    if (route !== null && route.kind !== 'fastroute') {
      // FreeBSD's pfctl (2023) refuses routing on block rules; F93 takes it and pf never uses
      // it (only a pass rule routes, XNU pf.c pf_test: `else if (r->rt)` for PF_PASS). The
      // model refuses it: a model stricter than pfctl only ever refuses what it cannot check.
      if (action === 'block') {
        this.fail(actionToken, 'route-to, reply-to and dup-to are not supported on block rules');
      }
    }
    const state = opts.state;
    if (action === 'block' && state !== null && state !== 'no') {
      this.fail(actionToken, "keep state on block rules doesn't make sense");
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
      flags: opts.flags,
      icmpTypes: opts.icmpTypes,
      state,
      // `set state-policy if-bound` binds the states of the rules after it (F93 parse.y pfrule:
      // `r.rule_flag |= default_statelock` where no state option says otherwise).
      stateBinding:
        opts.stateBinding ??
        ((state ?? (action === 'pass' ? 'keep' : 'no')) !== 'no' && this.statePolicy === 'if-bound'
          ? 'if-bound'
          : null),
      stateOptions: opts.stateOptions,
      tag: opts.tag,
      tagged: opts.tagged,
      label: opts.label,
      probability: opts.probability,
      tos: opts.tos,
      rtable: opts.rtable,
      allowOpts: opts.allowOpts,
      fragment: opts.fragment,
    };
    this.checkOrder(RULE_STATE.filter, actionToken.line);
    this.rules.push(rule);
  }

  /** parse.y blockspec. */
  private blockSpec(): PfBlockPolicy {
    if (this.accept('drop')) return { kind: 'drop' };
    if (this.accept('return')) return { kind: 'return' };
    if (this.accept('return-rst')) {
      if (!this.accept('(')) return { kind: 'return-rst', ttl: null };
      this.expect('ttl');
      const ttl = this.number();
      this.expect(')');
      if (ttl < 0 || ttl > 255) this.fail(this.lexer.peek(), `illegal ttl value ${ttl}`);
      return { kind: 'return-rst', ttl };
    }
    const six = this.isWord('return-icmp6');
    if (this.accept('return-icmp') || this.accept('return-icmp6')) {
      if (!this.accept('(')) return { kind: 'return-icmp', icmp: RETURN_ICMP, icmp6: RETURN_ICMP6 };
      const first = this.icmpSpec(six ? 6 : 4);
      let second: number | null = null;
      if (!six && (this.accept(',') || !this.isPunct(')'))) second = this.icmpSpec(6);
      this.expect(')');
      return six
        ? { kind: 'return-icmp', icmp: RETURN_ICMP, icmp6: first }
        : { kind: 'return-icmp', icmp: first, icmp6: second ?? RETURN_ICMP };
    }
    return this.blockPolicy;
  }

  /** parse.y reticmpspec / parseicmpspec: a code of the default unreach type, by name or number. */
  private icmpSpec(family: 4 | 6): number {
    const type = family === 4 ? RETURN_ICMP >> 8 : RETURN_ICMP6 >> 8;
    const token = this.lexer.next();
    let code: number;
    if (token.kind === 'number') code = Number(token.text);
    else if (this.isStringToken(token)) {
      const named = icmpCodeByName(type, token.text, family);
      if (named === undefined) this.fail(token, `unknown icmp code ${token.text}`);
      code = named;
    } else return this.fail(token);
    if (code > 255) this.fail(token, `invalid icmp code ${code}`);
    return (type << 8) | code;
  }

  private direction(): 'in' | 'out' | null {
    if (this.accept('in')) return 'in';
    if (this.accept('out')) return 'out';
    return null;
  }

  /** parse.y logquick: `log`, `quick`, `log quick`, `quick log`. */
  private logQuick(): { log: PfLog | null; quick: boolean } {
    let log: PfLog | null = null;
    let quick = false;
    if (this.isWord('log')) log = this.log();
    if (this.accept('quick')) quick = true;
    if (log === null && quick && this.isWord('log')) log = this.log();
    return { log, quick };
  }

  /** parse.y log / logopts: `log`, `log (all, user, to pflogN)`. */
  private log(): PfLog {
    this.expect('log');
    const out = { all: false, user: false, to: 0 };
    if (!this.accept('(')) return out;
    do {
      if (this.accept('all')) out.all = true;
      else if (this.accept('user') || this.accept('group')) out.user = true;
      else if (this.accept('to')) {
        const name = this.strings();
        if (!name.text.startsWith('pflog')) {
          this.fail(name, `${name.text}: should be a pflog interface`);
        }
        const n = Number(name.text.slice(5));
        if (!/^\d+$/.test(name.text.slice(5)) || n > 255) {
          this.fail(name, `${name.text}: invalid`);
        }
        out.to = n;
      } else this.fail(this.lexer.peek());
    } while (this.accept(','));
    this.expect(')');
    return out;
  }

  private interfaceSpec(): PfInterfaceSpec[] | null {
    if (!this.accept('on')) return null;
    return this.list(() => {
      const negated = this.accept('!');
      const name = this.string();
      if (name.text.length > IFNAME_MAX) this.fail(name, 'interface name too long');
      return { negated, name: name.text };
    });
  }

  /** parse.y route: `fastroute`, or `route-to|reply-to|dup-to routespec pool_opts`. */
  private route(): PfRoute | null {
    const token = this.lexer.peek();
    if (this.accept('fastroute')) {
      return { kind: 'fastroute', targets: [], pool: { type: null, stickyAddress: false } };
    }
    if (!this.isWord('route-to') && !this.isWord('reply-to') && !this.isWord('dup-to')) {
      return null;
    }
    this.lexer.next();
    const kind = token.text as 'route-to' | 'reply-to' | 'dup-to';
    const targets = this.list(() => this.routeHost());
    const pool = this.poolOptions();
    if (pool.staticPort) this.fail(token);
    // F93 parse.y pfrule: a pool of several addresses is round-robin unless told otherwise, and
    // only a round-robin pool may hold several.
    const type = pool.type ?? (targets.length > 1 ? 'round-robin' : null);
    if (targets.length > 1 && type !== 'round-robin') {
      this.fail(token, 'r.rpool.opts must be PF_POOL_ROUNDROBIN');
    }
    return { kind, targets, pool: { type, stickyAddress: pool.stickyAddress } };
  }

  /**
   * parse.y route_host: `STRING | '(' STRING host ')'` (OpenBSD parse.y 1.291 of 2003, 1.449 of
   * 2004, F93 parse.y:4205-4218): a bare interface name, or one with an address in parentheses.
   * `(ifname)` alone is a syntax error (after `( STRING` the grammar wants a host, and `)`
   * starts none); pf.conf(5)'s `"(" interface-name [ address ] ")"` (F93 pf.conf.5:2959) is the
   * man page's, not the parser's (Daniel Hartmeier on freebsd-pf, 2011-09-08, "route-to rule").
   */
  private routeHost(): { interface: string; address: Prefix | null } {
    let name: Token;
    let address: Prefix | null = null;
    if (this.accept('(')) {
      name = this.string();
      const hosts = this.host();
      this.expect(')');
      const first = hosts[0]?.address;
      if (first?.kind !== 'prefix') this.fail(name);
      address = first.prefix;
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
    return { interface: name.text, address };
  }

  private family(): Family | null {
    if (this.accept('inet')) return 4;
    if (this.accept('inet6')) return 6;
    return null;
  }

  private protocols(): number[] | null {
    if (!this.accept('proto')) return null;
    return this.list(() => {
      const token = this.lexer.next();
      let n: number;
      if (token.kind === 'number') {
        n = Number(token.text);
        if (n < 0 || n > 255) this.fail(token, 'protocol outside range');
      } else if (this.isStringToken(token)) {
        const named = PROTOCOL_NUMBERS[token.text];
        if (named === undefined) this.fail(token, `unknown protocol ${token.text}`);
        n = named;
      } else return this.fail(token);
      if (n === 0) this.fail(token, 'proto 0 cannot be used');
      return n;
    });
  }

  /** parse.y fromto: `all`, or `[from ipportspec] [os …] [to ipportspec]`. */
  private fromTo(): { from: PfEndpoint; to: PfEndpoint } {
    const any: PfEndpoint = { hosts: [{ negated: false, address: { kind: 'any' } }], ports: null };
    if (this.accept('all')) return { from: any, to: any };
    let from = any;
    let to = any;
    if (this.accept('from')) from = this.ipPortSpec();
    if (this.isWord('os')) notModelled(this.lexer.peek().line, 'OS fingerprints (os …)');
    if (this.accept('to')) {
      to = this.ipPortSpec();
      if (to.hosts.some((h) => h.address.kind === 'urpf-failed')) {
        this.fail(this.lexer.peek(), '"urpf-failed" is not permitted in a destination address');
      }
    }
    return { from, to };
  }

  private ipPortSpec(): PfEndpoint {
    let hosts: PfHost[] = [{ negated: false, address: { kind: 'any' } }];
    if (!this.isWord('port')) hosts = this.ipspec();
    let ports: PfPort[] | null = null;
    if (this.accept('port')) ports = this.list(() => this.portItem());
    return { hosts, ports };
  }

  /** parse.y ipspec: `any`, one xhost, or a `{ host_list }`. */
  private ipspec(): PfHost[] {
    if (this.accept('any')) return [{ negated: false, address: { kind: 'any' } }];
    if (this.isPunct('{')) {
      this.lexer.next();
      this.optnl();
      const out: PfHost[] = [];
      while (!this.isPunct('}')) {
        out.push(...this.hostListItem());
        this.accept(',');
        this.optnl();
      }
      this.expect('}');
      return out;
    }
    return this.xhost();
  }

  /** One item of a host_list: an ipspec (so `any` and nested braces too). */
  private hostListItem(): PfHost[] {
    return this.ipspec();
  }

  /** parse.y xhost: `[!] host | [!] no-route | [!] urpf-failed`. */
  private xhost(): PfHost[] {
    const negated = this.accept('!');
    if (this.accept('no-route')) return [{ negated, address: { kind: 'no-route' } }];
    if (this.accept('urpf-failed')) return [{ negated, address: { kind: 'urpf-failed' } }];
    return this.host().map((h) => ({ ...h, negated }));
  }

  /**
   * parse.y host: `STRING`, `STRING - STRING` (a range), `STRING/NUMBER`, `NUMBER/NUMBER`
   * (`10/8`), `(if)[/NUMBER]` (dynamic), `<table>`. A STRING is an interface (or `self`),
   * resolved when the file loads, an address, or a host name (F93 pfctl_parser.c host: host_if,
   * host_v4, host_v6, host_dns); the model resolves `localhost` only.
   */
  private host(): PfHost[] {
    const token = this.lexer.peek();
    if (this.accept('<')) {
      const name = this.string();
      this.expect('>');
      if (name.text.length > TABLE_NAME_MAX) {
        this.fail(name, `table name '${name.text}' too long`);
      }
      return [{ negated: false, address: { kind: 'table', name: name.text } }];
    }
    if (this.accept('(')) {
      const name = this.string();
      this.expect(')');
      if (!/^[A-Za-z]/.test(name.text)) this.fail(name, `invalid interface name '${name.text}'`);
      const parsed = interfaceWithModifier(name.text);
      if (parsed === null) this.fail(name, `interface ${name.text} has bad modifier`);
      let mask: number | null = null;
      if (this.accept('/')) {
        mask = this.number();
        if (mask < 0 || mask > 128) this.fail(name, 'bit number too big');
      }
      return [{ negated: false, address: { ...parsed, dynamic: true, mask } }];
    }
    if (this.isWord('route')) notModelled(token.line, 'route labels (route …)');
    if (token.kind === 'number' && this.isPunct('/', 1)) {
      this.lexer.next();
      this.lexer.next();
      const bits = this.number();
      // inet_net_pton: `10/8` is 10.0.0.0/8.
      const prefix = parsePrefix(
        `${token.text}.0.0.0`.split('.').slice(0, 4).join('.') + `/${bits}`,
      );
      if (prefix === undefined) this.fail(token, 'could not parse host specification');
      return [{ negated: false, address: { kind: 'prefix', prefix } }];
    }
    if (!this.isString()) this.fail(token);
    const text = this.lexer.next();
    if (this.accept('-')) {
      const end = this.string();
      const a = parseAddress(text.text);
      const b = parseAddress(end.text);
      if (a === undefined || b === undefined || a.family !== b.family) {
        this.fail(text, 'invalid address range');
      }
      const from = parsePrefix(text.text) as Prefix;
      const to = parsePrefix(end.text) as Prefix;
      return [{ negated: false, address: { kind: 'range', from, to } }];
    }
    let mask: number | null = null;
    if (this.isPunct('/')) {
      this.lexer.next();
      mask = this.number();
      if (mask > 128) this.fail(text, `invalid netmask '/${mask}'`);
    }
    return this.resolveHost(text, mask);
  }

  private resolveHost(token: Token, mask: number | null): PfHost[] {
    const text = token.text;
    const prefix = parsePrefix(mask === null ? text : `${text}/${mask}`);
    if (prefix !== undefined) {
      // set_ipmask masks off the host bits (F93 pfctl_parser.c).
      return [
        { negated: false, address: { kind: 'prefix', prefix: { ...prefix, hadHostBits: false } } },
      ];
    }
    if (text === 'self') return [{ negated: false, address: { kind: 'self', mask } }];
    const hosts = HOSTS[text];
    if (hosts !== undefined) {
      return hosts.map((a) => {
        const p = parsePrefix(mask === null ? a : `${a}/${mask}`) as Prefix;
        return {
          negated: false,
          address: { kind: 'prefix', prefix: { ...p, hadHostBits: false } },
        };
      });
    }
    const iface = interfaceWithModifier(text);
    // A name that can be an interface (letters then a unit number, or a family such as `en`,
    // with a modifier or not) is resolved as one when the file loads (host_if → ifa_lookup);
    // if no interface has it, that is "no IP address found" there.
    if (iface !== null && /^[A-Za-z][A-Za-z0-9]*$/.test(iface.name)) {
      if (mask !== null && (iface.modifier === 'network' || iface.modifier === 'broadcast')) {
        this.fail(token, 'network or broadcast lookup, but extra netmask given');
      }
      return [{ negated: false, address: { ...iface, dynamic: false, mask } }];
    }
    notModelled(token.line, `host name resolution ("${text}": pfctl would ask DNS)`);
  }

  /** parse.y port_item: `portrange`, `unaryop portrange`, `portrange PORTBINARY portrange`. */
  private portItem(): PfPort {
    const token = this.lexer.peek();
    const ops: Readonly<Record<string, PfPortOp>> = { '=': '=', '<': '<', '>': '>' };
    if (token.kind === 'punct' && (token.text in ops || token.text === '!')) {
      this.lexer.next();
      let op: PfPortOp;
      if (token.text === '!') {
        this.expect('=');
        op = '!=';
      } else if (token.text !== '=' && this.isPunct('=')) {
        this.lexer.next();
        op = token.text === '<' ? '<=' : '>=';
      } else op = ops[token.text] as PfPortOp;
      const range = this.portRange(false);
      if (range.kind !== 'single')
        this.fail(token, "':' cannot be used with an other port operator");
      return { op, low: range.low, high: range.low };
    }
    const first = this.portRange(false);
    const binary = this.lexer.peek();
    if (binary.kind === 'punct' && (binary.text === '<>' || binary.text === '><')) {
      this.lexer.next();
      const second = this.portRange(false);
      if (first.kind !== 'single' || second.kind !== 'single') {
        this.fail(binary, "':' cannot be used with an other port operator");
      }
      return { op: binary.text, low: first.low, high: second.low };
    }
    if (first.kind === 'range') return { op: ':', low: first.low, high: first.high };
    return { op: '=', low: first.low, high: first.low };
  }

  /** parse.y portrange / portstar → parseport: `p`, `a:b`, (rdr) `a:*`. */
  private portRange(star: boolean): Range {
    const token = this.numberString();
    const colon = token.text.indexOf(':');
    if (colon < 0) return { low: servicePort(token.text, token.line), high: 0, kind: 'single' };
    const low = servicePort(token.text.slice(0, colon), token.line);
    const rest = token.text.slice(colon + 1);
    if (star && rest === '*') return { low, high: 0, kind: 'star' };
    const high = servicePort(rest, token.line);
    if (low === high) return { low, high: 0, kind: 'single' };
    // F93 takes a range whose low end is above its high end; FreeBSD's pfctl refuses it since
    // 2024 ("invalid port range"). The model refuses it: it never matches anything.
    if (low > high) this.fail(token, 'invalid port range');
    return { low, high, kind: 'range' };
  }

  private tos(): number {
    const token = this.lexer.next();
    let n = 0;
    if (token.kind === 'number') n = Number(token.text);
    else if (token.text === 'lowdelay') n = 0x10;
    else if (token.text === 'throughput') n = 0x08;
    else if (token.text === 'reliability') n = 0x04;
    else if (/^0x[0-9a-f]+$/i.test(token.text)) n = Number(token.text);
    if (n === 0 || n > 255) this.fail(token, `illegal tos value ${token.text}`);
    return n;
  }

  /** parse.y filter_opts, each at most once where pfctl says so. */
  private filterOptions(_start: Token): {
    flags: PfFilterRule['flags'];
    icmpTypes: PfIcmpType[] | null;
    state: PfStateMode | null;
    stateBinding: PfStateBinding | null;
    stateOptions: string[];
    tag: string | null;
    tagged: PfTagged | null;
    label: string | null;
    probability: number | null;
    tos: number | null;
    rtable: number | null;
    allowOpts: boolean;
    fragment: boolean;
  } {
    const out = {
      flags: null as PfFilterRule['flags'],
      icmpTypes: null as PfIcmpType[] | null,
      state: null as PfStateMode | null,
      stateBinding: null as PfStateBinding | null,
      stateOptions: [] as string[],
      tag: null as string | null,
      tagged: null as PfTagged | null,
      label: null as string | null,
      probability: null as number | null,
      tos: null as number | null,
      rtable: null as number | null,
      allowOpts: false,
      fragment: false,
    };
    for (;;) {
      const token = this.lexer.peek();
      if (this.accept('flags')) {
        if (out.flags !== null) this.fail(token, 'flags cannot be redefined');
        out.flags = this.flags();
      } else if (this.isWord('icmp-type') || this.isWord('icmp6-type')) {
        if (out.icmpTypes !== null) this.fail(token, 'icmp-type cannot be redefined');
        const family = this.lexer.next().text === 'icmp6-type' ? 6 : 4;
        out.icmpTypes = this.list(() => this.icmpType(family));
      } else if (this.accept('tos')) {
        if (out.tos !== null) this.fail(token, 'tos cannot be redefined');
        out.tos = this.tos();
      } else if (this.isWord('keep') || this.isWord('modulate') || this.isWord('synproxy')) {
        if (out.state !== null) this.fail(token, 'modulate or keep cannot be redefined');
        out.state = this.lexer.next().text as PfStateMode;
        this.expect('state');
        if (this.isPunct('(')) {
          const parsed = this.stateOptionList();
          out.stateOptions = parsed.options;
          out.stateBinding = parsed.binding;
        }
      } else if (this.isWord('no') && this.isWord('state', 1)) {
        if (out.state !== null) this.fail(token, 'modulate or keep cannot be redefined');
        this.lexer.next();
        this.lexer.next();
        out.state = 'no';
      } else if (this.accept('fragment')) {
        out.fragment = true;
      } else if (this.accept('allow-opts')) {
        out.allowOpts = true;
      } else if (this.accept('label')) {
        if (out.label !== null) this.fail(token, 'label cannot be redefined');
        const label = this.string().text;
        if (label.length > LABEL_MAX) {
          this.fail(token, `rule label too long (max ${LABEL_MAX} chars)`);
        }
        out.label = label;
      } else if (this.accept('tag')) {
        out.tag = this.tagName(token);
      } else if (this.isWord('tagged') || (this.isPunct('!') && this.isWord('tagged', 1))) {
        out.tagged = this.tagged();
      } else if (this.accept('probability')) {
        const value = this.numberString();
        let p = Number(value.text.replace(/%$/, ''));
        if (value.text.endsWith('%')) p /= 100;
        if (!Number.isFinite(p) || value.text.replace(/%$/, '').trim() === '') {
          this.fail(value, `invalid probability: ${value.text}`);
        }
        if (p < 0 || p > 1) this.fail(value, `invalid probability: ${p}`);
        out.probability = p;
      } else if (this.accept('rtable')) {
        out.rtable = this.number();
      } else if (this.isWord('user') || this.isWord('group')) {
        notModelled(token.line, 'user and group matching (user …, group …)');
      } else if (this.isWord('queue')) {
        notModelled(token.line, 'queue assignment (queue …)');
      } else if (this.isWord('divert-to') || this.isWord('divert-reply')) {
        notModelled(token.line, token.text);
      } else break;
    }
    return out;
  }

  private tagName(token: Token): string {
    const name = this.strings().text;
    if (name.length > TAG_MAX) this.fail(token, `tag too long, max ${TAG_MAX} chars`);
    return name;
  }

  private flags(): PfFilterRule['flags'] {
    if (this.accept('any')) return 'any';
    let set = '';
    if (!this.isPunct('/')) set = this.string().text;
    this.expect('/');
    const mask = this.string();
    if (!/^[FSRPAUEW]+$/.test(mask.text) || !/^[FSRPAUEW]*$/.test(set)) {
      this.fail(mask, `bad flags ${/^[FSRPAUEW]*$/.test(set) ? mask.text : set}`);
    }
    return { set, mask: mask.text };
  }

  /** parse.y icmp_item / icmp6_item: a type by name or number, optionally `code` name|number. */
  private icmpType(family: 4 | 6): PfIcmpType {
    const token = this.lexer.next();
    let type: number;
    if (token.kind === 'number') {
      type = Number(token.text);
      if (type > 255) this.fail(token, `illegal icmp${family === 6 ? '6' : ''}-type ${type}`);
    } else {
      const named = icmpTypeByName(token.text, family);
      if (named === undefined) {
        this.fail(token, `unknown icmp${family === 6 ? '6' : ''}-type ${token.text}`);
      }
      type = named;
    }
    let code: number | null = null;
    if (this.accept('code')) {
      const value = this.lexer.next();
      if (value.kind === 'number') {
        code = Number(value.text);
        if (code > 255) this.fail(value, `illegal icmp-code ${code}`);
      } else {
        const named = icmpCodeByName(type, value.text, family);
        if (named === undefined) {
          this.fail(value, `unknown icmp${family === 6 ? '6' : ''}-code ${value.text}`);
        }
        code = named;
      }
    }
    return { type, code, family };
  }

  /**
   * parse.y state_opt_spec: `( max N, no-sync, source-track [rule|global], max-src-states N,
   * max-src-conn N, max-src-conn-rate N/S, max-src-nodes N, overload <t> [flush [global]],
   * if-bound|floating, sloppy, pflow, <timeout> N )`, as pfctl prints them back (F93
   * pfctl_parser.c print_rule): a plain `source-track` prints as `source-track global`, but is
   * PF_SRCTRACK, not PF_SRCTRACK_GLOBAL, to the check against `max-src-nodes` (parse.y
   * sourcetrack: the empty alternative gives `$$ = PF_SRCTRACK`).
   */
  private stateOptionList(): { options: string[]; binding: PfStateBinding | null } {
    this.expect('(');
    const found = new Map<string, string>();
    let binding: PfStateBinding | null = null;
    let explicitGlobal = false;
    const once = (key: string, text: string, token: Token): void => {
      if (found.has(key)) this.fail(token, `state option '${key}' multiple definitions`);
      found.set(key, text);
    };
    do {
      const token = this.lexer.next();
      const positive = (what: string): number => {
        const n = this.number();
        if (n === 0 && what !== 'max') this.fail(token, `'${what}' must be > 0`);
        return n;
      };
      switch (token.text) {
        case 'max':
          once('max', `max ${positive('max')}`, token);
          break;
        case 'no-sync':
          once('no-sync', 'no-sync', token);
          break;
        case 'source-track': {
          let scope = 'global';
          if (this.accept('rule')) scope = 'rule';
          else if (this.accept('global')) explicitGlobal = true;
          once('source-track', `source-track ${scope}`, token);
          break;
        }
        case 'max-src-states':
          once('max-src-states', `max-src-states ${positive('max-src-states')}`, token);
          break;
        case 'max-src-conn':
          once('max-src-conn', `max-src-conn ${positive('max-src-conn')}`, token);
          break;
        case 'max-src-conn-rate': {
          const limit = this.number();
          this.expect('/');
          const seconds = this.number();
          if (limit === 0 || seconds === 0) {
            this.fail(token, "'max-src-conn-rate' values must be > 0");
          }
          once('max-src-conn-rate', `max-src-conn-rate ${limit}/${seconds}`, token);
          break;
        }
        case 'max-src-nodes':
          once('max-src-nodes', `max-src-nodes ${positive('max-src-nodes')}`, token);
          break;
        case 'overload': {
          this.expect('<');
          const table = this.string();
          this.expect('>');
          let text = `overload <${table.text}>`;
          if (this.accept('flush')) text += this.accept('global') ? ' flush global' : ' flush';
          once('overload', text, token);
          break;
        }
        case 'if-bound':
        case 'floating':
          if (binding !== null) this.fail(token, 'state locking option: multiple definitions');
          binding = token.text;
          break;
        case 'sloppy':
          once('sloppy', 'sloppy', token);
          break;
        case 'pflow':
          once('pflow', 'pflow', token);
          break;
        default: {
          if (
            !this.isStringToken(token) ||
            !TIMEOUTS.has(token.text) ||
            !token.text.includes('.')
          ) {
            this.fail(token, `illegal timeout name ${token.text}`);
          }
          once(token.text, `${token.text} ${this.number()}`, token);
        }
      }
    } while (this.accept(','));
    this.expect(')');
    if (found.has('max-src-nodes') && explicitGlobal) {
      this.fail(this.lexer.peek(), "'max-src-nodes' is incompatible with 'source-track global'");
    }
    // pfctl's print order (F93 pfctl_parser.c print_rule).
    const order = [
      'max',
      'no-sync',
      'source-track',
      'max-src-states',
      'max-src-conn',
      'max-src-conn-rate',
      'max-src-nodes',
      'overload',
      'sloppy',
      'pflow',
    ];
    const options = [
      ...order.flatMap((k) => (found.has(k) ? [found.get(k) as string] : [])),
      ...[...found].filter(([k]) => !order.includes(k)).map(([, v]) => v),
    ];
    return { options, binding };
  }

  private tagged(): PfTagged {
    const negated = this.accept('!');
    this.expect('tagged');
    const name = this.strings().text;
    if (name.length > TAG_MAX) this.fail(this.lexer.peek(), `tag too long, max ${TAG_MAX} chars`);
    return { negated, name };
  }
}

/** A pool of several addresses: an interface's, unless `:0` picks one (F93 DYNIF_MULTIADDR). */
function isMultiAddress(address: Extract<PfAddress, { kind: 'interface' }>): boolean {
  return address.dynamic && (address.modifier !== '0' || !/[0-9]$/.test(address.name));
}

/** `en0`, `en0:network` … as an interface address (F93 host_if / dynaddr modifiers). */
function interfaceWithModifier(text: string): {
  kind: 'interface';
  name: string;
  modifier: 'network' | 'broadcast' | 'peer' | '0' | null;
} | null {
  const parts = text.split(':');
  const name = parts[0] ?? '';
  const modifiers = parts.slice(1);
  if (modifiers.length > 1) return null;
  const modifier = modifiers[0] ?? null;
  if (modifier !== null && !['network', 'broadcast', 'peer', '0'].includes(modifier)) return null;
  return {
    kind: 'interface',
    name,
    modifier: modifier as 'network' | 'broadcast' | 'peer' | '0' | null,
  };
}
