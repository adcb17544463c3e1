#!/usr/bin/env node
// Bundles the CLI into one CommonJS file, dist/bundle/egressguard.cjs, with commander, yaml and
// zod inside, and writes V8's code cache for it beside it (egressguard.cjs.v8cache), which
// bin/egressguard.js hands to V8. Node 20 has no compile cache of its own: resolving, reading and
// compiling ~190 modules was ~60 ms of every CLI call, compiling the bundle still ~30 ms.
// Run by `npm run build` after tsc (which type-checks and writes dist/ for the benchmarks).
import { build } from 'esbuild';
import { execFileSync } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';

const repo = fileURLToPath(new URL('..', import.meta.url));
const outdir = join(repo, 'dist/bundle');
rmSync(outdir, { recursive: true, force: true });

/**
 * zod re-exports its 64 locales (`z.locales`, `z.core.locales`); egressguard words its own
 * messages and uses none of them, yet a namespace re-export is never tree-shaken. The locale
 * index is bundled as an empty module (~1 MB less source to load). English, which zod configures
 * itself, is imported from its own file and stays.
 */
const withoutZodLocales = {
  name: 'without-zod-locales',
  setup(build) {
    build.onResolve({ filter: /\/locales\/index\.js$/ }, (args) =>
      /[\\/]node_modules[\\/]zod[\\/]/.test(args.importer)
        ? { path: 'zod-locales', namespace: 'egressguard-empty' }
        : undefined,
    );
    build.onLoad({ filter: /.*/, namespace: 'egressguard-empty' }, () => ({
      contents: 'export {};',
      loader: 'js',
    }));
  },
};

await build({
  absWorkingDir: repo,
  entryPoints: ['src/cli/main.ts'],
  outfile: join(outdir, 'egressguard.cjs'),
  bundle: true,
  // CommonJS: V8's code cache can be handed to a vm.Script, not (on Node 20) to an ES module.
  format: 'cjs',
  platform: 'node',
  target: 'node20',
  sourcemap: 'linked',
  define: { 'import.meta.url': '__egressguardModuleUrl' },
  banner: {
    js: "const __egressguardModuleUrl = require('node:url').pathToFileURL(__filename).href;",
  },
  plugins: [withoutZodLocales],
  logLevel: 'warning',
});

// What `egressguard --version` reports of the build: the commit, and whether tracked files
// differed from it. Outside a git checkout (a tarball unpacked) the commit is unknown.
writeFileSync(join(outdir, 'build-info.json'), `${JSON.stringify(readBuildInfo())}\n`);

function readBuildInfo() {
  const git = (...args) =>
    execFileSync('git', args, { cwd: repo, encoding: 'utf8', stdio: ['ignore', 'pipe', 'ignore'] });
  try {
    const commit = git('rev-parse', '--short=12', 'HEAD').trim();
    return { commit, modified: git('status', '--porcelain', '--untracked-files=no').trim() !== '' };
  } catch {
    return { commit: null, modified: false };
  }
}

// The cache holds what a run compiled: compile an example policy, the busiest path short of a
// live host (policy, IR, compiler, hash).
const out = mkdtempSync(join(tmpdir(), 'egressguard-cache-'));
try {
  const example = join(repo, 'testdata/policies/valid/linux-vpn-gateway');
  execFileSync(
    process.execPath,
    [join(repo, 'bin/egressguard.js'), 'compile', join(example, 'policy.yaml'), '--out', out],
    {
      env: { ...process.env, EGRESSGUARD_WRITE_CODE_CACHE: '1' },
      stdio: ['ignore', 'ignore', 'inherit'],
    },
  );
} finally {
  rmSync(out, { recursive: true, force: true });
}
