#!/usr/bin/env bash
# Captures the doctor fixtures from real commands (nft 1.0.6, iproute2 6.1, Debian 12), in a
# throwaway network namespace: never in the machine's own. Run as root from the repo root:
#   testdata/doctor/capture.sh
# The Docker and firewalld tables are written in nft syntax after what iptables-nft and
# firewalld's nftables backend load (neither is installed here); nft lists them as it would theirs.
set -euo pipefail
out=$(cd "$(dirname "$0")" && pwd)
ns="eg-doc-capture-$$"
tmp=$(mktemp -d)
trap 'ip netns delete "$ns" 2>/dev/null || true; rm -rf "$tmp"' EXIT
nsx() { ip netns exec "$ns" "$@"; }
json() { python3 -m json.tool --indent 1; }

# Minimal BPF programs (XDP_PASS and TC_ACT_OK), compiled with llc: an attached program is what
# doctor looks for, not what it does.
for prog in xdp:2 tc:0; do
  name=${prog%%:*} ret=${prog##*:}
  printf 'target triple = "bpf"\ndefine i32 @%s_prog(i8* %%ctx) #0 section "%s" {\n  ret i32 %s\n}\n@_license = global [4 x i8] c"GPL\\00", section "license"\nattributes #0 = { nounwind }\n' \
    "$name" "$name" "$ret" >"$tmp/$name.ll"
  llc -march=bpf -filetype=obj "$tmp/$name.ll" -o "$tmp/$name.o"
done

capture() { # $1: scenario directory
  local d="$out/$1"
  mkdir -p "$d"
  nsx nft -j -t list ruleset | json >"$d/ruleset.json"
  nsx ip -N -j -4 rule show | json >"$d/rules4.json"
  nsx ip -N -j -6 rule show | json >"$d/rules6.json"
  nsx ip -N -j -4 route show table all | json >"$d/routes4.json"
  nsx ip -N -j -6 route show table all | json >"$d/routes6.json"
  nsx ip -j -d link show | json >"$d/links.json"
  nsx tc -j qdisc show | json >"$d/qdiscs.json"
  for dev in $(nsx tc -j qdisc show | python3 -c 'import json,sys; print(" ".join(q["dev"] for q in json.load(sys.stdin) if q["kind"] in ("clsact","ingress")))'); do
    nsx tc -j filter show dev "$dev" ingress | json >"$d/filters.$dev.ingress.json"
    nsx tc -j filter show dev "$dev" egress | json >"$d/filters.$dev.egress.json"
  done
  nsx ip xfrm policy show >"$d/xfrm-policy.txt"
}

# A host with everything doctor reports.
ip netns add "$ns"
ip -n "$ns" link set lo up
ip -n "$ns" link add eth0 type veth peer name eth0-peer
ip -n "$ns" link add br0 type bridge
ip -n "$ns" link set eth0 master br0
ip -n "$ns" link add vnet0 type veth peer name vnet0-vm
ip -n "$ns" link set vnet0 master br0
ip -n "$ns" link add vwl0 type veth peer name vwl0-wl
ip -n "$ns" link add mv0 link eth0-peer type macvlan mode bridge
for l in eth0 eth0-peer br0 vnet0 vnet0-vm vwl0 vwl0-wl mv0; do ip -n "$ns" link set "$l" up; done
ip -n "$ns" addr add 198.51.100.2/24 dev br0
ip -n "$ns" addr add 10.10.0.1/24 dev vwl0
ip -n "$ns" route add default via 198.51.100.1 dev br0 onlink
ip -n "$ns" link set dev vwl0-wl xdpgeneric obj "$tmp/xdp.o" sec xdp
nsx tc qdisc add dev eth0-peer clsact
nsx tc filter add dev eth0-peer ingress bpf da obj "$tmp/tc.o" sec tc
nsx tc filter add dev eth0-peer egress bpf bytecode '1,6 0 0 4294967295,'
nsx ip xfrm policy add src 10.10.0.0/24 dst 10.99.0.0/16 dir out \
  tmpl src 198.51.100.2 dst 203.0.113.9 proto esp mode tunnel
nsx ip xfrm policy add src 10.99.0.0/16 dst 10.10.0.0/24 dir fwd \
  tmpl src 203.0.113.9 dst 198.51.100.2 proto esp mode tunnel
# Steering as egressguard installs it (proto 104), a foreign rule at our priority, a foreign
# route in our table, Tailscale's rule and exit-node default, wg-quick's rules.
ip -n "$ns" rule add from 10.10.0.0/24 lookup 7350 priority 7350 proto 104
ip -n "$ns" -6 rule add from 2001:db8:10::/64 lookup 7350 priority 7350 proto 104
ip -n "$ns" rule add from 10.20.0.0/24 lookup 100 priority 7350
ip -n "$ns" route add blackhole default table 7350 metric 4000000000 proto 104
ip -n "$ns" route add throw 192.168.0.0/16 table 7350 metric 50 proto 104
ip -n "$ns" route add 10.99.0.0/16 dev vwl0 table 7350
ip -n "$ns" rule add priority 5210 fwmark 0x80000/0xff0000 lookup main
ip -n "$ns" rule add priority 5270 lookup 52
ip -n "$ns" route add default dev vwl0 table 52
ip -n "$ns" rule add priority 32764 lookup main suppress_prefixlength 0
ip -n "$ns" rule add priority 32765 not fwmark 0xca6c lookup 51820
ip -n "$ns" route add default dev vwl0 table 51820
nsx nft -f - <<'NFT'
table ip nat {
	chain DOCKER {
		iifname "docker0" counter return
	}
	chain POSTROUTING {
		type nat hook postrouting priority srcnat; policy accept;
		ip saddr 172.17.0.0/16 oifname != "docker0" counter masquerade
	}
	chain PREROUTING {
		type nat hook prerouting priority dstnat; policy accept;
		fib daddr type local counter jump DOCKER
	}
}
table ip filter {
	chain DOCKER {
	}
	chain DOCKER-ISOLATION-STAGE-1 {
		iifname "docker0" oifname != "docker0" counter jump DOCKER-ISOLATION-STAGE-2
		counter return
	}
	chain DOCKER-ISOLATION-STAGE-2 {
		oifname "docker0" counter drop
		counter return
	}
	chain FORWARD {
		type filter hook forward priority filter; policy drop;
		counter jump DOCKER-USER
		counter jump DOCKER-ISOLATION-STAGE-1
		oifname "docker0" ct state related,established counter accept
		oifname "docker0" counter jump DOCKER
		iifname "docker0" oifname != "docker0" counter accept
		iifname "docker0" oifname "docker0" counter accept
	}
	chain DOCKER-USER {
		counter return
	}
}
table inet firewalld {
	chain mangle_PREROUTING {
		type filter hook prerouting priority mangle + 10; policy accept;
	}
	chain filter_PREROUTING {
		type filter hook prerouting priority filter + 10; policy accept;
		icmpv6 type { nd-router-advert, nd-neighbor-solicit } accept
		meta nfproto ipv6 fib saddr . mark . iif oif missing drop
	}
	chain filter_INPUT {
		type filter hook input priority filter + 10; policy accept;
		ct state { established, related } accept
		iifname "lo" accept
		ct state invalid drop
		jump filter_INPUT_ZONES
		reject with icmpx admin-prohibited
	}
	chain filter_FORWARD {
		type filter hook forward priority filter + 10; policy accept;
		ct state { established, related } accept
		iifname "lo" accept
		ct state invalid drop
		jump filter_FORWARD_ZONES
		reject with icmpx admin-prohibited
	}
	chain filter_OUTPUT {
		type filter hook output priority filter + 10; policy accept;
		ct state { established, related } accept
		oifname "lo" accept
		jump filter_OUTPUT_POLICIES
	}
	chain filter_OUTPUT_POLICIES {
		return
	}
	chain nat_POSTROUTING {
		type nat hook postrouting priority srcnat + 10; policy accept;
		jump nat_POSTROUTING_ZONES
	}
	chain nat_POSTROUTING_ZONES {
		oifname "br0" goto nat_POST_public
	}
	chain nat_POST_public {
	}
	chain filter_INPUT_ZONES {
		goto filter_IN_public
	}
	chain filter_IN_public {
		tcp dport 22 accept
		meta l4proto { icmp, ipv6-icmp } accept
	}
	chain filter_FORWARD_ZONES {
		goto filter_FWD_public
	}
	chain filter_FWD_public {
	}
}
table ip6 mesh {
	map verdicts {
		type ipv6_addr : verdict
		elements = { 2001:db8::1 : drop }
	}
	chain out {
		type filter hook output priority -10; policy accept;
		ip6 daddr vmap @verdicts
	}
	chain post {
		type filter hook postrouting priority 0; policy accept;
		tcp dport vmap { 22 : accept, 23 : drop }
	}
}
table inet audit {
	chain watch {
		type filter hook forward priority -200; policy accept;
		counter
	}
}
NFT
nsx nft -f "$out/../policies/valid/linux-vpn-gateway/expected.nftables.ruleset.nft"
capture busy-host
ip netns delete "$ns"

# A host doctor has nothing to say about: our table and steering, a plain uplink.
ip netns add "$ns"
ip -n "$ns" link set lo up
ip -n "$ns" link add eth0 type veth peer name eth0-peer
ip -n "$ns" link add vwl0 type veth peer name vwl0-wl
for l in eth0 eth0-peer vwl0 vwl0-wl; do ip -n "$ns" link set "$l" up; done
ip -n "$ns" addr add 198.51.100.2/24 dev eth0
ip -n "$ns" addr add 10.10.0.1/24 dev vwl0
ip -n "$ns" route add default via 198.51.100.1 dev eth0
ip -n "$ns" rule add from 10.10.0.0/24 lookup 7350 priority 7350 proto 104
ip -n "$ns" route add blackhole default table 7350 metric 4000000000 proto 104
nsx nft -f "$out/../policies/valid/linux-vpn-gateway/expected.nftables.ruleset.nft"
capture clean-host

# The repository's JSON is Prettier's.
npx prettier --write "$out" >/dev/null
