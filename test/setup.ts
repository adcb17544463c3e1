// Every test runs with the root-namespace guard on: the process runner then refuses any command
// that would change the machine's own network namespace (see src/runner/).
process.env['EGRESSGUARD_ROOTNS_GUARD'] = '1';
