#!/usr/bin/env bash
# Installs what egressguard's build and tests need on a fresh Debian 12 machine, as root: the
# kernel tools the lab (src/prove/lab) and the nftables backend run, the validators the Cilium
# backend's tests run (yamllint, promtool), and the npm dependencies.
# Idempotent: it installs only what is missing, so it is cheap to run before every test run.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

# Each binary the tests run, and the Debian package that ships it.
declare -A PACKAGE_OF=(
  [nft]=nftables
  [ip]=iproute2
  [tcpdump]=tcpdump
  [ping]=iputils-ping
  [conntrack]=conntrack
  [python3]=python3
  [sysctl]=procps
  [systemd-analyze]=systemd
  [yamllint]=yamllint
  [promtool]=prometheus
  [openssl]=openssl
  [nsenter]=util-linux
)
missing=()
for binary in "${!PACKAGE_OF[@]}"; do
  # ip, nft, sysctl and conntrack live in /usr/sbin, which a non-login PATH may lack.
  if ! PATH="$PATH:/usr/sbin:/sbin" command -v "$binary" >/dev/null 2>&1; then
    missing+=("$binary")
  fi
done
# PostgreSQL's initdb is not on PATH: the fleet tests start private clusters with it.
if ! compgen -G '/usr/lib/postgresql/*/bin/initdb' >/dev/null; then
  missing+=(initdb)
fi
if ((${#missing[@]} > 0)); then
  if [[ $(id -u) -ne 0 ]]; then
    echo "setup.sh: missing ${missing[*]}; run this script as root to install them" >&2
    exit 1
  fi
  echo "setup.sh: installing packages for ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update
  apt-get install -y --no-install-recommends \
    nftables iproute2 tcpdump iputils-ping conntrack python3 procps systemd yamllint prometheus \
    postgresql openssl
fi

# npm writes node_modules/.package-lock.json on every install: older than package-lock.json means
# the dependencies changed since.
if [[ ! -f node_modules/.package-lock.json || package-lock.json -nt node_modules/.package-lock.json ]]; then
  npm ci
fi
