#!/usr/bin/env node
// A MODEL of macOS tools (launchctl, and the host tools facts read), not the tools: runs one
// command line against the modelled Mac whose state file EGRESSGUARD_MACOS_MODEL_STATE names
// (src/backends/pf/macos-model-shim.ts). Linked as scripts/pfctl-model/<tool>: the link's name
// says which tool it is. Needs a build (`npm run build`): it runs the compiled model from dist/.
import { basename } from 'node:path';

const shim = new URL('../dist/backends/pf/macos-model-shim.js', import.meta.url);
const { runMacosModelShim } = await import(shim.href);
const result = runMacosModelShim(basename(process.argv[1]), process.argv.slice(2), process.env);
process.stdout.write(result.stdout);
process.stderr.write(result.stderr);
process.exitCode = result.exitCode;
