#!/usr/bin/env python3
"""Far-side services of the egressguard lab (prove). Python 3 stdlib only.

    echo.py serve NODE --tcp 22,443 --udp 22,443,53 --addresses 203.0.113.7,2001:db8:ff::7
        TCP and UDP echo on every address of the node (both families): each request is answered
        with one JSON line naming the node and the source address and port it saw, so the client
        learns which far side answered (the path) and as whom it arrived (the egress address).
        UDP port 53 answers DNS: a TXT record "node=NODE src=ADDRESS" for any query (anything
        else is echoed like on any other port). UDP binds
        each of --addresses on its own, so an answer leaves from the address asked (an unbound
        socket would answer from whatever address routing picks, and the client would drop it).

    echo.py resolve --listen 10.10.0.1,2001:db8:10::1 --upstream 192.0.2.53 [--source 10.200.0.2]
        A host resolver: forwards each DNS query on UDP port 53 to the upstream, from the given
        source address when set (bound with IP_FREEBIND, as a resolver bound to a tunnel address
        is), and relays the answer. It routes by the host's tables like any resolver does. When
        the upstream cannot be reached or does not answer, it answers SERVFAIL, as resolvers do.

Both print {"ready": true} on stdout once every socket is bound, then run until SIGTERM.
Replies never repeat the request's payload, so a reply carries no probe nonce.
"""

import ipaddress
import json
import selectors
import signal
import socket
import struct
import sys
import threading

IP_FREEBIND = 15
IPV6_FREEBIND = 78
MAX_REQUEST = 2048


def main(argv):
    if len(argv) >= 2 and argv[0] == "serve":
        options = parse_options(argv[2:])
        addresses = [a for a in (options.get("--addresses") or "").split(",") if a]
        return serve(argv[1], ports(options.get("--tcp")), ports(options.get("--udp")), addresses)
    if len(argv) >= 1 and argv[0] == "resolve":
        options = parse_options(argv[1:])
        listen = [a for a in (options.get("--listen") or "").split(",") if a]
        upstream = options.get("--upstream")
        if not listen or not upstream:
            return usage()
        return resolve(listen, upstream, options.get("--source"))
    return usage()


def usage():
    print(__doc__, file=sys.stderr)
    return 2


def parse_options(args):
    options = {}
    for i in range(0, len(args) - 1, 2):
        options[args[i]] = args[i + 1]
    return options


def ports(text):
    return [int(p) for p in (text or "").split(",") if p]


def plain(address):
    """An IPv4-mapped IPv6 address (a dual-stack socket's view of IPv4) as plain IPv4."""
    parsed = ipaddress.ip_address(address.split("%")[0])
    if parsed.version == 6 and parsed.ipv4_mapped is not None:
        return str(parsed.ipv4_mapped)
    return str(parsed)


def dual_stack(kind, port):
    sock = socket.socket(socket.AF_INET6, kind)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
    sock.bind(("::", port))
    return sock


def report(node, proto, peer, local):
    return {
        "node": node,
        "proto": proto,
        "src": plain(peer[0]),
        "sport": peer[1],
        "dst": plain(local[0]),
        "dport": local[1],
    }


def bound(kind, address, port):
    family = socket.AF_INET6 if ":" in address else socket.AF_INET
    sock = socket.socket(family, kind)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((address, port))
    return sock


def serve(node, tcp_ports, udp_ports, addresses):
    selector = selectors.DefaultSelector()
    for port in tcp_ports:
        sock = dual_stack(socket.SOCK_STREAM, port)
        sock.listen(128)
        sock.setblocking(False)
        selector.register(sock, selectors.EVENT_READ, ("tcp", port))
    for port in udp_ports:
        for sock in [bound(socket.SOCK_DGRAM, a, port) for a in addresses] or [
            dual_stack(socket.SOCK_DGRAM, port)
        ]:
            sock.setblocking(False)
            selector.register(sock, selectors.EVENT_READ, ("udp", port))
    ready()
    while True:
        for key, _ in selector.select():
            proto, port = key.data
            if proto == "tcp":
                try:
                    conn, peer = key.fileobj.accept()
                except OSError:
                    continue
                threading.Thread(target=answer_tcp, args=(node, conn, peer), daemon=True).start()
            else:
                try:
                    data, peer = key.fileobj.recvfrom(MAX_REQUEST)
                except OSError:
                    continue
                local = (key.fileobj.getsockname()[0], port)
                # Port 53 answers DNS, and echoes what is no DNS query (a probe's UDP datagram).
                reply = dns_answer(data, f"node={node} src={plain(peer[0])}") if port == 53 else None
                if reply is None:
                    reply = (json.dumps(report(node, "udp", peer, local)) + "\n").encode()
                if reply is not None:
                    try:
                        key.fileobj.sendto(reply, peer)
                    except OSError:
                        pass


# How long a connection may stay silent before the server gives up on it. Long: the client
# bounds its own wait and closes; a server that gave up first (it waited 2 s) answered a client
# whose thread a busy CPU held between connect and send with a FIN, or with a reset once the
# request came in: an allowed probe read as refused or reset.
REQUEST_TIMEOUT_S = 60


def answer_tcp(node, conn, peer):
    with conn:
        conn.settimeout(REQUEST_TIMEOUT_S)
        try:
            conn.recv(MAX_REQUEST)
            local = conn.getsockname()
            conn.sendall((json.dumps(report(node, "tcp", peer, local)) + "\n").encode())
        except OSError:
            pass


def dns_answer(query, text):
    """A response to a standard query: the question echoed, one TXT answer holding `text`."""
    if len(query) < 12:
        return None
    ident, flags, qdcount = struct.unpack("!HHH", query[:6])
    if flags & 0x8000 or qdcount != 1:
        return None
    end = 12
    while end < len(query) and query[end] != 0:
        end += query[end] + 1
    end += 5  # the root label, QTYPE and QCLASS
    if end > len(query):
        return None
    question = query[12:end]
    txt = text.encode()[:255]
    answer = (
        struct.pack("!HHHIH", 0xC00C, 16, 1, 0, len(txt) + 1) + bytes([len(txt)]) + txt
    )
    header = struct.pack("!HHHHHH", ident, 0x8180, 1, 1, 0, 0)
    return header + question + answer


def resolve(listen, upstream, source):
    upstream_address = ipaddress.ip_address(upstream)
    sockets = []
    for address in listen:
        family = socket.AF_INET6 if ":" in address else socket.AF_INET
        sock = socket.socket(family, socket.SOCK_DGRAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((address, 53))
        sockets.append(sock)
    ready()
    selector = selectors.DefaultSelector()
    for sock in sockets:
        sock.setblocking(False)
        selector.register(sock, selectors.EVENT_READ)
    while True:
        for key, _ in selector.select():
            try:
                query, client = key.fileobj.recvfrom(MAX_REQUEST)
            except OSError:
                continue
            threading.Thread(
                target=forward,
                args=(key.fileobj, query, client, upstream_address, source),
                daemon=True,
            ).start()


def forward(server, query, client, upstream, source):
    family = socket.AF_INET6 if upstream.version == 6 else socket.AF_INET
    with socket.socket(family, socket.SOCK_DGRAM) as out:
        out.settimeout(1.0)
        try:
            if source:
                if family == socket.AF_INET:
                    out.setsockopt(socket.SOL_IP, IP_FREEBIND, 1)
                else:
                    out.setsockopt(socket.IPPROTO_IPV6, IPV6_FREEBIND, 1)
                out.bind((source, 0))
            out.sendto(query, (str(upstream), 53))
            answer, _ = out.recvfrom(MAX_REQUEST)
        except OSError:
            # A send refused by routing or a firewall fails at once; no answer times out.
            answer = servfail(query)
        if answer is not None:
            try:
                server.sendto(answer, client)
            except OSError:
                pass


def servfail(query):
    """The query's header and question back with rcode 2 (SERVFAIL, RFC 1035 §4.1.1)."""
    if len(query) < 12:
        return None
    ident, flags = struct.unpack("!HH", query[:4])
    if flags & 0x8000:
        return None
    header = struct.pack("!HHHHHH", ident, 0x8082 | (flags & 0x0100), 1, 0, 0, 0)
    return header + query[12:]


def ready():
    sys.stdout.write(json.dumps({"ready": True}) + "\n")
    sys.stdout.flush()


if __name__ == "__main__":
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    try:
        sys.exit(main(sys.argv[1:]))
    except KeyboardInterrupt:
        sys.exit(0)
