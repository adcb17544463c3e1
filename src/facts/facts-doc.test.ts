import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { factsSchema } from './host-facts.js';

const DOC = readFileSync(new URL('../../docs/facts.md', import.meta.url), 'utf8');

/** The first-column field names of the table that follows `lead` in docs/facts.md. */
function documented(lead: string): string[] {
  const start = DOC.indexOf(lead);
  if (start === -1) throw new Error(`docs/facts.md has no "${lead}"`);
  const rows: string[] = [];
  for (const line of DOC.slice(start + lead.length)
    .split('\n')
    .slice(1)) {
    if (line.trim() === '' && rows.length > 0) break;
    const name = /^\| `([A-Za-z0-9]+)` /.exec(line)?.[1];
    if (name !== undefined) rows.push(name);
  }
  return rows;
}

// The reference of the facts.json format names every field the parser accepts, and no other.
describe('docs/facts.md', () => {
  const shape = factsSchema.shape;
  const element = (field: 'interfaces' | 'routes') => Object.keys(shape[field].element.shape);

  it('documents every top-level field', () => {
    expect(documented('## Fields').sort()).toEqual(Object.keys(shape).sort());
  });

  it('documents every field of an interface and of a route', () => {
    expect(documented('Each of `interfaces`:').sort()).toEqual(element('interfaces').sort());
    expect(documented('Each of `routes`:').sort()).toEqual(element('routes').sort());
  });

  it('documents every field of cluster', () => {
    const cluster = Object.keys(shape.cluster.unwrap().shape);
    expect(documented('`cluster` (Kubernetes only').sort()).toEqual(cluster.sort());
  });
});
