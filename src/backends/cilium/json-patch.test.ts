import { describe, expect, it } from 'vitest';
import { JsonPatchError, type JsonValue, applyJsonPatch, applyMergePatch } from './json-patch.js';

describe('applyMergePatch (RFC 7386)', () => {
  it('merges objects, deletes on null and replaces everything else', () => {
    const target: JsonValue = { a: 'b', c: { d: 'e', f: 'g' }, list: [1, 2] };
    expect(applyMergePatch(target, { a: 'z', c: { f: null }, list: [3] })).toEqual({
      a: 'z',
      c: { d: 'e' },
      list: [3],
    });
    expect(applyMergePatch({ a: 'b' }, ['c'])).toEqual(['c']);
    expect(applyMergePatch(['a'], { b: 'c' })).toEqual({ b: 'c' });
    expect(applyMergePatch({ e: null }, { a: 1 })).toEqual({ e: null, a: 1 });
    expect(target).toEqual({ a: 'b', c: { d: 'e', f: 'g' }, list: [1, 2] });
  });
});

describe('applyJsonPatch (RFC 6902)', () => {
  const doc: JsonValue = { metadata: { labels: { 'a/b': 'x', keep: 'y' } }, list: ['p', 'q'] };

  it('adds, removes, replaces, moves, copies and tests, with ~1 and ~0 escapes', () => {
    const out = applyJsonPatch(doc, [
      { op: 'test', path: '/metadata/labels/a~1b', value: 'x' },
      { op: 'remove', path: '/metadata/labels/a~1b' },
      { op: 'add', path: '/metadata/labels/t~0ilde', value: 'z' },
      { op: 'replace', path: '/list/0', value: 'P' },
      { op: 'add', path: '/list/-', value: 'r' },
      { op: 'add', path: '/list/1', value: 'i' },
      { op: 'copy', from: '/metadata/labels/keep', path: '/copied' },
      { op: 'move', from: '/copied', path: '/moved' },
    ]);
    expect(out).toEqual({
      metadata: { labels: { keep: 'y', 't~ilde': 'z' } },
      list: ['P', 'i', 'q', 'r'],
      moved: 'y',
    });
    expect(doc).toEqual({ metadata: { labels: { 'a/b': 'x', keep: 'y' } }, list: ['p', 'q'] });
  });

  it('fails as a whole: 422 for a failed test or a missing path, 400 for a malformed patch', () => {
    const status = (patch: JsonValue): number | undefined => {
      try {
        applyJsonPatch(doc, patch);
      } catch (error) {
        return error instanceof JsonPatchError ? error.status : undefined;
      }
      return 200;
    };
    expect(status([{ op: 'test', path: '/list/0', value: 'q' }])).toBe(422);
    expect(status([{ op: 'remove', path: '/metadata/nope' }])).toBe(422);
    expect(status([{ op: 'replace', path: '/nope', value: 1 }])).toBe(422);
    expect(status([{ op: 'add', path: '/list/9', value: 1 }])).toBe(422);
    expect(status([{ op: 'jump', path: '/list' }])).toBe(400);
    expect(status([{ op: 'add', path: '/x' }])).toBe(400);
    expect(status({ op: 'add' })).toBe(400);
    expect(status([{ op: 'add', path: 'no-slash', value: 1 }])).toBe(400);
  });
});
