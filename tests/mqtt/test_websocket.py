"""AMQP and MQTT over WebSocket on the HTTP listener (and WSS on HTTPS):
paho-mqtt's websockets transport, @cloudamqp/amqp-client (the browser's
AMQP client) under Node, and raw frames for what a good client never sends."""
import base64
import json
import os
import shutil
import socket
import ssl
import struct
import subprocess

import pytest

from tests.conftest import BrokerProcess, unique
from tests.mqtt.conftest import Client, connect_packet, wait_for
from tests.mqtt.test_basic import api
from tests.security.conftest import certs  # noqa: F401 (a fixture)

HERE = os.path.dirname(os.path.abspath(__file__))
NODE_CACHE = os.environ.get("LAVINMQ_TEST_NODE_CACHE",
                            os.path.join(os.path.expanduser("~"), ".cache", "lavinmq-tests", "node"))


@pytest.mark.parametrize("path,subprotocol", [("/mqtt", True), ("/ws/mqtt", False), ("/anything", True)])
def test_mqtt_over_websocket(mqtt_broker, path, subprotocol):
    """paho sends Sec-WebSocket-Protocol: mqtt, which picks MQTT whatever the
    path; without it the path decides."""
    topic = unique("ws")
    ws = Client(mqtt_broker, unique("ws"), transport="websockets", port=mqtt_broker.http_port, ws_path=path,
                connect=False)
    if not subprotocol:
        # paho always offers "mqtt": strip it to let the path decide
        ws.c.ws_set_options(path=path, headers={"Sec-Websocket-Protocol": "something-else"})
    ws.connect()
    assert ws.rc == 0
    assert ws.subscribe(topic + "/#", 1) == [1]
    tcp = Client(mqtt_broker, unique("tcp"))
    tcp.publish(topic + "/a", b"from tcp", qos=1)
    ws.publish(topic + "/b", b"x" * 200_000, qos=1)        # a frame with a 64-bit length
    assert [(m.topic, len(m.payload)) for m in ws.take(2)] == [(topic + "/a", 8), (topic + "/b", 200_000)]
    conns = api(mqtt_broker, "GET", "/api/connections")
    mine = [c for c in conns if c.get("client_id") == ws.c._client_id.decode()]
    assert mine and mine[0]["protocol"] == "MQTT 3.1.1" and mine[0]["transport"] == "websocket"
    ws.disconnect()
    tcp.disconnect()


def handshake(port, path="/ws", protocols=None, host="127.0.0.1"):
    s = socket.create_connection((host, port), timeout=5)
    key = base64.b64encode(os.urandom(16)).decode()
    req = (f"GET {path} HTTP/1.1\r\nHost: {host}:{port}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
           f"Sec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n")
    if protocols:
        req += f"Sec-WebSocket-Protocol: {protocols}\r\n"
    s.sendall((req + "\r\n").encode())
    head = b""
    while b"\r\n\r\n" not in head:
        head += s.recv(1)
    return s, head.decode()


def frame(opcode, payload, masked=True, fin=True):
    key = os.urandom(4)
    n = len(payload)
    head = bytes((0x80 * fin | opcode,))
    mbit = 0x80 if masked else 0
    if n < 126:
        head += bytes((mbit | n,))
    elif n < 65536:
        head += bytes((mbit | 126,)) + struct.pack(">H", n)
    else:
        head += bytes((mbit | 127,)) + struct.pack(">Q", n)
    if not masked:
        return head + payload
    return head + key + bytes(b ^ key[i & 3] for i, b in enumerate(payload))


def read_frame(s):
    def exactly(n):
        out = b""
        while len(out) < n:
            chunk = s.recv(n - len(out))
            if not chunk:
                raise ConnectionError("closed")
            out += chunk
        return out
    b0, b1 = exactly(2)
    n = b1 & 0x7f
    if n == 126:
        n = struct.unpack(">H", exactly(2))[0]
    elif n == 127:
        n = struct.unpack(">Q", exactly(8))[0]
    return b0 & 0x0f, exactly(n)


def test_amqp_over_websocket_raw(mqtt_broker):
    s, head = handshake(mqtt_broker.http_port, "/ws", "amqp")
    assert head.startswith("HTTP/1.1 101") and "Sec-WebSocket-Protocol: amqp" in head
    # the AMQP header split over two frames, and a ping in between
    s.sendall(frame(2, b"AMQP", fin=False) + frame(9, b"are you there") + frame(0, b"\x00\x00\x09\x01"))
    got = {}
    while len(got) < 2:
        op, payload = read_frame(s)
        got[op] = payload
    assert got[10] == b"are you there"                         # pong
    assert got[2][:1] == b"\x01" and got[2][7:11] == b"\x00\x0a\x00\x0a"   # connection.start
    s.sendall(frame(8, struct.pack(">H", 1000)))
    op, payload = read_frame(s)
    assert (op, payload[:2]) == (8, struct.pack(">H", 1000))
    assert s.recv(10) == b""
    s.close()


@pytest.mark.parametrize("data,code", [
    (frame(2, b"AMQP\x00\x00\x09\x01", masked=False), 1002),     # client frames must be masked
    (frame(1, b"AMQP\x00\x00\x09\x01"), 1003),                    # text
    (frame(0, b"AMQP"), 1002),                                    # continuation of nothing
    (bytes((0x82 | 0x40, 0x80)) + b"\x00" * 4, 1002),             # reserved bit
])
def test_bad_frames_close_the_websocket(mqtt_broker, data, code):
    s, head = handshake(mqtt_broker.http_port, "/mqtt")
    assert head.startswith("HTTP/1.1 101") and "Sec-WebSocket-Protocol" not in head
    s.sendall(data)
    op, payload = read_frame(s)
    assert op == 8 and struct.unpack(">H", payload[:2])[0] == code
    assert s.recv(10) == b""
    s.close()
    # the HTTP listener is fine
    assert api(mqtt_broker, "GET", "/api/overview")["product_name"] == "LavinMQ"


def test_mqtt_over_websocket_in_tiny_pieces(mqtt_broker):
    """Frame headers, masks and packets cut anywhere."""
    topic = unique("bits")
    sub = Client(mqtt_broker, unique("sub"))
    assert sub.subscribe(topic, 0) == [0]
    s, head = handshake(mqtt_broker.http_port, "/", "mqttv3.1, mqtt")
    assert "Sec-WebSocket-Protocol: mqttv3.1" in head
    body = connect_packet(client_id=unique("bits")) + bytes((0x30,)) + bytes((2 + len(topic) + 5,)) + \
        struct.pack(">H", len(topic)) + topic.encode() + b"hello"
    data = b"".join(frame(2 if i == 0 else 0, body[i:i + 3], fin=i + 3 >= len(body)) for i in range(0, len(body), 3))
    for i in range(len(data)):
        s.send(data[i:i + 1])
    op, payload = read_frame(s)
    assert (op, payload) == (2, b"\x20\x02\x00\x00")          # CONNACK
    assert sub.get().payload == b"hello"
    s.close()
    sub.disconnect()


def test_wrong_handshakes_get_http_errors(mqtt_broker):
    s = socket.create_connection(("127.0.0.1", mqtt_broker.http_port), timeout=5)
    s.sendall(b"GET /ws HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
              b"Sec-WebSocket-Key: short\r\nSec-WebSocket-Version: 13\r\n\r\n")
    assert s.recv(100).startswith(b"HTTP/1.1 400")
    s.close()
    s = socket.create_connection(("127.0.0.1", mqtt_broker.http_port), timeout=5)
    s.sendall(b"GET /ws HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
              b"Sec-WebSocket-Key: " + base64.b64encode(os.urandom(16)) + b"\r\nSec-WebSocket-Version: 8\r\n\r\n")
    assert s.recv(100).startswith(b"HTTP/1.1 426")
    s.close()


# -- a JavaScript AMQP client (the one browsers use) under Node --------------------------------

def node_client():
    """The path of amqp-client's package, installed with npm into a cache
    directory on first use. Skipped only when npm cannot reach its registry."""
    if not shutil.which("node") or not shutil.which("npm"):
        pytest.skip("node and npm are not installed (./dev test installs nodejs and npm)")
    modules = os.path.join(NODE_CACHE, "node_modules")
    if not all(os.path.exists(os.path.join(modules, m, "package.json")) for m in ("@cloudamqp/amqp-client", "ws")):
        os.makedirs(NODE_CACHE, exist_ok=True)
        # ws: Node before 22 has no WebSocket of its own
        r = subprocess.run(["npm", "install", "--no-audit", "--no-fund", "--prefix", NODE_CACHE,
                            "@cloudamqp/amqp-client@4", "ws@8"], capture_output=True, text=True, timeout=300)
        if r.returncode != 0:
            if any(w in r.stderr for w in ("ENOTFOUND", "EAI_AGAIN", "ECONNREFUSED", "ETIMEDOUT", "network")):
                pytest.skip(f"npm cannot reach its registry to install @cloudamqp/amqp-client: "
                            f"{r.stderr.strip().splitlines()[-1] if r.stderr.strip() else r.returncode}")
            raise AssertionError(f"npm install @cloudamqp/amqp-client failed:\n{r.stderr}")
    return os.path.join(NODE_CACHE, "node_modules")


def run_js_client(url, prefix, env=None):
    modules = node_client()
    return subprocess.Popen(["node", os.path.join(HERE, "js", "amqp_ws.js"), url, prefix],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "NODE_PATH": modules, **(env or {})})


def js_exchange(broker, js, prefix, tls=None):
    """MQTT -> JS (AMQP over WebSocket) and back."""
    assert js.stdout.readline().strip() == "ready", js.stderr.read()
    mq = Client(broker, unique("mq"), tls=tls, port=broker.mqtts_port if tls else None)
    assert mq.subscribe(f"{prefix}/reply", 1) == [1]
    mq.publish(f"{prefix}/from/mqtt", b"hello browser", qos=1)
    got = json.loads(js.stdout.readline())
    assert got == {"routingKey": f"{prefix}.from.mqtt", "exchange": "amq.topic", "body": "hello browser",
                   "headers": {"x-mqtt-publish-qos": 1}}
    js.stdin.write(f"publish {prefix}.reply hello device\n")
    js.stdin.flush()
    # "published" (the confirm), and its own message back (its queue is bound
    # to PREFIX.#), in either order
    lines = [js.stdout.readline().strip() for _ in range(2)]
    assert "published" in lines
    lines.remove("published")
    assert json.loads(lines[0])["routingKey"] == f"{prefix}.reply"
    m = mq.get()
    assert (m.topic, m.payload, m.qos) == (f"{prefix}/reply", b"hello device", 1)
    conns = api(broker, "GET", "/api/connections")
    names = [c.get("client_properties", {}).get("connection_name") for c in conns]
    assert "lavinmq-test" in names
    js.stdin.write("quit\n")
    js.stdin.flush()
    assert js.stdout.readline().strip() == "closed"
    assert js.wait(10) == 0
    mq.disconnect()


def test_javascript_amqp_client_over_websocket(mqtt_broker):
    prefix = unique("js")
    js = run_js_client(f"ws://127.0.0.1:{mqtt_broker.http_port}/ws/amqp", prefix)
    try:
        js_exchange(mqtt_broker, js, prefix)
    finally:
        if js.poll() is None:
            js.kill()
        js.communicate()


def test_websocket_over_tls(tmp_path, certs):  # noqa: F811
    ini = tmp_path / "lavinmq.ini"
    ini.write_text("")
    b = BrokerProcess(tmp_path / "data", tls=True, mqtt=True,
                      extra_args=["-c", str(ini), "--cert", certs["cert"], "--key", certs["key"]]).start()
    try:
        ctx = ssl.create_default_context(cafile=certs["ca"])
        wss = Client(b, unique("wss"), transport="websockets", port=b.https_port, tls=ctx)
        topic = unique("wss")
        assert wss.subscribe(topic, 1) == [1]
        mqtts = Client(b, unique("mqtts"), port=b.mqtts_port, tls=ssl.create_default_context(cafile=certs["ca"]))
        mqtts.publish(topic, b"over TLS twice", qos=1)
        assert wss.get().payload == b"over TLS twice"
        conns = {c["client_id"]: c for c in api_tls(b, ctx) if "client_id" in c}
        assert conns[wss.c._client_id.decode()]["ssl"] is True
        wss.disconnect()
        mqtts.disconnect()
        prefix = unique("jss")
        js = run_js_client(f"wss://localhost:{b.https_port}/ws", prefix, env={"NODE_EXTRA_CA_CERTS": certs["ca"]})
        try:
            assert js.stdout.readline().strip() == "ready", js.stderr.read()
            js.stdin.write(f"publish {prefix}.x over wss\n")
            js.stdin.flush()
            lines = [js.stdout.readline().strip() for _ in range(2)]
            assert "published" in lines
            lines.remove("published")
            assert json.loads(lines[0])["body"] == "over wss"
            js.stdin.write("quit\n")
            js.stdin.flush()
            assert js.stdout.readline().strip() == "closed"
        finally:
            if js.poll() is None:
                js.kill()
            js.communicate()
    finally:
        assert b.stop() == 0
    b.check_clean()


def api_tls(b, ctx):
    import urllib.request
    req = urllib.request.Request(f"https://127.0.0.1:{b.https_port}/api/connections", headers={
        "Authorization": "Basic " + base64.b64encode(b"guest:guest").decode()})
    with urllib.request.urlopen(req, timeout=10, context=ctx) as r:
        return json.loads(r.read())


def test_websocket_connections_close_with_the_broker(fresh_mqtt_broker):
    b = fresh_mqtt_broker
    ws = Client(b, unique("ws"), transport="websockets", port=b.http_port)
    s, head = handshake(b.http_port, "/ws")
    s.sendall(frame(2, b"AMQP\x00\x00\x09\x01"))
    assert read_frame(s)[0] == 2
    wait_for(lambda: len(api(b, "GET", "/api/connections")) == 1, what="the MQTT connection listed")
    assert b.stop() == 0
    ws.disconnected.get(timeout=5)
    s.close()
    ws.c.loop_stop()
