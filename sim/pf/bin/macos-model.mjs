#!/usr/bin/env node
// A MODEL of macOS tools (launchctl, and the host tools facts read), not the tools: runs one
// command line against the modelled Mac whose state file EGRESSGUARD_MACOS_MODEL_STATE names
// (sim/pf/macos-model-shim.ts). Linked as sim/pf/macos-tools/<tool>: the link's name says which
// tool it is. Needs the simulator build (`npm run build:sim`; vitest makes it before tests).
import { basename } from 'node:path';

const shim = new URL('../../dist/macos-model-shim.mjs', import.meta.url);
const { runMacosModelShim } = await import(shim.href);
const result = runMacosModelShim(basename(process.argv[1]), process.argv.slice(2), process.env);
process.stdout.write(result.stdout);
process.stderr.write(result.stderr);
process.exitCode = result.exitCode;
