"""MQTT tests: the real broker with its MQTT listener on a free port, and
real clients (paho-mqtt, Debian's mosquitto clients, raw sockets for what a
well-behaved client never sends)."""
import queue
import socket
import struct
import time

import pytest

from tests.conftest import BrokerProcess

paho = pytest.importorskip("paho.mqtt.client")
from paho.mqtt.enums import CallbackAPIVersion  # noqa: E402


@pytest.fixture(scope="module")
def mqtt_broker(tmp_path_factory):
    b = BrokerProcess(tmp_path_factory.mktemp("mqtt") / "data", mqtt=True).start()
    yield b
    rc = b.stop()
    b.check_clean()
    assert rc == 0, f"broker exited with {rc}:\n{b.log_tail()}"


@pytest.fixture
def fresh_mqtt_broker(tmp_path):
    b = BrokerProcess(tmp_path / "data", mqtt=True).start()
    yield b
    if b.proc.poll() is None:
        b.stop()
    b.check_clean()


def wait_for(cond, timeout=5.0, what="condition"):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if cond():
            return
        time.sleep(0.01)
    raise AssertionError(f"timed out waiting for {what}")


class Client:
    """A paho client on its own network thread; received messages in a queue."""

    def __init__(self, broker, client_id="", clean=True, user="guest", password="guest", will=None,
                 keepalive=60, transport="tcp", port=None, ws_path="/mqtt", connect=True, tls=None):
        self.messages = queue.Queue()
        self.c = paho.Client(CallbackAPIVersion.VERSION2, client_id=client_id, clean_session=clean,
                             transport=transport, reconnect_on_failure=False)
        if transport == "websockets":
            self.c.ws_set_options(path=ws_path)
        if tls is not None:
            self.c.tls_set_context(tls)
        if user is not None:
            self.c.username_pw_set(user, password)
        if will is not None:
            self.c.will_set(*will)
        self.c.on_message = lambda c, u, m: self.messages.put(m)
        self.connack = queue.Queue()
        self.c.on_connect = lambda c, u, flags, rc, props: self.connack.put((flags, rc))
        self.disconnected = queue.Queue()
        self.c.on_disconnect = lambda c, u, flags, rc, props: self.disconnected.put(rc)
        self.broker = broker
        self.port = port or broker.mqtt_port
        self.keepalive = keepalive
        if connect:
            self.connect()

    def connect(self):
        self.c.connect("127.0.0.1", self.port, keepalive=self.keepalive)
        self.c.loop_start()
        self.flags, self.rc = self.connack.get(timeout=10)
        return self

    @property
    def session_present(self):
        return self.flags.session_present

    def subscribe(self, *args, **kw):
        granted = queue.Queue()
        self.c.on_subscribe = lambda c, u, mid, codes, props: granted.put(codes)
        self.c.subscribe(*args, **kw)
        return [int(code.value) if hasattr(code, "value") else int(code) for code in granted.get(timeout=10)]

    def unsubscribe(self, topic):
        done = queue.Queue()
        self.c.on_unsubscribe = lambda c, u, mid, codes, props: done.put(mid)
        self.c.unsubscribe(topic)
        done.get(timeout=10)

    def publish(self, topic, payload, qos=0, retain=False, wait=True):
        info = self.c.publish(topic, payload, qos=qos, retain=retain)
        if wait and qos:
            info.wait_for_publish(10)
        return info

    def get(self, timeout=5):
        return self.messages.get(timeout=timeout)

    def take(self, n, timeout=10):
        return [self.get(timeout) for _ in range(n)]

    def nothing(self, wait=0.3):
        try:
            m = self.messages.get(timeout=wait)
        except queue.Empty:
            return True
        raise AssertionError(f"unexpected message {m.topic} {m.payload!r}")

    def disconnect(self):
        self.c.disconnect()
        self.c.loop_stop()

    def drop(self):
        """Go away without DISCONNECT (the will is published)."""
        self.c.loop_stop()
        self.c.socket().close()


# -- raw MQTT, for what paho would never send -------------------------------------

def varint(n):
    out = bytearray()
    while True:
        b = n & 0x7f
        n >>= 7
        out.append(b | (0x80 if n else 0))
        if not n:
            return bytes(out)


def packet(first, body):
    return bytes((first,)) + varint(len(body)) + body


def mstr(s):
    b = s.encode() if isinstance(s, str) else s
    return struct.pack(">H", len(b)) + b


def connect_packet(client_id="raw", user="guest", password="guest", clean=True, keepalive=60, level=4,
                   name="MQTT", will=None):
    flags = (0x02 if clean else 0) | (0x80 if user is not None else 0) | (0x40 if password is not None else 0)
    payload = mstr(client_id)
    if will is not None:
        topic, body, qos, retain = will
        flags |= 0x04 | (qos << 3) | (0x20 if retain else 0)
        payload += mstr(topic) + mstr(body)
    if user is not None:
        payload += mstr(user)
    if password is not None:
        payload += mstr(password)
    return packet(0x10, mstr(name) + bytes((level, flags)) + struct.pack(">H", keepalive) + payload)


def publish_packet(topic, body, qos=0, pid=1, retain=False, dup=False):
    vh = mstr(topic) + (struct.pack(">H", pid) if qos else b"")
    return packet(0x30 | (qos << 1) | (1 if retain else 0) | (8 if dup else 0), vh + body)


def subscribe_packet(pid, *filters):
    return packet(0x82, struct.pack(">H", pid) + b"".join(mstr(f) + bytes((q,)) for f, q in filters))


class Raw:
    def __init__(self, broker, port=None):
        self.s = socket.create_connection(("127.0.0.1", port or broker.mqtt_port), timeout=5)
        self.buf = b""

    def send(self, data):
        self.s.sendall(data)

    def read_packet(self, timeout=5):
        self.s.settimeout(timeout)
        while True:
            if len(self.buf) >= 2:
                n, mult, i = 0, 1, 1
                while i < len(self.buf):
                    b = self.buf[i]
                    n += (b & 0x7f) * mult
                    mult *= 128
                    i += 1
                    if not b & 0x80:
                        break
                else:
                    i = None
                if i is not None and len(self.buf) >= i + n:
                    first, body = self.buf[0], self.buf[i:i + n]
                    self.buf = self.buf[i + n:]
                    return first, body
            data = self.s.recv(65536)
            if not data:
                raise ConnectionError("closed by the broker")
            self.buf += data

    def closed(self, timeout=5):
        """True once the broker has closed the connection."""
        self.s.settimeout(timeout)
        try:
            while True:
                data = self.s.recv(65536)
                if not data:
                    self.s.close()
                    return True
        except (ConnectionResetError, BrokenPipeError):
            self.s.close()
            return True
        except socket.timeout:
            return False

    def login(self, **kw):
        self.send(connect_packet(**kw))
        first, body = self.read_packet()
        assert first == 0x20, first
        return body

    def close(self):
        self.s.close()
