"""MQTT's listeners as LavinMQ's: `[mqtt] unix_path` (--mqtt-unix-path),
whose clients are local (loopback for loopback-only users) unless a PROXY
header names another, and the PROXY protocol on the plain MQTT port when
`[amqp] tcp_proxy_protocol` is on (LavinMQ's AMQP and MQTT listeners share
one accept path)."""
import queue
import socket
import struct

import pytest

from tests.conftest import BrokerProcess
from tests.parity.helpers import api
from tests.parity.test_listeners import v1, v2

paho = pytest.importorskip("paho.mqtt.client")
from paho.mqtt.enums import CallbackAPIVersion  # noqa: E402


@pytest.fixture(scope="module")
def mqtt_proxied(tmp_path_factory):
    d = tmp_path_factory.mktemp("mqtt-listeners")
    ini = d / "lavinmq.ini"
    ini.write_text("[amqp]\ntcp_proxy_protocol = true\nproxy_protocol_trusted_sources = 127.0.0.0/8\n"
                   f"[mqtt]\nunix_path = {d / 'mqtt.sock'}\n")
    b = BrokerProcess(d / "data", mqtt=True, extra_args=["-c", str(ini)]).start()
    b.dir = d
    api(b, "PUT", "/api/users/remote", {"password": "pw", "tags": ""})
    api(b, "PUT", "/api/permissions/%2F/remote", {"configure": ".*", "write": ".*", "read": ".*"})
    yield b
    b.stop()
    assert not (d / "mqtt.sock").exists()       # removed at a clean stop
    b.check_clean()


def mqtt_string(s):
    return struct.pack(">H", len(s)) + s


def connect_packet(client_id, user, password):
    body = mqtt_string(b"MQTT") + bytes([4, 0xC2]) + struct.pack(">H", 60) + \
        mqtt_string(client_id) + mqtt_string(user) + mqtt_string(password)
    return bytes([0x10]) + remaining_length(len(body)) + body


def remaining_length(n):
    """MQTT's variable-length integer: 7 bits a byte, the high bit 'more'."""
    out = bytearray()
    while True:
        n, digit = n >> 7, n & 0x7F
        out.append(digit | (0x80 if n else 0))
        if not n:
            return bytes(out)


def raw_connect(sock, client_id, user, password, header=b""):
    """CONNECT (after a PROXY header if given); the CONNACK's return code."""
    sock.sendall(header + connect_packet(client_id, user, password))
    ack = b""
    while len(ack) < 4:
        chunk = sock.recv(4 - len(ack))
        if not chunk:
            break
        ack += chunk
    assert ack[:3] == b"\x20\x02\x00", ack
    return ack[3]


def clients(b):
    return {(c["user"], c["peer_host"], c["peer_port"]) for c in api(b, "GET", "/api/connections")[1]
            if c.get("protocol", "").startswith("MQTT")}


def test_mqtt_on_a_unix_socket(mqtt_proxied):
    b = mqtt_proxied
    path = str(b.dir / "mqtt.sock")
    got = queue.Queue()
    c = paho.Client(CallbackAPIVersion.VERSION2, client_id="over-unix", transport="unix",
                    reconnect_on_failure=False)
    # guest may only log in from loopback: a local socket's client is local
    c.username_pw_set("guest", "guest")
    acks = queue.Queue()
    c.on_connect = lambda cl, u, flags, rc, props: acks.put(rc)
    c.on_message = lambda cl, u, m: got.put(m)
    c.connect(path)
    c.loop_start()
    try:
        assert acks.get(timeout=10) == 0
        subscribed = queue.Queue()
        c.on_subscribe = lambda cl, u, mid, codes, props: subscribed.put(codes)
        c.subscribe("unix/t", qos=1)
        subscribed.get(timeout=10)
        c.publish("unix/t", b"through the socket", qos=1).wait_for_publish(10)
        assert got.get(timeout=10).payload == b"through the socket"
        assert any(user == "guest" and host == "unix" for user, host, _ in clients(b))
        _, listeners = api(b, "GET", "/api/overview")
        assert {"protocol": "mqtt", "path": path} in [{k: x[k] for k in ("protocol", "path") if k in x}
                                                      for x in listeners["listeners"]]
    finally:
        c.disconnect()
        c.loop_stop()


def test_proxy_header_on_the_unix_socket_names_the_client(mqtt_proxied):
    b = mqtt_proxied
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(10)
    s.connect(str(b.dir / "mqtt.sock"))
    # named elsewhere by its header, guest is no longer local: refused (5, not authorized)
    assert raw_connect(s, b"unix-guest", b"guest", b"guest", v1("198.51.100.4", 2000)) in (4, 5)
    s.close()
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(10)
    s.connect(str(b.dir / "mqtt.sock"))
    assert raw_connect(s, b"unix-remote", b"remote", b"pw", v2("198.51.100.5", 2001)) == 0
    assert ("remote", "198.51.100.5", 2001) in clients(b)
    s.close()


def test_proxy_protocol_on_the_mqtt_port(mqtt_proxied):
    b = mqtt_proxied
    for cid, header, who in ((b"px-v1", v1("203.0.113.7", 40001, dport=1883), ("203.0.113.7", 40001)),
                             (b"px-v2", v2("2001:db8::7", 40002), ("2001:db8::7", 40002))):
        s = socket.create_connection(("127.0.0.1", b.mqtt_port), timeout=10)
        assert raw_connect(s, cid, b"remote", b"pw", header) == 0
        assert ("remote", *who) in clients(b)
        s.close()
    # a loopback-only user behind the balancer is judged by its client's address
    s = socket.create_connection(("127.0.0.1", b.mqtt_port), timeout=10)
    assert raw_connect(s, b"px-guest", b"guest", b"guest", v1("198.51.100.9", 1234)) in (4, 5)
    s.close()
    # a client without a header still connects (LavinMQ's rule), from its own address
    s = socket.create_connection(("127.0.0.1", b.mqtt_port), timeout=10)
    assert raw_connect(s, b"px-none", b"guest", b"guest") == 0
    assert ("guest", "127.0.0.1", s.getsockname()[1]) in clients(b)
    s.close()
