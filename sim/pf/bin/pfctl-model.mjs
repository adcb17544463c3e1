#!/usr/bin/env node
// A MODEL of pfctl, not pfctl: runs one pfctl command line against the modelled macOS host whose
// state file EGRESSGUARD_PFCTL_MODEL_STATE names (sim/pf/pfctl-model.ts). Exec it as
// sim/pf/macos-tools/pfctl (a link named pfctl, so command classification sees "pfctl") in place
// of /sbin/pfctl. Needs the simulator build (`npm run build:sim`; vitest makes it before tests).
import { readFileSync } from 'node:fs';

const shim = new URL('../../dist/pfctl-model-shim.mjs', import.meta.url);
const { runPfctlModelShim } = await import(shim.href);
const result = runPfctlModelShim(process.argv.slice(2), {
  env: process.env,
  readStdin: () => readFileSync(0, 'utf8'),
  pid: process.pid,
});
process.stdout.write(result.stdout);
process.stderr.write(result.stderr);
process.exitCode = result.exitCode;
