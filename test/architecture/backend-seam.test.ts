import { readdirSync, readFileSync, statSync } from 'node:fs';
import { join, relative, sep } from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';

// Issue 9: one seam for every backend. Nothing outside src/backends/<name>/ names a backend's
// tools or syntax, nor imports a backend's folder: shared code reaches a backend only through the
// registry (src/backends/registry.ts, the one place that lists them) and asks its capabilities.
// Tests are exempt: they test concrete backends on purpose.
const SRC = fileURLToPath(new URL('../../src', import.meta.url));

/** Words that belong to one backend: its tools, its syntax, its name. */
const FORBIDDEN: readonly { readonly what: string; readonly pattern: RegExp }[] = [
  { what: 'the nft tool', pattern: /\bnft\b/ },
  { what: 'the nftables backend', pattern: /\bnftables\b/i },
  { what: 'nft syntax', pattern: /\btable inet\b/ },
  { what: 'the pfctl tool', pattern: /\bpfctl\b/ },
  { what: 'the cilium backend', pattern: /\bcilium\b/i },
  { what: "a backend's folder", pattern: /from '[^']*backends\/(?!index\.js)[a-z-]+\//i },
];

function sourceFiles(dir: string): string[] {
  return readdirSync(dir).flatMap((name) => {
    const path = join(dir, name);
    if (statSync(path).isDirectory()) return sourceFiles(path);
    return name.endsWith('.ts') && !name.endsWith('.test.ts') ? [path] : [];
  });
}

/** Whether a file may name a backend: the backend's own folder, or the registry. */
function isExempt(file: string): boolean {
  const parts = relative(SRC, file).split(sep);
  if (parts[0] === 'backends' && parts.length > 2) return true; // src/backends/<name>/…
  return parts.join('/') === 'backends/registry.ts';
}

describe('the backend seam', () => {
  const files = sourceFiles(SRC);

  it('has source files to check', () => {
    expect(files.length).toBeGreaterThan(50);
  });

  it('keeps every backend word inside its own folder and the registry', () => {
    const found: string[] = [];
    for (const file of files.filter((f) => !isExempt(f))) {
      readFileSync(file, 'utf8')
        .split('\n')
        .forEach((line, i) => {
          for (const { what, pattern } of FORBIDDEN) {
            if (pattern.test(line)) {
              found.push(`${relative(SRC, file)}:${i + 1}: ${what}: ${line.trim()}`);
            }
          }
        });
    }
    expect(found).toEqual([]);
  });

  it('fails on a file that names a backend (the check can fail)', () => {
    const line = "import { x } from '../backends/nftables/index.js'; // runs nft -f";
    expect(FORBIDDEN.filter(({ pattern }) => pattern.test(line)).map((f) => f.what)).toEqual([
      'the nft tool',
      'the nftables backend',
      "a backend's folder",
    ]);
  });

  it('declares only capabilities that shared code reads', () => {
    expect(unreadCapabilities(files)).toEqual([]);
  });

  it('finds a capability nothing reads (the check can fail)', () => {
    const declared = readFileSync(join(SRC, 'backends', 'backend.ts'), 'utf8').replace(
      'export interface Capabilities {',
      'export interface Capabilities {\n  readonly supportsTeleport: boolean;',
    );
    expect(capabilitiesIn(declared)).toContain('supportsTeleport');
    expect(unreadCapabilities(files, declared)).toEqual(['supportsTeleport']);
  });
});

/** The member names of the `Capabilities` interface in backend.ts's text. */
function capabilitiesIn(text: string): string[] {
  const body = /export interface Capabilities \{([\s\S]*?)\n\}/.exec(text)?.[1] ?? '';
  return [...body.matchAll(/^\s*readonly (\w+)\??:/gm)].map((m) => m[1] ?? '');
}

/** Capabilities that no shared file (outside the backends' folders) reads as `.name`. */
function unreadCapabilities(
  files: readonly string[],
  declared = readFileSync(join(SRC, 'backends', 'backend.ts'), 'utf8'),
): string[] {
  const shared = files.filter((f) => !isExempt(f)).map((f) => readFileSync(f, 'utf8'));
  return capabilitiesIn(declared).filter(
    (name) => !shared.some((text) => new RegExp(`\\.${name}\\b`).test(text)),
  );
}
