import { delimiter } from 'node:path';
import { listMacosModelTools } from '../sim/pf/macos-model-tools.js';
import { MODEL_PROGRAMS_ENV } from '../src/runner/index.js';

// Every test runs with the root-namespace guard on: the process runner then refuses any command
// that would change the machine's own network namespace (see src/runner/).
process.env['EGRESSGUARD_ROOTNS_GUARD'] = '1';
// The guard treats every pfctl and launchctl as the real one; the tests' stand-ins for them are
// models that change nothing here, and the guard knows them only because the tests say so (this
// process and every CLI it starts).
process.env[MODEL_PROGRAMS_ENV] = listMacosModelTools().join(delimiter);
