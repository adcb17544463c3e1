import { describe, expect, it } from 'vitest';
import { escapeXml } from './escape-xml.js';

describe('escapeXml', () => {
  it('escapes XML attributes and drops characters XML cannot carry', () => {
    expect(escapeXml(`a<b>&"c"'\u0001\n`)).toBe('a&lt;b&gt;&amp;&quot;c&quot;&apos;&#10;');
  });
});
