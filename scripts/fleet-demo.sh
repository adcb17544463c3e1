#!/usr/bin/env bash
# The fleet in five minutes on one machine (docs/fleet.md): a controller on SQLite and two agents,
# each enforcing on its own network namespace with real nftables. Shows a push rolled out canary
# first, a host's status with its events, and drift (a deleted table) repaired by the agent.
# Run as root from a clone: it installs and builds what it needs (the npm packages, better-sqlite3's
# addon for the controller's SQLite store, the CLI bundle when the sources are newer). It changes
# nothing outside the two namespaces it creates, and removes them, its processes and its files
# when it ends, however. If the controller or an agent exits, it stops with that process's log.
set -euo pipefail
cd "$(dirname "$0")/.."

echo "== setup: the lab's tools, the npm packages and better-sqlite3's addon, where missing"
bash scripts/setup.sh --fleet-demo
if [[ ! -f dist/bundle/egressguard.cjs || -n $(find src package.json -newer dist/bundle/egressguard.cjs -print -quit) ]]; then
  echo "== build: the CLI bundle"
  node scripts/bundle.mjs
fi

EG=(node bin/egressguard.js)
eg() { "${EG[@]}" "$@"; }
WORK=$(mktemp -d /tmp/egressguard-fleet-demo.XXXXXX)
SUFFIX=$(od -An -N2 -tx2 /dev/urandom | tr -d ' ')
NS=("egdemo-a-$SUFFIX" "egdemo-b-$SUFFIX")
PORT=${EGRESSGUARD_DEMO_PORT:-18443}
SERVER=https://127.0.0.1:$PORT
PIDS=()
NAMES=()
# However slow the machine, a step that has not happened after this long never will.
WAIT_LIMIT=${EGRESSGUARD_DEMO_WAIT_LIMIT:-300}

# Starts a process in the background, its stderr kept in $WORK/NAME.log.
spawn() {
  local name=$1
  shift
  "$@" 2>"$WORK/$name.log" &
  PIDS+=($!)
  NAMES+=("$name")
}

# Waits until the command given succeeds. If a process of the demo exits first, or the wait
# outlasts WAIT_LIMIT, it prints the logs and fails (the cleanup then removes everything).
wait_for() {
  local what=$1 deadline=$((SECONDS + WAIT_LIMIT)) i
  shift
  until "$@" >/dev/null 2>&1; do
    for i in "${!PIDS[@]}"; do
      if ! kill -0 "${PIDS[$i]}" 2>/dev/null; then
        echo "fleet-demo: the ${NAMES[$i]} exited while waiting for $what; its log:" >&2
        cat "$WORK/${NAMES[$i]}.log" >&2
        exit 1
      fi
    done
    if ((SECONDS > deadline)); then
      echo "fleet-demo: no $what after ${WAIT_LIMIT} s; what the check ($*) says, then the logs:" >&2
      "$@" >&2 || true
      for i in "${!NAMES[@]}"; do
        echo "-- ${NAMES[$i]}" >&2
        cat "$WORK/${NAMES[$i]}.log" >&2
      done
      exit 1
    fi
    sleep 0.2
  done
}

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
spawn controller "${EG[@]}" server --store "sqlite:$WORK/fleet.db" --listen "127.0.0.1:$PORT" \
  --state-dir "$WORK/server" --poll-interval 5
wait_for "controller listening" grep -q 'listening on' "$WORK/controller.log"
cat "$WORK/controller.log"
fleet() { eg fleet "$@" --server "$SERVER" --state-dir "$WORK/server"; }

step "3. A bootstrap token for two hosts (it carries the CA's pin); one agent per namespace"
fleet token create --uses 2 --ttl 1h --out "$WORK/bootstrap.token"
for i in 0 1; do
  spawn "agent of demo-$i" "${EG[@]}" agent --server "$SERVER" --token-file "$WORK/bootstrap.token" \
    --netns "${NS[$i]}" --state-dir "$WORK/agent-$i" --hostname "demo-$i" --start-jitter 0s
done
enrolled() { [ "$(fleet status --json | grep -c '"enrolledAt"')" -ge 2 ]; }
wait_for "two agents enrolled" enrolled
fleet status || true

step "4. Push a policy: class vms (on vwl0) leaves only through tun0; canary first"
fleet push scripts/fleet-demo-policy.yaml --canary 1 --max-unavailable 1 --bake 3s
wait_for "both hosts in sync" fleet status
fleet status
fleet rollout status
ip netns exec "${NS[0]}" nft list chain inet egressguard forward | head -n 12
ip -n "${NS[0]}" rule show

step "5. Drift: delete the table on demo-0; its agent puts it back and reports it"
ip netns exec "${NS[0]}" nft delete table inet egressguard
repaired() { fleet status demo-0 --json | grep -q '"drift-repaired"'; }
wait_for "the drift on demo-0 repaired" repaired
fleet status demo-0
ip netns exec "${NS[0]}" nft list tables

step "Done: cleaning up the namespaces, the controller and the agents"
