#!/usr/bin/env node
// A MODEL of pfctl, not pfctl: runs one pfctl command line against the modelled macOS host whose
// state file EGRESSGUARD_PFCTL_MODEL_STATE names (src/backends/pf/pfctl-model.ts). Exec it as
// scripts/pfctl-model/pfctl (a link named pfctl, so command classification sees "pfctl") in place
// of /sbin/pfctl. Needs a build (`npm run build`): it runs the compiled model from dist/.
import { readFileSync } from 'node:fs';

const shim = new URL('../dist/backends/pf/pfctl-model-shim.js', import.meta.url);
const { runPfctlModelShim } = await import(shim.href);
const result = runPfctlModelShim(process.argv.slice(2), {
  env: process.env,
  readStdin: () => readFileSync(0, 'utf8'),
  pid: process.pid,
});
process.stdout.write(result.stdout);
process.stderr.write(result.stderr);
process.exitCode = result.exitCode;
