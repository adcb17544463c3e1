#!/usr/bin/env node
// Bundles the CLI into dist/bundle/: the entry plus one chunk per lazily loaded command, with
// commander, yaml and zod inside. Node 20 has no compile cache, and resolving, reading and
// compiling ~190 modules (64 of them zod's locales) was about 60 ms of every CLI call.
// Run by `npm run build` after tsc, which type-checks and writes dist/ for the benchmarks.
import { build } from 'esbuild';
import { rmSync } from 'node:fs';
import { fileURLToPath } from 'node:url';

const repo = fileURLToPath(new URL('..', import.meta.url));
// Chunk names carry content hashes: clear out the last build's.
rmSync(new URL('../dist/bundle', import.meta.url), { recursive: true, force: true });

await build({
  absWorkingDir: repo,
  entryPoints: ['src/cli/main.ts'],
  outdir: 'dist/bundle',
  bundle: true,
  splitting: true,
  format: 'esm',
  platform: 'node',
  target: 'node20',
  sourcemap: 'linked',
  // commander is CommonJS and requires node: modules; an ES module has no `require` of its own.
  banner: {
    js: "import { createRequire as egressguardRequire } from 'node:module'; const require = egressguardRequire(import.meta.url);",
  },
  logLevel: 'warning',
});
