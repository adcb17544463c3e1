#!/usr/bin/env bash
# The main job on embedded defaults: validate the bundled examples, explain what happens to a
# packet, then prove the VPN-gateway example by measurement: `egressguard prove --lab` builds a
# throwaway lab of network namespaces from the policy and its facts (never connected to this
# machine's interfaces), applies with the real applier, runs the resident mode, injects every
# fault and prints the summary. The lab is torn down whatever happens.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
echo "== setup: the lab's kernel tools and the npm dependencies, where missing; the CLI bundle"
bash scripts/setup.sh --demo
# The CLI is one bundle; `npm run build` also writes dist/ with types, which the demo does not use.
node scripts/bundle.mjs
eg() { node bin/egressguard.js "$@"; }
VPN=testdata/policies/valid/linux-vpn-gateway/policy.yaml

echo "== check: validate the examples and run their probes through the reference evaluator"
eg check testdata/policies/valid/*/policy.yaml

echo
echo "== explain: class vpn to the internet with the tunnel down"
eg explain "$VPN" --from 10.10.0.5 --to 203.0.113.7 --proto tcp --port 443 --tunnel down

if [[ $(id -u) -ne 0 ]]; then
  echo "(not root: skipping prove --lab, which needs network namespaces)"
  exit 0
fi
OUT="${EGRESSGUARD_DEMO_OUT:-$(mktemp -d)}"
echo
echo "== prove --lab: the same policy, measured (evidence in $OUT)"
# Every change happens inside the lab's namespaces: refuse anything in this machine's own.
export EGRESSGUARD_ROOTNS_GUARD=1
status=0
# 50 reapplies under traffic instead of prove's 200, so the demo stays short on a busy machine;
# the test suite (test/netns/prove.test.ts, in CI) runs the full 200.
echo "(reapply-under-traffic runs 50 reapplies here; prove's default, and CI, run 200)"
eg prove "$VPN" --lab --progress --reapplies 50 --json "$OUT/proof.json" --junit "$OUT/proof.xml" || status=$?
echo "(evidence: $OUT/proof.json, JUnit: $OUT/proof.xml; exit $status)"
exit "$status"
