#!/usr/bin/env python3
"""Send a batch of nonce-stamped probe packets for the egressguard lab. Python 3 stdlib only.

Reads one JSON object on stdin:

    {"nonce": "eg1a2b3c4d5e6f7a8b",
     "packets": [{"kind": "udp", "dst": "203.0.113.10", "src": "10.99.0.7",
                  "sport": 10000, "dport": 9, "count": 3, "intervalMs": 0}]}

kind is tcp (a SYN), udp, dns (a UDP query whose name holds the nonce), icmp (echo request;
ICMPv6 for an IPv6 destination), gre, esp, sctp (an INIT) or ip (any IP protocol number, given
as "protocol"). src is optional (default: the source the kernel would pick for dst).

"link" names the interface to send by: it allows link-local and multicast IPv6 addresses (sent
with that interface's scope). "icmpType" makes an icmp packet of that type (ICMPv6 router and
neighbour solicitations and advertisements carry the fields RFC 4861 gives them and hop limit 255;
any other type the echo layout); "hopLimit" sets the hop limit or TTL (default 64).

"fragment" sends each datagram in IP fragments ("fragmentSize" bytes of IP payload each, a
multiple of 8; default 512; the payload is padded to "length" bytes, default three fragments):
"all" sends every fragment, "non-first" only the fragments after the first (a datagram that can
never be reassembled). Every fragment carries the nonce: the payload repeats the nonce line.

Writes one JSON object on stdout: {"results": [{"sent": 3, "failed": 0, "error": null}]}, one
result per packet spec. Every packet is built whole, IP header included, and sent through a raw
socket (IPPROTO_RAW implies IP_HDRINCL on both families: raw(7), ipv6(7)), so any source address
works, also one that is not on this host. The socket is bound to the source with IP_FREEBIND so
that source-based routing rules see it. Every payload carries the nonce.

Exit status: 0 when the batch ran (send errors are reported per spec, not fatal), 2 on invalid
input.
"""

import ipaddress
import itertools
import json
import os
import re
import socket
import struct
import sys
import threading
import time

KINDS = {"tcp", "udp", "dns", "icmp", "gre", "esp", "sctp", "ip"}
ND_TYPES = {133, 134, 135, 136, 137}
PORTED = {"tcp", "udp", "sctp"}
FIXED_PROTOCOL = {"tcp": 6, "udp": 17, "dns": 17, "gre": 47, "esp": 50, "sctp": 132}
# IPv6 extension headers: a payload after one of these would be parsed as that header.
IPV6_EXTENSION_HEADERS = {0, 43, 44, 51, 60, 135, 139, 140, 253, 254}
NONCE = re.compile(r"^[a-z0-9]{8,32}$")
MAX_PACKETS = 10000
MAX_DURATION_S = 60.0
FRAGMENT_MODES = {"all", "non-first"}
DEFAULT_FRAGMENT_SIZE = 512
IP_FREEBIND = 15
# Source ports of crafted packets: below the lab's ephemeral range (the lab pins every node's
# net.ipv4.ip_local_port_range to 32768-60999), so a crafted flow never shares its four-tuple with
# a real socket of the same node: shared, the flow's replies would reach that socket (or draw a
# reset from the kernel), and its conntrack entry, made in an earlier phase under other routes or
# NAT, would carry into the socket's connection.
RAW_SOURCE_PORTS = (10000, 30000)
IPV6_FREEBIND = 78
GRE_PROTOCOL_TYPE = 0x88B5  # IEEE 802 local experimental EtherType: never decapsulated
ESP_SPI = 0x45470001
# SCTP parameter types with the top bits 10 are skipped silently by receivers (RFC 9260 §3.2.1).
SCTP_NONCE_PARAMETER = 0x8E67


class InvalidInput(Exception):
    pass


def main():
    try:
        batch = parse_batch(sys.stdin.read())
    except InvalidInput as error:
        print(f"sender.py: invalid input: {error}", file=sys.stderr)
        return 2
    sockets = {}
    results = []
    try:
        for spec in batch["packets"]:
            results.append(send_spec(batch["nonce"], spec, sockets))
    finally:
        for sock in sockets.values():
            sock.close()
    json.dump({"results": results}, sys.stdout)
    sys.stdout.write("\n")
    return 0


def parse_batch(text):
    try:
        batch = json.loads(text)
    except ValueError as error:
        raise InvalidInput(f"not JSON: {error}") from None
    if not isinstance(batch, dict):
        raise InvalidInput("expected an object with nonce and packets")
    nonce = batch.get("nonce")
    if not isinstance(nonce, str) or not NONCE.match(nonce):
        raise InvalidInput(f"nonce {nonce!r} must be 8 to 32 characters of a-z and 0-9")
    packets = batch.get("packets")
    if not isinstance(packets, list) or not packets:
        raise InvalidInput("packets must be a non-empty list")
    specs = [parse_spec(i, p) for i, p in enumerate(packets)]
    total = sum(s["count"] for s in specs)
    if total > MAX_PACKETS:
        raise InvalidInput(f"{total} packets in one batch, at most {MAX_PACKETS}")
    duration = sum((s["count"] - 1) * s["interval"] for s in specs)
    if duration > MAX_DURATION_S:
        raise InvalidInput(f"the batch would take {duration:.1f} s, at most {MAX_DURATION_S:.0f}")
    return {"nonce": nonce, "packets": specs}


def parse_spec(index, raw):
    where = f"packets[{index}]"
    if not isinstance(raw, dict):
        raise InvalidInput(f"{where} must be an object")
    kind = raw.get("kind")
    if kind not in KINDS:
        raise InvalidInput(f"{where}.kind {kind!r} must be one of {', '.join(sorted(KINDS))}")
    link = raw.get("link")
    if link is not None and (not isinstance(link, str) or not re.match(r"^[A-Za-z0-9_.-]{1,15}$", link)):
        raise InvalidInput(f"{where}.link {link!r} must be an interface name")
    dst = parse_address(raw.get("dst"), f"{where}.dst", link)
    src = None if raw.get("src") is None else parse_address(raw.get("src"), f"{where}.src", link)
    if src is not None and src.version != dst.version:
        raise InvalidInput(f"{where}: src {src} and dst {dst} are of different families")
    spec = {
        "kind": kind,
        "dst": dst,
        "src": src,
        "count": parse_int(raw.get("count", 1), f"{where}.count", 1, MAX_PACKETS),
        "interval": parse_int(raw.get("intervalMs", 0), f"{where}.intervalMs", 0, 10000) / 1000,
        "sport": None,
        "dport": 53 if kind == "dns" else None,
        "protocol": FIXED_PROTOCOL.get(kind, 1 if dst.version == 4 else 58),
        "link": link,
        "icmpType": None,
        "hopLimit": parse_int(raw.get("hopLimit", 64), f"{where}.hopLimit", 1, 255),
    }
    if raw.get("icmpType") is not None:
        if kind != "icmp":
            raise InvalidInput(f"{where}.icmpType needs kind icmp")
        spec["icmpType"] = parse_int(raw["icmpType"], f"{where}.icmpType", 0, 255)
        if dst.version == 6 and spec["icmpType"] in ND_TYPES and raw.get("hopLimit") is None:
            spec["hopLimit"] = 255  # RFC 4861: a receiver drops ND with any other hop limit
    if kind in PORTED or kind == "dns":
        if raw.get("sport") is not None:
            spec["sport"] = parse_int(raw["sport"], f"{where}.sport", 1, 65535)
        if raw.get("dport") is not None or kind != "dns":
            spec["dport"] = parse_int(raw.get("dport"), f"{where}.dport", 1, 65535)
    spec["fragment"] = raw.get("fragment")
    if spec["fragment"] is not None:
        if spec["fragment"] not in FRAGMENT_MODES:
            raise InvalidInput(f"{where}.fragment {spec['fragment']!r} must be all or non-first")
        size = parse_int(raw.get("fragmentSize", DEFAULT_FRAGMENT_SIZE), f"{where}.fragmentSize",
                         64, 1400)
        if size % 8:
            raise InvalidInput(f"{where}.fragmentSize {size} must be a multiple of 8")
        spec["fragmentSize"] = size
        spec["length"] = parse_int(raw.get("length", 3 * size), f"{where}.length", size + 1, 60000)
    if kind == "ip":
        spec["protocol"] = parse_int(raw.get("protocol"), f"{where}.protocol", 0, 255)
        if dst.version == 6 and spec["protocol"] in IPV6_EXTENSION_HEADERS:
            raise InvalidInput(f"{where}.protocol {spec['protocol']} is an IPv6 extension header")
    return spec


def parse_address(value, where, link=None):
    if not isinstance(value, str):
        raise InvalidInput(f"{where} must be an IP address string")
    try:
        address = ipaddress.ip_address(value)
    except ValueError:
        raise InvalidInput(f"{where} {value!r} is not an IP address") from None
    if address.is_unspecified:
        raise InvalidInput(f"{where} {value!r} must not be unspecified")
    # IPv4 link-local unicast (169.254.0.0/16, a cloud's metadata address) is routed like any
    # other address; IPv6 link-local needs the interface that scopes it.
    scoped = address.is_multicast or (address.version == 6 and address.is_link_local)
    if link is None and scoped:
        raise InvalidInput(
            f"{where} {value!r} is link-local or multicast: give the interface to send by (link)")
    if link is not None and address.version == 4 and (address.is_link_local or address.is_multicast):
        raise InvalidInput(f"{where} {value!r}: link-scoped sending is for IPv6 only")
    return address


def parse_int(value, where, low, high):
    if not isinstance(value, int) or isinstance(value, bool) or not low <= value <= high:
        raise InvalidInput(f"{where} {value!r} must be an integer from {low} to {high}")
    return value


def send_spec(nonce, spec, sockets):
    sent, failed, error = 0, 0, None
    try:
        src = spec["src"] or pick_source(spec["dst"])
        scope = 0 if spec["link"] is None else socket.if_nametoindex(spec["link"])
        sock = raw_socket(src, sockets, scope)
    except OSError as e:
        return {"sent": 0, "failed": spec["count"], "error": describe(e)}
    address = (str(spec["dst"]), 0) if scope == 0 else (str(spec["dst"]), 0, 0, scope)
    for seq in range(spec["count"]):
        if seq > 0 and spec["interval"] > 0:
            time.sleep(spec["interval"])
        try:
            for packet in build_packets(nonce, spec, src, seq):
                sock.sendto(packet, address)
            sent += 1
        except OSError as e:
            failed += 1
            error = error or describe(e)
    return {"sent": sent, "failed": failed, "error": error}


def describe(error):
    return f"{error.strerror or error} (errno {error.errno})"


def pick_source(dst):
    """The source address the kernel would choose for dst (connecting UDP sends nothing)."""
    family = socket.AF_INET if dst.version == 4 else socket.AF_INET6
    with socket.socket(family, socket.SOCK_DGRAM) as probe:
        probe.connect((str(dst), 9))
        return ipaddress.ip_address(probe.getsockname()[0])


def raw_socket(src, sockets, scope=0):
    key = f"{src}%{scope}"
    if key not in sockets:
        if src.version == 4:
            sock = socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_RAW)
            sock.setsockopt(socket.SOL_IP, IP_FREEBIND, 1)
            sock.bind((str(src), 0))
        else:
            sock = socket.socket(socket.AF_INET6, socket.SOCK_RAW, socket.IPPROTO_RAW)
            sock.setsockopt(socket.IPPROTO_IPV6, IPV6_FREEBIND, 1)
            sock.bind((str(src), 0, 0, scope))
        sockets[key] = sock
    return sockets[key]


def build_packets(nonce, spec, src, seq):
    """The datagram, whole or as the fragments the spec asks for."""
    if spec["fragment"] is None:
        return [build_packet(nonce, spec, src, seq)]
    l4 = build_l4(nonce, spec, src, seq)
    size = spec["fragmentSize"]
    pieces = [l4[at:at + size] for at in range(0, len(l4), size)]
    ident = next_fragment_id(lone=spec["fragment"] == "non-first")
    packets = []
    for index, piece in enumerate(pieces):
        if index == 0 and spec["fragment"] == "non-first":
            continue
        more = index < len(pieces) - 1
        packets.append(fragment_header(src, spec["dst"], spec["protocol"], piece, index * size,
                                       more, ident) + piece)
    return packets


_fragment_ids = itertools.count(int.from_bytes(os.urandom(2), "big"))
_fragment_ids_lock = threading.Lock()


def next_fragment_id(lone):
    """A fragment id no other datagram of this process uses (the kernel reassembles by source,
    destination, protocol and id): sequential from a random start, never 0 (with IP_HDRINCL the
    kernel fills a zero IPv4 id in, anew for each fragment: raw(7)). Lone fragments take the
    upper half of the ids and whole datagrams the lower, so that no lone fragment, not even one
    still held from an earlier run, can ever complete another datagram's first fragment."""
    with _fragment_ids_lock:
        n = next(_fragment_ids)
    return 0x8000 + n % 0x7FFF if lone else 1 + n % 0x7FFF


def fragment_header(src, dst, protocol, piece, offset, more, ident):
    """An IP header for one fragment: offset in bytes (a multiple of 8), MF when more follow."""
    if src.version == 4:
        flags = (0x2000 if more else 0) | (offset // 8)
        header = struct.pack(
            "!BBHHHBBH4s4s", 0x45, 0, 20 + len(piece), ident, flags, 64, protocol, 0,
            src.packed, dst.packed,
        )
        return header[:10] + struct.pack("!H", checksum(header)) + header[12:]
    # RFC 8200 §4.5: the Fragment header, next header 44 in the fixed header.
    fragment = struct.pack("!BBHI", protocol, 0, offset | (1 if more else 0), ident)
    return struct.pack("!IHBB16s16s", 6 << 28, 8 + len(piece), 44, 64, src.packed,
                       dst.packed) + fragment


def build_packet(nonce, spec, src, seq):
    return with_ip_header(src, spec["dst"], spec["protocol"], seq, build_l4(nonce, spec, src, seq),
                          spec["hopLimit"])


def build_l4(nonce, spec, src, seq):
    kind, dst = spec["kind"], spec["dst"]
    payload = f"egressguard {nonce} {kind} {seq}\n".encode()
    if spec["fragment"] is not None:
        # The nonce line again and again, so that every fragment carries a whole one.
        payload = (payload * (spec["length"] // len(payload) + 1))[:spec["length"]]
    sport = spec["sport"] or RAW_SOURCE_PORTS[0] + seq % (RAW_SOURCE_PORTS[1] - RAW_SOURCE_PORTS[0])
    if kind == "tcp":
        l4 = tcp_syn(src, dst, sport, spec["dport"], seq, payload)
    elif kind == "udp":
        l4 = udp(src, dst, sport, spec["dport"], payload)
    elif kind == "dns":
        l4 = udp(src, dst, sport, spec["dport"], dns_query(nonce, seq))
    elif kind == "icmp":
        l4 = icmp_message(src, dst, seq, payload, spec["icmpType"])
    elif kind == "gre":
        l4 = struct.pack("!HH", 0, GRE_PROTOCOL_TYPE) + payload
    elif kind == "esp":
        l4 = struct.pack("!II", ESP_SPI, seq + 1) + payload
    elif kind == "sctp":
        l4 = sctp_init(sport, spec["dport"], seq, payload)
    else:
        l4 = payload
    return l4


def with_ip_header(src, dst, protocol, seq, l4, hop_limit=64):
    length = len(l4)
    if src.version == 4:
        header = struct.pack(
            "!BBHHHBBH4s4s", 0x45, 0, 20 + length, seq & 0xFFFF, 0, hop_limit, protocol, 0,
            src.packed, dst.packed,
        )
        return header[:10] + struct.pack("!H", checksum(header)) + header[12:] + l4
    return struct.pack("!IHBB16s16s", 6 << 28, length, protocol, hop_limit, src.packed,
                       dst.packed) + l4


def pseudo_header(src, dst, protocol, length):
    if src.version == 4:
        return struct.pack("!4s4sBBH", src.packed, dst.packed, 0, protocol, length)
    return struct.pack("!16s16sI3xB", src.packed, dst.packed, length, protocol)


def with_checksum(segment, offset, pseudo=b""):
    value = checksum(pseudo + segment)
    return segment[:offset] + struct.pack("!H", value) + segment[offset + 2:]


def tcp_syn(src, dst, sport, dport, seq, payload):
    segment = struct.pack("!HHIIBBHHH", sport, dport, 0x45470000 + seq, 0, 5 << 4, 0x02, 64240,
                          0, 0) + payload
    return with_checksum(segment, 16, pseudo_header(src, dst, 6, len(segment)))


def udp(src, dst, sport, dport, payload):
    datagram = struct.pack("!HHHH", sport, dport, 8 + len(payload), 0) + payload
    result = with_checksum(datagram, 6, pseudo_header(src, dst, 17, len(datagram)))
    if result[6:8] == b"\x00\x00":  # 0 means "no checksum" in UDP (RFC 768)
        result = result[:6] + b"\xff\xff" + result[8:]
    return result


def icmp_message(src, dst, seq, payload, icmp_type=None):
    """An echo request, or a message of the given type (RFC 4861 layouts for ND types). The echo
    sequence field is 16 bits: a stream at 150 rounds/s passes 65,535 after about 7 minutes."""
    if src.version == 4:
        kind = 8 if icmp_type is None else icmp_type
        return with_checksum(struct.pack("!BBHHH", kind, 0, 0, os.getpid() & 0xFFFF, seq & 0xFFFF) + payload, 2)
    kind = 128 if icmp_type is None else icmp_type
    if kind == 133:  # router solicitation: reserved
        message = struct.pack("!BBHI", kind, 0, 0, 0)
    elif kind in (135, 136):  # neighbour solicitation / advertisement: flags, target
        message = struct.pack("!BBHI16s", kind, 0, 0, 0, dst.packed)
    else:
        message = struct.pack("!BBHHH", kind, 0, 0, os.getpid() & 0xFFFF, seq & 0xFFFF) + payload
    return with_checksum(message, 2, pseudo_header(src, dst, 58, len(message)))


def dns_query(nonce, seq):
    labels = [f"{nonce}-{seq}", "egressguard", "test"]  # .test is reserved (RFC 6761)
    name = b"".join(bytes([len(l)]) + l.encode() for l in labels) + b"\x00"
    return struct.pack("!HHHHHH", seq & 0xFFFF, 0x0100, 1, 0, 0, 0) + name + struct.pack("!HH", 1, 1)


def sctp_init(sport, dport, seq, payload):
    payload += b" " * (-len(payload) % 4)
    parameter = struct.pack("!HH", SCTP_NONCE_PARAMETER, 4 + len(payload)) + payload
    chunk = struct.pack("!BBHIIHHI", 1, 0, 20 + len(parameter), 0x45470000 + seq + 1, 65535, 1, 1,
                        seq + 1) + parameter
    packet = struct.pack("!HHII", sport, dport, 0, 0) + chunk
    # The CRC32c goes on the wire least significant byte first (RFC 9260 appendix A).
    return packet[:8] + struct.pack("<I", crc32c(packet)) + packet[12:]


def checksum(data):
    if len(data) % 2:
        data += b"\x00"
    total = sum(struct.unpack(f"!{len(data) // 2}H", data))
    while total >> 16:
        total = (total & 0xFFFF) + (total >> 16)
    return ~total & 0xFFFF


CRC32C_TABLE = []
for _byte in range(256):
    _crc = _byte
    for _ in range(8):
        _crc = (_crc >> 1) ^ 0x82F63B78 if _crc & 1 else _crc >> 1
    CRC32C_TABLE.append(_crc)


def crc32c(data):
    crc = 0xFFFFFFFF
    for byte in data:
        crc = CRC32C_TABLE[(crc ^ byte) & 0xFF] ^ (crc >> 8)
    return crc ^ 0xFFFFFFFF


if __name__ == "__main__":
    sys.exit(main())
