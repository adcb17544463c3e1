#!/usr/bin/env bash
# The main job on embedded defaults: validate the bundled examples, explain what happens to a
# few packets, then apply the VPN-gateway example inside a throwaway network namespace (never the
# machine's own), show its status and counters, and remove it again.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
bash scripts/setup.sh >/dev/null
npm run --silent build
eg() { node bin/egressguard.js "$@"; }
VPN=testdata/policies/valid/linux-vpn-gateway/policy.yaml

echo "== check: validate the examples and run their probes through the reference evaluator"
eg check testdata/policies/valid/*/policy.yaml

echo
echo "== explain: class vpn to the internet, tunnel up, then down"
eg explain "$VPN" --from 10.10.0.5 --to 203.0.113.7 --proto tcp --port 443 --tunnel up
echo
eg explain "$VPN" --from 10.10.0.5 --to 203.0.113.7 --proto tcp --port 443 --tunnel down

if [[ $(id -u) -ne 0 ]]; then
  echo "(not root: skipping the apply into a network namespace)"
  exit 0
fi
NS="egdemo-$$"
STATE="$(mktemp -d)"
cleanup() { ip netns delete "$NS" 2>/dev/null || true; rm -rf "$STATE"; }
trap cleanup EXIT
ip netns add "$NS"
ip -n "$NS" link set lo up
for link in eth0 lan0 vwl0 iwl0 tun0; do
  ip -n "$NS" link add "$link" type veth peer name "${link}p"
  ip -n "$NS" link set "$link" up
  ip -n "$NS" link set "${link}p" up
done
ip -n "$NS" addr add 198.51.100.2/24 dev eth0
ip -n "$NS" addr add 192.168.1.1/24 dev lan0
ip -n "$NS" addr add 10.10.0.1/24 dev vwl0
ip -n "$NS" addr add 10.10.1.1/24 dev iwl0
ip -n "$NS" addr add 10.200.0.2/32 dev tun0
ip -n "$NS" route add default via 198.51.100.1 dev eth0

export EGRESSGUARD_STATE_DIR="$STATE"
echo
echo "== plan and apply into network namespace $NS"
eg plan "$VPN" --netns "$NS"
eg apply "$VPN" --netns "$NS"
echo
echo "== status"
eg status --netns "$NS" || true
echo
echo "== remove (routes and rules first, then the table)"
eg remove --netns "$NS"
