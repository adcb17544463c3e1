#!/usr/bin/env bash
# The fleet in five minutes on one machine (docs/fleet.md): a controller on SQLite and two agents,
# each enforcing on its own network namespace with real nftables. Shows a push rolled out canary
# first, a host's status with its events, and drift (a deleted table) repaired by the agent.
# Run as root from a built checkout (`npm run build`); it changes nothing outside the two
# namespaces it creates, and removes them, its processes and its files when it ends, however.
set -euo pipefail
cd "$(dirname "$0")/.."

EG=(node bin/egressguard.js)
eg() { "${EG[@]}" "$@"; }
WORK=$(mktemp -d /tmp/egressguard-fleet-demo.XXXXXX)
SUFFIX=$(od -An -N2 -tx2 /dev/urandom | tr -d ' ')
NS=("egdemo-a-$SUFFIX" "egdemo-b-$SUFFIX")
PORT=${EGRESSGUARD_DEMO_PORT:-18443}
SERVER=https://127.0.0.1:$PORT
PIDS=()

cleanup() {
  for pid in "${PIDS[@]}"; do kill "$pid" 2>/dev/null || true; done
  for pid in "${PIDS[@]}"; do wait "$pid" 2>/dev/null || true; done
  for ns in "${NS[@]}"; do ip netns delete "$ns" 2>/dev/null || true; done
  rm -rf "$WORK"
}
trap cleanup EXIT
step() { printf '\n\033[1m== %s\033[0m\n' "$*"; }

step "1. Two hosts: namespaces with an uplink (default route), a tunnel tun0 and workloads on vwl0"
for i in 0 1; do
  ns=${NS[$i]}
  ip netns add "$ns"
  ip -n "$ns" link set lo up
  # This kernel may lack dummy links: every interface is one end of a veth pair.
  for spec in "eth0 198.51.100.1$i/24" "tun0 10.200.0.2/32" "vwl0 10.10.0.1/24"; do
    read -r name address <<<"$spec"
    ip -n "$ns" link add "$name" type veth peer name "${name}p"
    ip -n "$ns" address add "$address" dev "$name"
    ip -n "$ns" link set "$name" up
    ip -n "$ns" link set "${name}p" up
  done
  ip -n "$ns" route add default via 198.51.100.1 dev eth0
  echo "host $ns: eth0 198.51.100.1$i/24, tun0, vwl0"
done

step "2. The controller: SQLite, HTTPS with the CA it creates on first start"
# Not through the function: $! must be node's own pid, for the cleanup.
"${EG[@]}" server --store "sqlite:$WORK/fleet.db" --listen "127.0.0.1:$PORT" --state-dir "$WORK/server" \
  --poll-interval 5 2>"$WORK/server.log" &
PIDS+=($!)
until grep -q 'listening on' "$WORK/server.log"; do sleep 0.2; done
cat "$WORK/server.log"
fleet() { eg fleet "$@" --server "$SERVER" --state-dir "$WORK/server"; }

step "3. A bootstrap token for two hosts (it carries the CA's pin); one agent per namespace"
fleet token create --uses 2 --ttl 1h --out "$WORK/bootstrap.token"
for i in 0 1; do
  "${EG[@]}" agent --server "$SERVER" --token-file "$WORK/bootstrap.token" --netns "${NS[$i]}" \
    --state-dir "$WORK/agent-$i" --hostname "demo-$i" --start-jitter 0s 2>"$WORK/agent-$i.log" &
  PIDS+=($!)
done
until [ "$(fleet status --json | grep -c '"enrolledAt"')" -ge 2 ]; do sleep 0.5; done
fleet status || true

step "4. Push a policy: class vms (on vwl0) leaves only through tun0; canary first"
fleet push scripts/fleet-demo-policy.yaml --canary 1 --max-unavailable 1 --bake 3s
until fleet status >/dev/null; do sleep 1; done
fleet status
fleet rollout status
ip netns exec "${NS[0]}" nft list chain inet egressguard forward | head -n 12
ip -n "${NS[0]}" rule show

step "5. Drift: delete the table on demo-0; its agent puts it back and reports it"
ip netns exec "${NS[0]}" nft delete table inet egressguard
until fleet status demo-0 --json | grep -q '"drift-repaired"'; do sleep 1; done
fleet status demo-0
ip netns exec "${NS[0]}" nft list tables

step "Done: cleaning up the namespaces, the controller and the agents"
