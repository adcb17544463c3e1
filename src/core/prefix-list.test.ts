import { describe, expect, it } from 'vitest';
import { AddressSet, parsePrefix, parsePrefixList, type PrefixListIssue } from './index.js';

function parse(text: string): { set: AddressSet; issues: PrefixListIssue[] } {
  const issues: PrefixListIssue[] = [];
  const set = parsePrefixList(text, (issue) => issues.push(issue));
  return { set, issues };
}

/** The obvious line-by-line reading: the fast path must agree with it on every input. */
function parseSlowly(text: string): { set: AddressSet; issues: PrefixListIssue[] } {
  const issues: PrefixListIssue[] = [];
  const prefixes = [];
  const lines = (text.startsWith('\uFEFF') ? text.slice(1) : text).split('\n');
  for (const [i, raw] of lines.entries()) {
    const content = raw.includes('#') ? raw.slice(0, raw.indexOf('#')) : raw;
    const entry = content.trim();
    if (entry === '') continue;
    const line = i + 1;
    const column = content.indexOf(entry) + 1;
    const prefix = parsePrefix(entry);
    if (prefix === undefined) {
      issues.push({ kind: 'malformed', line, column, entry });
      continue;
    }
    prefixes.push(prefix);
    if (prefix.hadHostBits) issues.push({ kind: 'host-bits', line, column, entry, prefix });
  }
  return { set: AddressSet.fromPrefixes(prefixes), issues };
}

describe('parsePrefixList', () => {
  it('reads one prefix or address a line, with comments and blank lines', () => {
    const { set, issues } = parse(
      [
        '# a blocklist',
        '',
        '192.0.2.0/24',
        '198.51.100.7 # one host',
        '   203.0.113.0/25\t',
        '2001:db8::/32',
        '\t# indented comment',
        '10.0.0.0/8#no space',
      ].join('\n'),
    );
    expect(issues).toEqual([]);
    expect([...set.toCidrs(4), ...set.toCidrs(6)]).toEqual([
      '10.0.0.0/8',
      '192.0.2.0/24',
      '198.51.100.7/32',
      '203.0.113.0/25',
      '2001:db8::/32',
    ]);
  });

  it('accepts CRLF line ends, a missing final newline and a byte-order mark', () => {
    const { set, issues } = parse('\uFEFF192.0.2.0/24\r\n192.0.2.1\r\n10.0.0.0/8');
    expect(issues).toEqual([]);
    expect(set.toCidrs(4)).toEqual(['10.0.0.0/8', '192.0.2.0/24']);
  });

  it('reports malformed lines with their line and column, and leaves them out', () => {
    const { set, issues } = parse(
      '192.0.2.0/24\n  10.0.0.300\n\n10.0.0.0/33 # too long\n01.2.3.4\n10.0.0.0 /8\nexample.com\n',
    );
    expect(set.toCidrs(4)).toEqual(['192.0.2.0/24']);
    expect(issues).toEqual([
      { kind: 'malformed', line: 2, column: 3, entry: '10.0.0.300' },
      { kind: 'malformed', line: 4, column: 1, entry: '10.0.0.0/33' },
      { kind: 'malformed', line: 5, column: 1, entry: '01.2.3.4' },
      { kind: 'malformed', line: 6, column: 1, entry: '10.0.0.0 /8' },
      { kind: 'malformed', line: 7, column: 1, entry: 'example.com' },
    ]);
  });

  it('reports host bits and adds the cleared prefix', () => {
    const { set, issues } = parse('10.1.2.3/8\n2001:db8::1/32\n');
    expect(set.toCidrs(4)).toEqual(['10.0.0.0/8']);
    expect(set.toCidrs(6)).toEqual(['2001:db8::/32']);
    expect(issues.map((i) => [i.kind, i.line, i.entry])).toEqual([
      ['host-bits', 1, '10.1.2.3/8'],
      ['host-bits', 2, '2001:db8::1/32'],
    ]);
    const first = issues[0];
    expect(first?.kind === 'host-bits' ? first.prefix.start : undefined).toBe(0x0a000000);
  });

  it('trims Unicode blanks as String.prototype.trim does', () => {
    const { set, issues } = parse('\u00a0192.0.2.0/24\u2003\n\u3000\n');
    expect(issues).toEqual([]);
    expect(set.toCidrs(4)).toEqual(['192.0.2.0/24']);
  });

  it('is empty for an empty or comment-only file', () => {
    expect(parse('').set.isEmpty()).toBe(true);
    expect(parse('\n\n# nothing\n').set.isEmpty()).toBe(true);
  });

  it('agrees with the line-by-line reading on fuzzed lists', () => {
    let seed = 12345;
    const rand = (): number => {
      seed = (seed * 1103515245 + 12345) % 2 ** 31;
      return seed / 2 ** 31;
    };
    const pick = <T>(items: readonly T[]): T => items[Math.floor(rand() * items.length)] as T;
    const pieces = [
      '10',
      '0',
      '1',
      '255',
      '256',
      '01',
      '00',
      '.',
      '/',
      '24',
      '32',
      '33',
      '0',
      '024',
      '8',
      ':',
      '::',
      'db8',
      'ffff',
      ' ',
      '\t',
      '\r',
      '#',
      'x',
      '\u00a0',
      '1.2.3.4',
    ];
    for (let round = 0; round < 200; round++) {
      const lines: string[] = [];
      for (let l = 0; l < 50; l++) {
        const r = rand();
        if (r < 0.5) {
          // Mostly well-formed IPv4, sometimes with blanks, comments or host bits.
          const octets = [0, 0, 0, 0].map(() => Math.floor(rand() * 256));
          const length = Math.floor(rand() * 33);
          const hasLength = rand() < 0.8;
          lines.push(
            `${rand() < 0.2 ? ' \t' : ''}${octets.join('.')}${hasLength ? `/${length}` : ''}${rand() < 0.2 ? ' # c' : ''}`,
          );
        } else {
          let line = '';
          const n = Math.floor(rand() * 9);
          for (let k = 0; k < n; k++) line += pick(pieces);
          lines.push(line);
        }
      }
      const text = (rand() < 0.1 ? '\uFEFF' : '') + lines.join(rand() < 0.5 ? '\n' : '\r\n');
      const fast = parse(text);
      const slow = parseSlowly(text);
      expect(fast.issues).toEqual(slow.issues);
      expect(fast.set.v4).toEqual(slow.set.v4);
      expect(fast.set.v6).toEqual(slow.set.v6);
    }
  });
});
