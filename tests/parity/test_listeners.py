"""Listeners as LavinMQ's: AMQP and the management API on UNIX sockets
([amqp] / [mgmt] unix_path), and the PROXY protocol (v1 and v2,
tcp_proxy_protocol) so that the address a load balancer names is the one
the loopback rule and the per-address connection limit judge."""
import asyncio
import base64
import http.client
import json
import socket
import struct

import pika
import pytest
from pamqp import commands

from lavinmq import proxy_protocol as pp
from tests.conftest import BrokerProcess, unique
from tests.helpers.rawclient import RawClient
from tests.parity.helpers import api

AUTH = "Basic " + base64.b64encode(b"guest:guest").decode()


class UnixRawClient(RawClient):
    def __init__(self, path, **kw):
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(30)
        self.sock.connect(path)
        self.buf = b""
        self.frame_max = 131072
        self.capabilities = {}
        self.handshake(kw.get("user", "guest"), kw.get("password", "guest"), "/")


class ProxiedClient(RawClient):
    """A raw AMQP client that first sends a PROXY header, as a balancer does."""

    def __init__(self, host, port, header, user, password):
        self.sock = socket.create_connection((host, port), timeout=30)
        self.sock.sendall(header)
        self.buf = b""
        self.frame_max = 131072
        self.capabilities = {}
        self.handshake(user, password, "/")


def v1(src, sport, dst="127.0.0.1", dport=5672):
    fam = "TCP6" if ":" in src else "TCP4"
    return f"PROXY {fam} {src} {dst} {sport} {dport}\r\n".encode()


def v2(src, sport, tlv=b""):
    if ":" in src:
        body = socket.inet_pton(socket.AF_INET6, src) + socket.inet_pton(socket.AF_INET6, "::1") + \
            struct.pack(">HH", sport, 5672)
        fam = 0x21
    else:
        body = socket.inet_aton(src) + socket.inet_aton("127.0.0.1") + struct.pack(">HH", sport, 5672)
        fam = 0x11
    body += tlv
    return pp.V2_SIGNATURE + bytes([0x21, fam]) + struct.pack(">H", len(body)) + body


@pytest.fixture(scope="module")
def proxied(tmp_path_factory):
    d = tmp_path_factory.mktemp("listeners")
    ini = d / "lavinmq.ini"
    ini.write_text(f"[main]\nmax_connections_per_address = 2\n"
                   f"[amqp]\ntcp_proxy_protocol = true\nproxy_protocol_trusted_sources = 127.0.0.0/8, ::1\n"
                   f"unix_path = {d / 'amqp.sock'}\n[mgmt]\nunix_path = {d / 'http.sock'}\n")
    b = BrokerProcess(d / "data", extra_args=["-c", str(ini)]).start()
    b.dir = d
    api(b, "PUT", "/api/users/remote", {"password": "pw", "tags": "management"})
    api(b, "PUT", "/api/permissions/%2F/remote", {"configure": ".*", "write": ".*", "read": ".*"})
    yield b
    b.stop()
    assert not (d / "amqp.sock").exists() and not (d / "http.sock").exists()    # removed at a clean stop
    b.check_clean()


def peers(b):
    return {(c["user"], c["peer_host"], c["peer_port"]) for c in api(b, "GET", "/api/connections")[1]}


def test_amqp_and_http_on_unix_sockets(proxied):
    b = proxied
    # guest may only log in from loopback: a UNIX socket client is local
    c = UnixRawClient(str(b.dir / "amqp.sock"))
    c.send(1, commands.Channel.Open())
    c.expect(commands.Channel.OpenOk)
    assert any(user == "guest" and host == "unix" for user, host, _ in peers(b))
    conn = http.client.HTTPConnection("localhost", timeout=10)
    conn.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    conn.sock.connect(str(b.dir / "http.sock"))
    conn.request("GET", "/api/overview", headers={"Authorization": AUTH})
    resp = conn.getresponse()
    listeners = json.loads(resp.read())["listeners"]
    assert resp.status == 200
    assert {"protocol": "amqp", "path": str(b.dir / "amqp.sock")}.items() <= \
        next(x for x in listeners if x.get("path", "").endswith("amqp.sock")).items()
    conn.close()
    c.sock.close()


def test_proxy_protocol_names_the_client(proxied):
    b = proxied
    # v1, then v2 over IPv4 with a TLV to skip, and v2 over IPv6
    for header, who in ((v1("203.0.113.7", 40001), ("203.0.113.7", 40001)),
                        (v2("203.0.113.8", 40002, tlv=b"\xea\x00\x03abc"), ("203.0.113.8", 40002)),
                        (v2("2001:db8::5", 40003), ("2001:db8::5", 40003))):
        c = ProxiedClient(b.host, b.port, header, "remote", "pw")
        assert ("remote", *who) in peers(b)
        c.sock.close()
    # guest may only log in from loopback: a balancer's client elsewhere is refused
    with pytest.raises(AssertionError, match="Close"):
        ProxiedClient(b.host, b.port, v1("198.51.100.9", 1234), "guest", "guest")
    # a client without a header still connects (LavinMQ's rule)
    conn = pika.BlockingConnection(pika.URLParameters(b.url))
    conn.close()


def test_per_address_limit_counts_the_proxied_address(proxied):
    b = proxied
    held = [ProxiedClient(b.host, b.port, v1("192.0.2.10", 5000 + i), "remote", "pw") for i in range(2)]
    # a third from the same client is closed at once (max_connections_per_address = 2) ...
    s = socket.create_connection((b.host, b.port), timeout=10)
    s.sendall(v1("192.0.2.10", 5002) + b"AMQP\x00\x00\x09\x01")
    try:
        assert s.recv(100) == b""
    except ConnectionResetError:
        pass
    s.close()
    # ... while another client behind the same balancer gets in
    other = ProxiedClient(b.host, b.port, v1("192.0.2.11", 6000), "remote", "pw")
    for c in held + [other]:
        c.sock.close()


def test_malformed_header_is_dropped(proxied):
    b = proxied
    s = socket.create_connection((b.host, b.port), timeout=10)
    s.sendall(b"PROXY TCP4 not-an-address 127.0.0.1 1 2\r\nAMQP\x00\x00\x09\x01")
    try:
        assert s.recv(100) == b""
    except ConnectionResetError:
        pass
    s.close()
    conn = pika.BlockingConnection(pika.URLParameters(b.url))       # the broker is fine
    conn.close()


def test_header_parsing():
    assert pp.parse(v1("203.0.113.7", 1)) == (len(v1("203.0.113.7", 1)), ("203.0.113.7", 1))
    assert pp.parse(b"PROXY UNKNOWN\r\nAMQP") == (15, None)
    whole = v2("10.1.2.3", 99)
    assert pp.parse(whole + b"AMQP") == (len(whole), ("10.1.2.3", 99))
    assert pp.parse(whole[:10]) is None and pp.parse(v1("1.2.3.4", 5)[:9]) is None     # not all there yet
    local = pp.V2_SIGNATURE + bytes([0x20, 0x00]) + b"\x00\x00"
    assert pp.parse(local) == (16, None)
    for bad in (b"PROXY TCP4 1.2.3.4\r\n", b"PROXY " + b"x" * 120, pp.V2_SIGNATURE + bytes([0x31, 0x11, 0, 0]),
                pp.V2_SIGNATURE + bytes([0x21, 0x11, 0xff, 0xff])):
        with pytest.raises(pp.ProxyError):
            pp.parse(bad)
    nets = pp.parse_trusted("10.0.0.0/8, 192.168.1.4")
    assert pp.trusted(nets, "10.9.9.9") and pp.trusted(nets, "::ffff:192.168.1.4") and not pp.trusted(nets, "1.1.1.1")
    assert pp.trusted([], "1.1.1.1")
    with pytest.raises(ValueError, match="bogus"):
        pp.parse_trusted("10.0.0.0/8, bogus")


def test_a_followers_header_reads_back():
    """What a cluster's follower sends ahead of a piped client
    (lavinmq/clustering/proxy.py) parses to that client."""
    h = pp.v1_header(("203.0.113.7", 40000), ("10.0.0.2", 5672))
    assert h == b"PROXY TCP4 203.0.113.7 10.0.0.2 40000 5672\r\n"
    assert pp.parse(h + b"AMQP") == (len(h), ("203.0.113.7", 40000))
    h6 = pp.v1_header(("2001:db8::7", 1, 0, 0), ("2001:db8::2", 1883, 0, 0))
    assert pp.parse(h6) == (len(h6), ("2001:db8::7", 1))
    assert pp.v1_header(("::ffff:1.2.3.4", 9, 0, 0), ("10.0.0.2", 5672)) == b"PROXY TCP4 1.2.3.4 10.0.0.2 9 5672\r\n"
    assert pp.parse(pp.v1_header(("2001:db8::7", 1, 0, 0), ("10.0.0.2", 5672))) == (15, None)


def test_header_split_over_segments():
    async def run():
        a, b = socket.socketpair()
        a.setblocking(False)
        header = v2("10.0.0.1", 7)
        loop = asyncio.get_running_loop()
        task = loop.create_task(pp.read_header(loop, a, 5))
        b.sendall(header[:7])
        await asyncio.sleep(0.05)
        b.sendall(header[7:] + b"AMQP")
        assert await task == ("10.0.0.1", 7)
        assert a.recv(10) == b"AMQP"            # the client's own bytes are left
        a.close()
        b.close()
    asyncio.run(run())


def test_untrusted_source_is_ignored(tmp_path):
    ini = tmp_path / "lavinmq.ini"
    ini.write_text("[amqp]\ntcp_proxy_protocol = 1\nproxy_protocol_trusted_sources = 10.0.0.0/8\n")
    b = BrokerProcess(tmp_path / "data", extra_args=["-c", str(ini)]).start()
    try:
        # from 127.0.0.1, not a trusted balancer: the header is read and ignored
        c = ProxiedClient(b.host, b.port, v1("198.51.100.1", 999), "guest", "guest")
        assert any(host == "127.0.0.1" for _, host, _ in peers(b))
        c.sock.close()
        assert "untrusted source 127.0.0.1" in b.log_text()
    finally:
        b.stop()
