#!/usr/bin/env bash
# Captures nflog.pcap: what `tcpdump -i nflog:2 -U -w -` writes (tcpdump 4.99, nft 1.0.6, Debian 12)
# for egressguard's log rules, in throwaway network namespaces. Run as root from the repo root:
#   testdata/nflog/capture.sh
set -euo pipefail
out=$(cd "$(dirname "$0")" && pwd)
host="eg-nflog-host-$$" wl="eg-nflog-wl-$$"
trap 'ip netns delete "$host" 2>/dev/null || true; ip netns delete "$wl" 2>/dev/null || true' EXIT
ip netns add "$host"
ip netns add "$wl"
ip -n "$host" link set lo up
ip -n "$wl" link set lo up
ip -n "$host" link add wl0 type veth peer name eth0 netns "$wl"
ip -n "$host" link add up0 type veth peer name up0-far
for l in wl0 up0 up0-far; do ip -n "$host" link set "$l" up; done
ip -n "$wl" link set eth0 up
ip -n "$host" addr add 10.10.0.1/24 dev wl0
ip -n "$host" addr add 2001:db8:10::1/64 dev wl0 nodad
ip -n "$host" addr add 198.51.100.2/24 dev up0
ip -n "$host" addr add 2001:db8:ffff::2/64 dev up0 nodad
ip -n "$host" route add default via 198.51.100.1 dev up0 onlink
ip -n "$host" -6 route add default via 2001:db8:ffff::1 dev up0 onlink
ip netns exec "$host" sysctl -qw net.ipv4.ip_forward=1 net.ipv6.conf.all.forwarding=1
ip -n "$wl" addr add 10.10.0.5/24 dev eth0
ip -n "$wl" addr add 2001:db8:10::5/64 dev eth0 nodad
ip -n "$wl" route add default via 10.10.0.1
ip -n "$wl" -6 route add default via 2001:db8:10::1
ip netns exec "$host" nft -f - <<'NFT'
table inet egtest {
	chain forward {
		type filter hook forward priority filter; policy accept;
		ip daddr 203.0.113.7 tcp dport 443 log prefix "eg drop vm/deny-private " group 2 drop
		ip daddr 203.0.113.7 icmp type echo-request log prefix "eg audit vm/audit-icmp " group 2 accept
		ip6 daddr 2001:db8:ff::7 tcp dport 22 log prefix "eg drop deny-ssh " group 2 drop
	}
	chain output {
		type filter hook output priority filter; policy accept;
		ip6 daddr 2001:db8:ff::7 udp dport 53 log prefix "eg drop host/deny-dns " group 2 drop
		ip daddr 203.0.113.9 udp dport 514 log prefix "docker drop " group 2 drop
	}
}
NFT
ip netns exec "$host" tcpdump -i nflog:2 -U -w "$out/nflog.pcap" 2>/dev/null &
capture=$!
sleep 1
py() { ip netns exec "$1" python3 -c "$2" || true; }
py "$wl" 'import socket; s=socket.socket(); s.settimeout(0.3); s.connect_ex(("203.0.113.7", 443))'
ip netns exec "$wl" ping -c1 -W1 203.0.113.7 >/dev/null || true
py "$wl" 'import socket; s=socket.socket(socket.AF_INET6); s.settimeout(0.3); s.connect_ex(("2001:db8:ff::7", 22))'
py "$host" 'import socket; socket.socket(socket.AF_INET6, socket.SOCK_DGRAM).sendto(b"q", ("2001:db8:ff::7", 53))'
py "$host" 'import socket; socket.socket(socket.AF_INET, socket.SOCK_DGRAM).sendto(b"x", ("203.0.113.9", 514))'
sleep 1
kill -INT "$capture"
wait "$capture" || true
