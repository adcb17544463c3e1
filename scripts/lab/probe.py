#!/usr/bin/env python3
"""Probes of the egressguard lab (prove), sent from a workload node. Python 3 stdlib only.

    probe.py probe < {"nonce": "eg…", "timeoutMs": 600,
                      "probes": [{"tag": "f3", "kind": "tcp", "src": "10.10.0.5",
                                  "dst": "203.0.113.7", "port": 443, "count": 10}]}

Runs every probe at once, each two ways:
  - a real client (TCP connect, a UDP request, a DNS query, an ICMP echo) from src, whose payload
    (or query name) carries the nonce and tag plus "c": did anything answer, which far side
    (scripts/lab/echo.py names itself), and as which source address did the probe arrive;
  - `count` raw packets of the same kind built by sender.py, carrying the nonce and tag, for the
    packet counters on the far sides.
A probe with "fragment": "all" sends its datagrams in fragments (the client's too, UDP and ICMP);
with "non-first" only the raw datagrams' non-first fragments (give "client": false).
Writes {"results": [{"tag", "client": {"outcome", "node", "seen", "error", "ms"},
"raw": {"sent", "refused", "failed", "error"}}]}; outcome is answered, refused, unreachable, timeout,
error or none (no client for that kind). "refused" counts the raw packets this node's own stack
refused to send (its firewall's output drop: EPERM; its route: a blackhole EINVAL, unreachable
EHOSTUNREACH, prohibit EACCES, none ENETUNREACH): they never left it. "failed" counts any other
send error.

    probe.py stream '{"nonce": "eg…", "rate": 120,
                       "specs": [{"tag": "s1", "kind": "udp", "src": "…", "dst": "…", "dport": 9}]}'

Sends one raw packet of every spec `rate` times a second until SIGTERM (or until the process
that started it is gone: a stream never outlives its scenario, nor runs out before it). Writes the
line "sending" once the first round is out (a slow machine can take a while to start), then at the
end
{"results": [{"tag", "sent", "refused", "failed", "error"}], "elapsedMs", "minPerSecond"}: minPerSecond is
the fewest packets of one spec sent in any whole second of the run.
"""

import errno
import ipaddress
import json
import os
import signal
import socket
import struct
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import sender  # noqa: E402  (scripts/lab/sender.py: packet building and raw sockets)

IP_FREEBIND = 15
IPV6_FREEBIND = 78
IPV6_MTU = 24
FRAGMENT_SEND_LOCK = threading.Lock()
ANSWER_TIMEOUT_S = 10
# What a node's own stack answers a send it refuses: its firewall's output drop (EPERM), a
# blackhole route (EINVAL: the kernel's fib_props), an unreachable or prohibit route, no route.
REFUSED = (errno.EPERM, errno.EINVAL, errno.EHOSTUNREACH, errno.EACCES, errno.ENETUNREACH)


def main(argv):
    mode = argv[0] if argv else ""
    # The request comes as an argument (a stream is started with no stdin) or on stdin.
    request = json.loads(argv[1] if len(argv) > 1 else sys.stdin.read())
    if mode == "probe":
        return run_probes(request)
    if mode == "stream":
        return run_stream(request)
    print(__doc__, file=sys.stderr)
    return 2


def run_probes(request):
    nonce = request["nonce"]
    timeout = request.get("timeoutMs", 600) / 1000
    probes = request["probes"]
    results = [None] * len(probes)

    def one(index, probe):
        client = {"outcome": "none", "node": None, "seen": None, "error": None, "ms": None}
        raw = {"sent": 0, "refused": 0, "failed": 0, "error": None}
        threads = []
        if probe.get("client", True):
            threads.append(threading.Thread(target=lambda: client.update(
                run_client(nonce + probe["tag"] + "c", probe, timeout))))
        if probe.get("count", 0) > 0:
            threads.append(threading.Thread(target=lambda: raw.update(
                send_raw(nonce + probe["tag"], probe))))
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        results[index] = {"tag": probe["tag"], "client": client, "raw": raw}

    threads = [threading.Thread(target=one, args=(i, p)) for i, p in enumerate(probes)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    json.dump({"results": results}, sys.stdout)
    sys.stdout.write("\n")
    return 0


def send_raw(nonce, probe):
    raw = {"kind": probe["kind"], "dst": probe["dst"], "src": probe["src"],
           "count": probe["count"]}
    if probe.get("fragment") is not None:
        raw["fragment"] = probe["fragment"]
    if probe["kind"] in ("tcp", "udp", "sctp"):
        raw["dport"] = probe["port"]
    if probe["kind"] == "ip":
        raw["protocol"] = probe["protocol"]
    try:
        spec = sender.parse_spec(0, raw)
    except sender.InvalidInput as e:
        # Not sendable as asked: say why (the oracle calls the probe unmeasured), never crash the
        # thread and leave "unknown error".
        return {"sent": 0, "refused": 0, "failed": probe["count"],
                "error": f"cannot build the packet: {e}"}
    # Fresh source ports for every probe: a flow of an earlier phase (its conntrack entry, with
    # a masquerade binding to another interface) must not decide the fate of this one. From the
    # crafted packets' range, which the node's own sockets never use.
    low, high = sender.RAW_SOURCE_PORTS
    base = low + int.from_bytes(os.urandom(2), "big") % (high - low - probe["count"])
    sent, refused, failed, error, sockets = 0, 0, 0, None, {}
    try:
        src = spec["src"]
        sock = sender.raw_socket(src, sockets)
        for seq in range(spec["count"]):
            packets = sender.build_packets(nonce, dict(spec, sport=base + seq), src, seq)
            try:
                # A datagram's fragments back to back: the kernel drops a reassembly queue once
                # 64 other fragments from the same source came between two of its own
                # (net.ipv4.ipfrag_max_dist), and the probes' threads share their sources.
                with FRAGMENT_SEND_LOCK:
                    for packet in packets:
                        sock.sendto(packet, (str(spec["dst"]), 0))
                sent += 1
            except OSError as e:
                if e.errno in REFUSED:
                    refused += 1
                else:
                    failed += 1
                error = error or sender.describe(e)
    except OSError as e:
        return {"sent": 0, "refused": 0, "failed": spec["count"], "error": sender.describe(e)}
    finally:
        for s in sockets.values():
            s.close()
    return {"sent": sent, "refused": refused, "failed": failed, "error": error}


def family_of(address):
    return socket.AF_INET6 if ipaddress.ip_address(address).version == 6 else socket.AF_INET


def bound_socket(src, kind, proto=0):
    family = family_of(src)
    sock = socket.socket(family, kind, proto)
    if family == socket.AF_INET:
        sock.setsockopt(socket.SOL_IP, IP_FREEBIND, 1)
    else:
        sock.setsockopt(socket.IPPROTO_IPV6, IPV6_FREEBIND, 1)
    sock.bind((src, 0))
    return sock


def run_client(token, probe, timeout):
    kind = probe["kind"]
    started = time.monotonic()
    try:
        if kind == "tcp":
            result = tcp_client(token, probe, timeout)
        elif kind == "udp":
            result = udp_client(token, probe, timeout)
        elif kind == "dns":
            result = dns_client(token, probe, timeout)
        elif kind == "icmp":
            result = icmp_client(token, probe, timeout)
        else:
            return {"outcome": "none", "node": None, "seen": None, "error": None, "ms": None}
    except socket.timeout:
        result = {"outcome": "timeout"}
    except ConnectionRefusedError:
        result = {"outcome": "refused"}
    except OSError as error:
        result = {"outcome": "unreachable" if error.errno in REFUSED else "error",
                  "error": sender.describe(error)}
    result.setdefault("node", None)
    result.setdefault("seen", None)
    result.setdefault("error", None)
    result["ms"] = round((time.monotonic() - started) * 1000)
    return result


def answered(reply):
    report = json.loads(reply.decode().splitlines()[0])
    return {"outcome": "answered", "node": report.get("node"), "seen": report.get("src")}


def tcp_client(token, probe, timeout):
    with bound_socket(probe["src"], socket.SOCK_STREAM) as sock:
        sock.settimeout(timeout)
        sock.connect((probe["dst"], probe["port"]))
        # Connected: the path let it through, and the answer is on its way. A busy CPU may delay
        # it past the connect's bound; that is no drop, so the answer gets a bound of its own.
        sock.settimeout(max(timeout, ANSWER_TIMEOUT_S))
        sock.sendall(f"egressguard {token} tcp\n".encode())
        data = b""
        while not data.endswith(b"\n"):
            chunk = sock.recv(2048)
            if not chunk:
                break
            data += chunk
        if not data:
            return {"outcome": "refused", "error": "closed without an answer"}
        return answered(data)


def udp_client(token, probe, timeout):
    request = f"egressguard {token} udp\n".encode()
    with bound_socket(probe["src"], socket.SOCK_DGRAM) as sock:
        if probe.get("fragment") == "all":
            # A datagram twice the link's MTU: the kernel sends it in fragments. IPv6 routers
            # never fragment (RFC 8200 §5): keep its fragments within the minimum link MTU.
            request += b"." * 3000
            if family_of(probe["src"]) == socket.AF_INET6:
                sock.setsockopt(socket.IPPROTO_IPV6, IPV6_MTU, 1280)
        sock.settimeout(timeout)
        sock.connect((probe["dst"], probe["port"]))
        sock.send(request)
        return answered(sock.recv(2048))


def dns_client(token, probe, timeout):
    query_id = int.from_bytes(os.urandom(2), "big")
    labels = [f"{token}-0", "egressguard", "test"]
    name = b"".join(bytes([len(l)]) + l.encode() for l in labels) + b"\x00"
    query = struct.pack("!HHHHHH", query_id, 0x0100, 1, 0, 0, 0) + name + struct.pack("!HH", 16, 1)
    with bound_socket(probe["src"], socket.SOCK_DGRAM) as sock:
        sock.settimeout(timeout)
        sock.connect((probe["dst"], probe.get("port") or 53))
        sock.send(query)
        deadline = time.monotonic() + timeout
        while True:
            sock.settimeout(max(deadline - time.monotonic(), 0.001))
            reply = sock.recv(2048)
            if len(reply) >= 12 and struct.unpack("!H", reply[:2])[0] == query_id:
                break
        text = reply[len(query):]
        # The TXT answer's text is the last part of the reply: "node=NAME src=ADDRESS".
        fields = dict(part.split("=", 1) for part in
                      text[text.find(b"node="):].decode(errors="replace").split() if "=" in part)
        return {"outcome": "answered", "node": fields.get("node"), "seen": fields.get("src")}


def icmp_client(token, probe, timeout):
    src, dst = probe["src"], probe["dst"]
    v6 = family_of(dst) == socket.AF_INET6
    ident = int.from_bytes(os.urandom(2), "big")
    payload = f"egressguard {token} icmp\n".encode()
    if probe.get("fragment") == "all":
        payload += b"." * 3000  # sent in fragments, as udp_client's
    proto = socket.IPPROTO_ICMPV6 if v6 else socket.IPPROTO_ICMP
    with bound_socket(src, socket.SOCK_RAW, proto) as sock:
        if v6 and probe.get("fragment") == "all":
            sock.setsockopt(socket.IPPROTO_IPV6, IPV6_MTU, 1280)
        if v6:  # the kernel computes the ICMPv6 checksum (RFC 3542 §3.1)
            message = struct.pack("!BBHHH", 128, 0, 0, ident, 1) + payload
        else:
            message = struct.pack("!BBHHH", 8, 0, 0, ident, 1) + payload
            message = message[:2] + struct.pack("!H", sender.checksum(message)) + message[4:]
        sock.sendto(message, (dst, 0))
        deadline = time.monotonic() + timeout
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise socket.timeout()
            sock.settimeout(remaining)
            data, peer = sock.recvfrom(8192)
            body = data if v6 else data[(data[0] & 0x0F) * 4:]
            if len(body) < 8:
                continue
            kind, _, _, reply_ident, _ = struct.unpack("!BBHHH", body[:8])
            if kind == (129 if v6 else 0) and reply_ident == ident:
                return {"outcome": "answered"}
            is_error = kind < 128 if v6 else kind in (3, 11)
            if is_error and struct.pack("!H", ident) in body[8:]:
                return {"outcome": "unreachable", "error": f"ICMP error type {kind} from {peer[0]}"}


def run_stream(request):
    nonce = request["nonce"]
    interval = 1.0 / request["rate"]
    parent = os.getppid()
    specs = []
    for raw in request["specs"]:
        spec = {"kind": raw["kind"], "dst": raw["dst"], "src": raw["src"]}
        if raw["kind"] in ("tcp", "udp", "sctp"):
            spec["dport"] = raw["dport"]
        specs.append((raw["tag"], sender.parse_spec(0, spec)))
    # SIGTERM stops the stream. It is blocked and waited for (sigtimedwait), never handled: a
    # handler that sets a threading.Event deadlocks when the signal lands while this thread holds
    # the Event's own lock (inside wait()), and the stream then never ends.
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})
    sockets = {}
    counts = [{"tag": tag, "sent": 0, "refused": 0, "failed": 0, "error": None} for tag, _ in specs]
    per_second = []
    started = time.monotonic()
    next_round = started
    seq = 0
    while signal.SIGTERM not in signal.sigpending():
        now = time.monotonic()
        if os.getppid() != parent:
            break  # orphaned: the egressguard that started it died without stopping it
        if next_round > now:
            if signal.sigtimedwait({signal.SIGTERM}, next_round - now) is not None:
                break
            continue
        second = int(now - started)
        while len(per_second) <= second:
            per_second.append(0)
        for (tag, spec), count in zip(specs, counts):
            try:
                src = spec["src"]
                packet = sender.build_packet(nonce + tag, spec, src, seq)
                sender.raw_socket(src, sockets).sendto(packet, (str(spec["dst"]), 0))
                count["sent"] += 1
            except OSError as error:
                count["refused" if error.errno in REFUSED else "failed"] += 1
                count["error"] = count["error"] or sender.describe(error)
        per_second[second] += 1
        if seq == 0:
            # The first round is out: the scenario starts its fault or reapplies only now.
            sys.stdout.write('"sending"\n')
            sys.stdout.flush()
        seq += 1
        next_round += interval
        # Behind by more than a round (a busy CPU): catch up in a burst, never skip a round.
    for sock in sockets.values():
        sock.close()
    elapsed = time.monotonic() - started
    whole = per_second[: int(elapsed)]
    json.dump({"results": counts, "elapsedMs": round(elapsed * 1000),
               "minPerSecond": min(whole) if whole else None}, sys.stdout)
    sys.stdout.write("\n")
    sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
