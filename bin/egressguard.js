#!/usr/bin/env node
import { readFileSync, writeFileSync } from 'node:fs';
import { createRequire, Module } from 'node:module';
import { dirname } from 'node:path';
import { fileURLToPath } from 'node:url';
import vm from 'node:vm';

// The CLI is one bundle (scripts/bundle.mjs), compiled from the V8 code cache written beside it
// at build time: Node 20 has no compile cache of its own, and compiling the bundle's source was
// ~30 ms of every call. A cache from another V8 is rejected by V8 itself, and the source compiled.
const bundle = fileURLToPath(new URL('../dist/bundle/egressguard.cjs', import.meta.url));
const cacheFile = `${bundle}.v8cache`;
let cachedData;
try {
  cachedData = readFileSync(cacheFile);
} catch {
  cachedData = undefined; // not built with one: compile the source
}
let source;
try {
  source = readFileSync(bundle, 'utf8');
} catch (error) {
  if (error.code !== 'ENOENT') throw error;
  // A checkout that was never built: say what to do, not a stack trace.
  process.stderr.write(
    `egressguard: the CLI is not built (${bundle} is missing).\n` +
      'In a checkout, run `npm ci && npm run build`; or install the package (README, "Install").\n',
  );
  process.exit(2);
}
const script = new vm.Script(Module.wrap(source), {
  filename: bundle,
  cachedData,
});
const module = { exports: {} };
script
  .runInThisContext()
  .call(module.exports, module.exports, createRequire(bundle), module, bundle, dirname(bundle));
if (process.env.EGRESSGUARD_WRITE_CODE_CACHE === '1') {
  process.once('exit', () => writeFileSync(cacheFile, script.createCachedData()));
}

// `egressguard status | head` closes the pipe early: that is not an error.
for (const stream of [process.stdout, process.stderr]) {
  stream.on('error', (error) => {
    if (error.code === 'EPIPE') process.exit(process.exitCode ?? 0);
    throw error;
  });
}

process.exitCode = await module.exports.main(process.argv);
