import { existsSync, readdirSync, readFileSync, statSync } from 'node:fs';
import { dirname, join, relative, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';

// Dependencies point one way (STYLE.md rule 1), inside a folder as between layers: no module of
// src/ reaches itself again through its imports, type-only imports included, since a cycle of
// types is a cycle of design that the next value import turns into a load-order bug.
const SRC = fileURLToPath(new URL('../../src', import.meta.url));

function sourceFiles(dir: string): string[] {
  return readdirSync(dir).flatMap((name) => {
    const path = join(dir, name);
    if (statSync(path).isDirectory()) return sourceFiles(path);
    return name.endsWith('.ts') && !name.endsWith('.test.ts') ? [path] : [];
  });
}

/** The modules of src/ that a file imports or re-exports, statically or with `import()`. */
function importsOf(file: string, text: string): string[] {
  const specifiers = [
    ...text.matchAll(/^\s*(?:import|export)\b[^'";]*?\bfrom\s*'([^']+)'/gms),
    ...text.matchAll(/^\s*import\s*'([^']+)'/gm),
    ...text.matchAll(/\bimport\(\s*'([^']+)'\s*\)/g),
  ].map((match) => match[1] ?? '');
  return specifiers
    .filter((specifier) => specifier.startsWith('.'))
    .map((specifier) => resolve(dirname(file), specifier.replace(/\.js$/, '.ts')))
    .filter((path) => existsSync(path));
}

/** Every strongly connected group of more than one module, or a module that imports itself. */
function findCycles(graph: ReadonlyMap<string, readonly string[]>): string[][] {
  const index = new Map<string, number>();
  const low = new Map<string, number>();
  const stack: string[] = [];
  const onStack = new Set<string>();
  const cycles: string[][] = [];
  const visit = (node: string): void => {
    index.set(node, index.size);
    low.set(node, index.get(node) ?? 0);
    stack.push(node);
    onStack.add(node);
    for (const next of graph.get(node) ?? []) {
      if (!index.has(next)) {
        visit(next);
        low.set(node, Math.min(low.get(node) ?? 0, low.get(next) ?? 0));
      } else if (onStack.has(next)) {
        low.set(node, Math.min(low.get(node) ?? 0, index.get(next) ?? 0));
      }
    }
    if (low.get(node) !== index.get(node)) return;
    const group: string[] = [];
    let member: string | undefined;
    do {
      member = stack.pop();
      if (member === undefined) break;
      onStack.delete(member);
      group.push(member);
    } while (member !== node);
    if (group.length > 1 || (graph.get(node) ?? []).includes(node)) cycles.push(group.sort());
  };
  for (const node of [...graph.keys()].sort()) if (!index.has(node)) visit(node);
  return cycles;
}

describe('the import graph of src/', () => {
  const files = sourceFiles(SRC);
  const graph = new Map(files.map((file) => [file, importsOf(file, readFileSync(file, 'utf8'))]));

  it('is read from every source file, type-only imports included', () => {
    expect(files.length).toBeGreaterThan(100);
    const doctor = join(SRC, 'backends/nftables/nft-doctor.ts');
    expect(graph.get(doctor)).toContain(join(SRC, 'backends/nftables/nft-doctor-chains.ts'));
    expect(importsOf(join(SRC, 'a.ts'), "import type {\n  X,\n} from './core/index.js';")).toEqual([
      join(SRC, 'core/index.ts'),
    ]);
  });

  it('finds a cycle where there is one', () => {
    const a = join(SRC, 'a.ts');
    const b = join(SRC, 'b.ts');
    const c = join(SRC, 'c.ts');
    expect(
      findCycles(
        new Map([
          [a, [b]],
          [b, [c]],
          [c, [a]],
        ]),
      ),
    ).toEqual([[a, b, c]]);
    expect(
      findCycles(
        new Map([
          [a, [b]],
          [b, [c]],
          [c, []],
        ]),
      ),
    ).toEqual([]);
  });

  it('has no cycle', () => {
    const cycles = findCycles(graph).map((group) => group.map((file) => relative(SRC, file)));
    expect(cycles).toEqual([]);
  });
});
