"""The PROXY protocol (HAProxy's, versions 1 and 2), as LavinMQ reads it:
a load balancer in front of the broker says who the client is, so that the
broker's per-address connection limit, login back-off and loopback-only
users judge the client, not the balancer.

On a listener with `[amqp] tcp_proxy_protocol` (and on every UNIX socket,
as LavinMQ) the first bytes of a connection may be a PROXY header; without
one the connection goes on as it is. A header from an address outside
`proxy_protocol_trusted_sources` (an IP or CIDR list; empty: everyone, as
LavinMQ, with a warning at start) is read and ignored. The header is
consumed and nothing after it: the bytes are peeked first, so the client's
own protocol starts at its first byte. Reading it is bounded in time (the
handshake timeout) and size (v1: 107 bytes, v2: 16 + 2,048)."""
import asyncio
import ipaddress
import socket
import struct

V1_PREFIX = b"PROXY"
V1_MAX = 107                            # the spec's longest v1 line, CRLF included
V2_SIGNATURE = b"\r\n\r\n\x00\r\nQUIT\n"
V2_MAX_BODY = 2048                      # addresses and TLVs; AWS and GCP send a few hundred bytes
PEEK_WAIT = 0.005                       # s between peeks while a header is still incomplete


class ProxyError(Exception):
    """A PROXY header that is not one: the connection is closed."""


def parse_trusted(text):
    """LavinMQ's proxy_protocol_trusted_sources: "10.0.0.0/8, 192.168.1.4,
    ::1" -> networks; a bad entry raises ValueError naming it."""
    out = []
    for item in (text or "").split(","):
        item = item.strip()
        if not item:
            continue
        try:
            out.append(ipaddress.ip_network(item, strict=False))
        except ValueError as exc:
            raise ValueError(f"invalid IP/CIDR '{item}': {exc}") from None
    return out


def trusted(networks, host):
    """Everyone when no network is listed (LavinMQ's rule)."""
    if not networks:
        return True
    try:
        addr = ipaddress.ip_address(host)
    except ValueError:
        return False
    if getattr(addr, "ipv4_mapped", None) is not None:
        addr = addr.ipv4_mapped
    return any(addr in n for n in networks)


def _prefix_of(data, signature):
    n = min(len(data), len(signature))
    return n > 0 and data[:n] == signature[:n]


def parse(data):
    """-> (length of the header, (host, port) of the client or None for a
    LOCAL/UNKNOWN header), or None when data is not (yet) a whole header;
    raises ProxyError for a header that is malformed or too long. data must
    start with a PROXY prefix (see starts_header)."""
    if _prefix_of(data, V1_PREFIX):
        end = data.find(b"\r\n", 0, V1_MAX)
        if end < 0:
            if len(data) >= V1_MAX:
                raise ProxyError("PROXY v1 header longer than 107 bytes")
            return None
        return end + 2, _v1(data[:end])
    if len(data) < 16:
        return None
    if data[:12] != V2_SIGNATURE:
        raise ProxyError("bad PROXY v2 signature")
    ver_cmd, family, length = data[12], data[13], struct.unpack_from(">H", data, 14)[0]
    if ver_cmd >> 4 != 2 or ver_cmd & 0x0F not in (0, 1):
        raise ProxyError(f"bad PROXY v2 version/command {ver_cmd:#x}")
    if length > V2_MAX_BODY:
        raise ProxyError(f"PROXY v2 header of {length} bytes")
    if len(data) < 16 + length:
        return None
    body = data[16:16 + length]
    if ver_cmd & 0x0F == 0:                 # LOCAL: the balancer's own health check
        return 16 + length, None
    # TLVs after the addresses (SSL, AWS's VPC endpoint id, ...) are skipped
    if family == 0x11 and length >= 12:     # TCP over IPv4
        return 16 + length, (socket.inet_ntop(socket.AF_INET, body[0:4]), struct.unpack_from(">H", body, 8)[0])
    if family == 0x21 and length >= 36:     # TCP over IPv6
        return 16 + length, (_unmap(socket.inet_ntop(socket.AF_INET6, body[0:16])),
                             struct.unpack_from(">H", body, 32)[0])
    if family in (0x00, 0x31, 0x32):        # UNSPEC or UNIX: no address to use
        return 16 + length, None
    raise ProxyError(f"PROXY v2 address family {family:#x} is not TCP")


def _unmap(host):
    """::ffff:1.2.3.4 -> 1.2.3.4 (LavinMQ shows the IPv4 address)."""
    addr = ipaddress.ip_address(host)
    mapped = getattr(addr, "ipv4_mapped", None)
    return str(mapped) if mapped is not None else host


def _v1(line):
    parts = line.split(b" ")
    if parts[0] != b"PROXY" or len(parts) < 2:
        raise ProxyError("bad PROXY v1 header")
    if parts[1] == b"UNKNOWN":
        return None
    if parts[1] not in (b"TCP4", b"TCP6") or len(parts) != 6:
        raise ProxyError("bad PROXY v1 header")
    try:
        host = parts[2].decode("ascii")
        ipaddress.ip_address(host)
        port = int(parts[4])
        if not 0 <= port <= 65535:
            raise ValueError(port)
    except (ValueError, UnicodeDecodeError):
        raise ProxyError("bad PROXY v1 address") from None
    return _unmap(host), port


def v1_header(client, local):
    """The PROXY v1 line a cluster's follower sends ahead of a client's
    bytes (lavinmq/clustering/proxy.py): client and local are the (host,
    port) of the client's socket, its peer and the address it reached."""
    src, dst = _unmap(client[0]), _unmap(local[0])
    if (":" in src) != (":" in dst):
        return b"PROXY UNKNOWN\r\n"
    family = "TCP6" if ":" in src else "TCP4"
    return f"PROXY {family} {src} {dst} {client[1]} {local[1]}\r\n".encode("ascii")


def starts_header(data):
    return _prefix_of(data, V1_PREFIX) or _prefix_of(data, V2_SIGNATURE)


async def read_header(loop, sock, timeout):
    """Peek at a new non-blocking socket: -> (host, port), None (no header,
    or a LOCAL/UNKNOWN one), and the header consumed. Raises ProxyError, or
    TimeoutError when the client sends nothing in time, or ConnectionError
    when it leaves."""
    async with asyncio.timeout(timeout):
        while True:
            await _readable(loop, sock)
            data = sock.recv(16 + V2_MAX_BODY, socket.MSG_PEEK)
            if not data:
                raise ConnectionResetError("closed before sending anything")
            if not starts_header(data):
                return None
            got = parse(data)
            if got is not None:
                length, client = got
                if len(sock.recv(length)) != length:        # consumed; it was all there
                    raise ProxyError("PROXY header cut short")
                return client
            # a header split over segments: the rest is on its way
            await asyncio.sleep(PEEK_WAIT)


async def _readable(loop, sock):
    fut = loop.create_future()
    fd = sock.fileno()
    loop.add_reader(fd, lambda: fut.done() or fut.set_result(None))
    try:
        await fut
    finally:
        loop.remove_reader(fd)
