#!/usr/bin/env node
// Builds what runs the simulators as processes: the macOS tool shims (sim/pf/macos-tools/) load
// the models from sim/dist/, never from the product's dist/, which holds no simulator. One
// bundle per shim, npm packages left to node_modules. Run by `npm run build:sim`, and by vitest
// before any test (this file is its global setup). Each file is written whole and renamed into
// place, so a shim another test process runs meanwhile reads the old bundle or the new one.
import { build } from 'esbuild';
import { mkdirSync, renameSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';

const repo = fileURLToPath(new URL('..', import.meta.url));
/** The simulator build's output directory. */
export const SIM_DIST = join(repo, 'sim/dist');

export async function buildSim() {
  const result = await build({
    absWorkingDir: repo,
    entryPoints: {
      'pfctl-model-shim': 'sim/pf/pfctl-model-shim.ts',
      'macos-model-shim': 'sim/pf/macos-model-shim.ts',
      // The Kubernetes API model the gateway-label benchmark serves its cluster from.
      'kube-api-model': 'sim/cilium/kube-api-model.ts',
    },
    outdir: SIM_DIST,
    outExtension: { '.js': '.mjs' },
    bundle: true,
    format: 'esm',
    platform: 'node',
    target: 'node20',
    packages: 'external',
    write: false,
    logLevel: 'warning',
  });
  mkdirSync(SIM_DIST, { recursive: true });
  for (const file of result.outputFiles) {
    const partial = `${file.path}.${process.pid}.tmp`;
    writeFileSync(partial, file.contents);
    renameSync(partial, file.path);
  }
}

/** Vitest's global setup: the shims work in every test run, with or without `npm run build`. */
export async function setup() {
  await buildSim();
}

if (process.argv[1] === fileURLToPath(import.meta.url)) await buildSim();
