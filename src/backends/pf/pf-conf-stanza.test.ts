import { describe, expect, it } from 'vitest';
import { readStockPfFiles } from '../../../sim/pf/create-macos-pf-host.js';
import { parsePfConf } from './parse-pf-conf.js';
import {
  installPfConfStanza,
  removePfConfStanza,
  STANZA_BEGIN,
  STANZA_END,
} from './pf-conf-stanza.js';

const STOCK = readStockPfFiles().pfConf;
const FILTER_ONLY = { anchor: 'egressguard', lines: ['anchor "egressguard"'] };

function install(text: string, stanza = FILTER_ONLY): string {
  const outcome = installPfConfStanza(text, stanza);
  if (!outcome.ok) throw new Error(outcome.problem.message);
  return outcome.result.text;
}

function count(text: string, needle: string): number {
  return text.split(needle).length - 1;
}

describe('the pf.conf stanza as one marked block', () => {
  it('installs one block after the stock rules and leaves every stock byte as it was', () => {
    const text = install(STOCK);
    expect(text.startsWith(STOCK)).toBe(true); // Apple's file, trailing space on line 12 included
    expect(STOCK.split('\n')[11]).toMatch(/dynamically $/);
    expect(text.slice(STOCK.length)).toBe(`${STANZA_BEGIN}\nanchor "egressguard"\n${STANZA_END}\n`);
    expect(parsePfConf(text, { file: 'pf.conf' }).problems).toEqual([]);
  });

  it('is idempotent: installing twice gives the same file, one block', () => {
    const once = install(STOCK);
    const twice = installPfConfStanza(once, FILTER_ONLY);
    expect(twice.ok && twice.result).toEqual({ text: once, changed: false, migrated: [] });
    expect(count(once, STANZA_BEGIN)).toBe(1);
  });

  it('migrates an older unmarked stanza and removes duplicated blocks, nothing else', () => {
    const legacy =
      STOCK.replace(
        'rdr-anchor "com.apple/*"\n',
        'rdr-anchor "com.apple/*"\nnat-anchor "egressguard"\n',
      ) +
      '# egressguard\nanchor "egressguard"\nload anchor "egressguard" from "/etc/pf.anchors/egressguard"\n' +
      `${STANZA_BEGIN}\nanchor "egressguard"\n${STANZA_END}\n` +
      `${STANZA_BEGIN}\nanchor "egressguard"\nload anchor "egressguard" from "/etc/pf.anchors/egressguard"\n${STANZA_END}\n`;
    const outcome = installPfConfStanza(legacy, FILTER_ONLY);
    expect(outcome.ok).toBe(true);
    if (!outcome.ok) return;
    expect(outcome.result.migrated.map((m) => m.text)).toEqual([
      'nat-anchor "egressguard"',
      'anchor "egressguard"',
      'load anchor "egressguard" from "/etc/pf.anchors/egressguard"',
    ]);
    // The old comment stays: only lines naming our anchor and our markers are ours.
    expect(outcome.result.text).toBe(
      `${STOCK}# egressguard\n${STANZA_BEGIN}\nanchor "egressguard"\n${STANZA_END}\n`,
    );
    expect(count(outcome.result.text, 'load anchor "egressguard"')).toBe(0);
  });

  it('keeps other anchors, sub-anchor names that only share a prefix, and CRLF endings', () => {
    const text = 'anchor "egressguard-other"\r\nanchor "com.apple/*"\r\n';
    const result = install(text);
    expect(result).toBe(
      `anchor "egressguard-other"\r\nanchor "com.apple/*"\r\n${STANZA_BEGIN}\r\nanchor "egressguard"\r\n${STANZA_END}\r\n`,
    );
    expect(install('pass out all')).toBe(
      `pass out all\n${STANZA_BEGIN}\nanchor "egressguard"\n${STANZA_END}\n`,
    );
  });

  it('places a translation line among the translation anchors, or refuses when order cannot hold', () => {
    const natOnly = install(STOCK, { anchor: 'egressguard', lines: ['nat-anchor "egressguard"'] });
    expect(parsePfConf(natOnly, { file: 'pf.conf' }).problems).toEqual([]);
    expect(natOnly.indexOf('nat-anchor "egressguard"')).toBeLessThan(
      natOnly.indexOf('dummynet-anchor'),
    );
    expect(natOnly.indexOf('nat-anchor "egressguard"')).toBeGreaterThan(
      natOnly.indexOf('rdr-anchor'),
    );

    // Translation and filtering: dummynet-anchor sits between them in the stock file, so each
    // goes in a block of its own, among the lines of its kind.
    const both = install(STOCK, {
      anchor: 'egressguard',
      lines: ['nat-anchor "egressguard"', 'anchor "egressguard"'],
    });
    expect(parsePfConf(both, { file: 'pf.conf' }).problems).toEqual([]);
    expect(both.replace(/# BEGIN egressguard[^]*?# END egressguard\n/g, '')).toBe(STOCK);
    expect(count(both, STANZA_BEGIN)).toBe(2);
    expect(both.indexOf('nat-anchor "egressguard"')).toBeLessThan(both.indexOf('dummynet-anchor'));
    expect(
      install(both, {
        anchor: 'egressguard',
        lines: ['nat-anchor "egressguard"', 'anchor "egressguard"'],
      }),
    ).toBe(both);
    // A file out of order itself leaves no place for the translation line.
    const refused = installPfConfStanza('set require-order no\nanchor "a"\nscrub-anchor "a"\n', {
      anchor: 'egressguard',
      lines: ['nat-anchor "egressguard"', 'anchor "egressguard"'],
    });
    expect(refused.ok).toBe(false);
    if (refused.ok) return;
    expect(refused.problem.message).toMatch(
      /^Cannot place the egressguard block in pf.conf: pf requires rules in order/,
    );
    // The legacy file has no dummynet-anchor: the same block fits between rdr-anchor and anchor.
    const legacy = install(readStockPfFiles('legacy').pfConf, {
      anchor: 'egressguard',
      lines: ['nat-anchor "egressguard"', 'anchor "egressguard"'],
    });
    expect(parsePfConf(legacy, { file: 'pf.conf' }).problems).toEqual([]);
  });

  it('refuses an unterminated block and changes nothing; removes the block and older lines', () => {
    const broken = `${STOCK}${STANZA_BEGIN}\nanchor "egressguard"\n`;
    const outcome = installPfConfStanza(broken, FILTER_ONLY);
    expect(outcome).toMatchObject({ ok: false, problem: { line: 28 } });
    const installed = install(STOCK) + 'load anchor "egressguard/sub" from "/x"\n';
    const removed = removePfConfStanza(installed, 'egressguard');
    expect(removed.ok && removed.result.text).toBe(STOCK);
    const again = removePfConfStanza(STOCK, 'egressguard');
    expect(again.ok && again.result.changed).toBe(false);
  });
});
