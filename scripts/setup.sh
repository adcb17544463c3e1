#!/usr/bin/env bash
# Installs what egressguard needs on a fresh Debian 12 machine, as root, and only what is missing,
# so it is cheap to run before every run.
#
#   setup.sh          everything the build and the tests need: the kernel tools the lab
#                     (src/prove/lab) and the nftables backend run, the validators the Cilium and
#                     fleet tests run (yamllint, promtool, PostgreSQL, systemd-analyze), and the
#                     npm dependencies with their native addons built (better-sqlite3)
#   setup.sh --demo   what the main job (scripts/demo.sh) needs: the lab's kernel tools and the
#                     npm dependencies without building native addons. better-sqlite3 (the fleet's
#                     SQLite store) takes ~80 s to compile here, the main job never opens it, and
#                     `setup.sh` builds it later when it is missing.
#   setup.sh --fleet-demo   what scripts/fleet-demo.sh needs: --demo's, and better-sqlite3's addon
#                     (its controller keeps the fleet in SQLite).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

profile=full
case "${1:-}" in
  '') ;;
  --demo) profile=demo ;;
  --fleet-demo) profile=fleet-demo ;;
  *)
    echo "setup.sh: unknown option \"$1\"; use no option (tests), --demo (the main job) or --fleet-demo" >&2
    exit 2
    ;;
esac

# Each binary, and the Debian package that ships it: the lab's first, then the tests' own.
declare -A PACKAGE_OF=(
  [nft]=nftables
  [ip]=iproute2
  [tcpdump]=tcpdump
  [ping]=iputils-ping
  [conntrack]=conntrack
  [python3]=python3
  [sysctl]=procps
  [nsenter]=util-linux
)
if [[ $profile == full ]]; then
  PACKAGE_OF+=(
    [systemd-analyze]=systemd
    [yamllint]=yamllint
    [promtool]=prometheus
    [openssl]=openssl
  )
fi
missing=()
for binary in "${!PACKAGE_OF[@]}"; do
  # ip, nft, sysctl and conntrack live in /usr/sbin, which a non-login PATH may lack.
  if ! PATH="$PATH:/usr/sbin:/sbin" command -v "$binary" >/dev/null 2>&1; then
    missing+=("${PACKAGE_OF[$binary]}")
  fi
done
# PostgreSQL's initdb is not on PATH: the fleet tests start private clusters with it.
if [[ $profile == full ]] && ! compgen -G '/usr/lib/postgresql/*/bin/initdb' >/dev/null; then
  missing+=(postgresql)
fi
if ((${#missing[@]} > 0)); then
  if [[ $(id -u) -ne 0 ]]; then
    echo "setup.sh: missing packages ${missing[*]}; run this script as root to install them" >&2
    exit 1
  fi
  echo "setup.sh: installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

# npm writes node_modules/.package-lock.json on every install: older than package-lock.json means
# the dependencies changed since.
if [[ ! -f node_modules/.package-lock.json || package-lock.json -nt node_modules/.package-lock.json ]]; then
  if [[ $profile != full ]]; then
    npm ci --ignore-scripts --no-audit --no-fund
  else
    npm ci --no-audit --no-fund
  fi
fi
# A demo install skipped the native build; the tests and the fleet demo open SQLite stores.
if [[ $profile != demo && ! -f node_modules/better-sqlite3/build/Release/better_sqlite3.node ]]; then
  echo "setup.sh: building better-sqlite3's native addon"
  npm rebuild better-sqlite3
fi
