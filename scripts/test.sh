#!/usr/bin/env bash
# The test command of the README and of CI: installs what is missing, then runs the whole gate
# (types, lint, format, unused code, and every test: unit, CLI end to end, real nftables in
# network namespaces). Needs root for the namespaces; never touches the root namespace.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
bash scripts/setup.sh
npm run check
# One plain closing line for CI: "N passed, N failed, N skipped".
node -e '
const r = JSON.parse(require("fs").readFileSync("test-results/vitest.json", "utf8"));
console.log(`tests: ${r.numPassedTests} passed, ${r.numFailedTests} failed, ${r.numPendingTests + r.numTodoTests} skipped`);
'
