import { existsSync, readdirSync, readFileSync, statSync } from 'node:fs';
import { dirname, join, relative, resolve, sep } from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';

// The simulators (models of pfctl, launchd, macOS's tools, Cilium and the Kubernetes API; the
// harnesses and test kits) live in sim/, a test-only part of the project. The product in src/
// never imports them, so the build (dist/) holds none, and the product's safety guard knows a
// model only because a test says so, never by its path.
const REPO = fileURLToPath(new URL('../..', import.meta.url));
const SRC = join(REPO, 'src');
const SIM = join(REPO, 'sim');

function filesUnder(dir: string, keep: (name: string) => boolean): string[] {
  return readdirSync(dir).flatMap((name) => {
    const path = join(dir, name);
    if (statSync(path).isDirectory()) return filesUnder(path, keep);
    return keep(name) ? [path] : [];
  });
}

const isProduct = (name: string): boolean => name.endsWith('.ts') && !name.endsWith('.test.ts');

/** Every module specifier of a file: imports, re-exports, `import()` and `require()`. */
function specifiers(text: string): string[] {
  const found: string[] = [];
  const patterns = [
    /\b(?:import|export)\s[^'"`;]*?\bfrom\s*['"]([^'"]+)['"]/g,
    /\bimport\s*['"]([^'"]+)['"]/g,
    /\b(?:import|require)\s*\(\s*['"]([^'"]+)['"]\s*\)/g,
  ];
  for (const pattern of patterns) {
    for (const match of text.matchAll(pattern)) found.push(match[1] ?? '');
  }
  return found;
}

/** The imports of `file` (its text given) that reach into sim/. */
function simImports(file: string, text: string): string[] {
  return specifiers(text).filter((spec) => {
    if (!spec.startsWith('.')) return false;
    const target = relative(SIM, resolve(dirname(file), spec));
    return !target.startsWith('..') && !target.startsWith(sep);
  });
}

/** A module that is a simulator: from sim/, or named as a model, harness or test kit. */
function isSimulator(source: string): boolean {
  if (source.startsWith('sim/')) return true;
  if (source.includes('node_modules/')) return false;
  return /(^|[/-])models?([/.-]|$)|harness|conformance|boundary-packets|test-(fixtures|manifests|pods)/.test(
    source,
  );
}

describe('src never imports sim', () => {
  const files = filesUnder(SRC, isProduct);

  it('has product files to check and simulators beside them', () => {
    expect(files.length).toBeGreaterThan(100);
    expect(filesUnder(SIM, (n) => n.endsWith('.ts')).length).toBeGreaterThan(15);
  });

  it('no product file imports from sim/', () => {
    const found = files.flatMap((file) =>
      simImports(file, readFileSync(file, 'utf8')).map((s) => `${relative(REPO, file)}: ${s}`),
    );
    expect(found).toEqual([]);
  });

  it('fails on a product file that imports from sim/ (the check can fail)', () => {
    const file = join(SRC, 'backends/pf/pf-selftest.ts');
    expect(
      simImports(
        file,
        [
          "import { PfctlModel } from '../../../sim/pf/pfctl-model.js';",
          "export { x } from '../../../sim/pf/x.js';",
          "const m = await import('../../../sim/cilium/kube-api-model.js');",
          "import { nothing } from '../../../simulated/x.js';",
          "import { fine } from './pf-compiler.js';",
        ].join('\n'),
      ),
    ).toEqual([
      '../../../sim/pf/pfctl-model.js',
      '../../../sim/pf/x.js',
      '../../../sim/cilium/kube-api-model.js',
    ]);
  });

  it('no product file recognises a model by its path', () => {
    const found = files.flatMap((file) =>
      readFileSync(file, 'utf8')
        .split('\n')
        .flatMap((line, i) =>
          /pfctl-model\/|macos-tools|['"`/]sim\//.test(line)
            ? [`${relative(REPO, file)}:${i + 1}: ${line.trim()}`]
            : [],
        ),
    );
    expect(found).toEqual([]);
  });
});

describe('dist/ contains no simulator', () => {
  const bundle = join(REPO, 'dist/bundle/egressguard.cjs');
  const built = (): void => {
    if (!existsSync(`${bundle}.map`)) {
      throw new Error('dist/ is not built: run `npm run build` (npm test builds first)');
    }
  };

  it("the CLI bundle's modules (its source map) include no simulator", () => {
    built();
    const map = JSON.parse(readFileSync(`${bundle}.map`, 'utf8')) as { sources: string[] };
    const modules = map.sources.map((s) => relative(REPO, resolve(dirname(bundle), s)));
    expect(modules.filter((m) => m.startsWith('src/')).length).toBeGreaterThan(100);
    expect(modules).toContain('src/backends/pf/pf-selftest.ts');
    expect(modules.filter(isSimulator)).toEqual([]);
  });

  it('the compiled library (dist/ beside the bundle) holds no simulator', () => {
    built();
    const compiled = filesUnder(join(REPO, 'dist'), (n) => n.endsWith('.js'))
      .map((f) => relative(join(REPO, 'dist'), f))
      .filter((f) => !f.startsWith('bundle/'));
    expect(compiled.length).toBeGreaterThan(100);
    expect(compiled.filter((f) => f.startsWith('sim/') || isSimulator(f))).toEqual([]);
  });

  it('names what a simulator is (the check can fail)', () => {
    expect(
      [
        'sim/pf/pfctl-model.ts',
        'src/backends/pf/pfctl-model.ts',
        'src/backends/cilium/kube-api-model.ts',
        'src/backends/nftables/nft-kernel-harness.ts',
        'src/backends/conformance.ts',
        'src/prove/test-fixtures.ts',
        'src/backends/pf/pf-compiler.ts',
        'node_modules/@kubernetes/client-node/dist/gen/models/V1Pod.js',
      ].filter(isSimulator),
    ).toEqual([
      'sim/pf/pfctl-model.ts',
      'src/backends/pf/pfctl-model.ts',
      'src/backends/cilium/kube-api-model.ts',
      'src/backends/nftables/nft-kernel-harness.ts',
      'src/backends/conformance.ts',
      'src/prove/test-fixtures.ts',
    ]);
  });
});
