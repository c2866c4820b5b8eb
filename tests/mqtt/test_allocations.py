"""DESIGN.md's rule on MQTT's path: no Python object per message. The
broker runs with the allocation counter (tests/helpers/alloc_broker.py);
QoS 0 and QoS 1 messages go publisher -> amq.topic -> session queue ->
subscriber (PUBACKs both ways), over TCP and over WebSocket, and the
broker's Python allocations while they flow are counted."""
import base64
import os
import socket
import struct
import subprocess
import sys
import threading

import pytest

from lavinmq.perf._mqttscan import PublishBatch, Scanner
from tests.conftest import ROOT, free_port
from tests.mqtt.conftest import connect_packet, subscribe_packet

MESSAGES = 200_000
BATCH = 1000


class Conn:
    """A blocking MQTT client over TCP or WebSocket (zero mask key)."""

    def __init__(self, port, client_id, ws=False):
        self.s = socket.create_connection(("127.0.0.1", port), timeout=30)
        self.ws = ws
        self.pending = b""
        self.scanner = Scanner()
        if ws:
            key = base64.b64encode(os.urandom(16)).decode()
            self.s.sendall((f"GET /mqtt HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
                            f"Sec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n\r\n").encode())
            head = b""
            while b"\r\n\r\n" not in head:
                head += self.s.recv(1)
            assert head.startswith(b"HTTP/1.1 101"), head
        self.send(connect_packet(client_id=client_id))
        while not self.others:
            self.read()
        assert self.others.pop(0) == (0x20, b"\x00\x00")

    others = None

    def send(self, data):
        if self.ws:
            n = len(data)
            head = struct.pack(">BBQ", 0x82, 0xff, n) if n > 65535 else struct.pack(">BBH", 0x82, 0xfe, n)
            data = head + b"\x00\x00\x00\x00" + data
        self.s.sendall(data)

    def read(self):
        data = self.s.recv(1 << 20)
        assert data, "closed by the broker"
        if self.ws:
            self.pending += data
            out, pos = [], 0
            while len(self.pending) - pos >= 2:
                n, off = self.pending[pos + 1] & 0x7f, 2
                if n == 126:
                    n, off = struct.unpack_from(">H", self.pending, pos + 2)[0], 4
                elif n == 127:
                    n, off = struct.unpack_from(">Q", self.pending, pos + 2)[0], 10
                if len(self.pending) - pos < off + n:
                    break
                out.append(self.pending[pos + off:pos + off + n])
                pos += off + n
            self.pending = self.pending[pos:]
            data = b"".join(out)
        if self.others is None:
            self.others = []
        self.others += self.scanner.feed(data)
        replies = self.scanner.take_replies()
        if replies:
            self.send(replies)


def flow(port, topic, qos, count, ws):
    sub = Conn(port, f"sub-{topic}", ws)
    sub.send(subscribe_packet(1, (topic, qos)))
    while not sub.others:
        sub.read()
    assert sub.others.pop(0) == (0x90, b"\x00\x01" + bytes((qos,)))
    done = []

    def receive():
        while sub.scanner.publishes < count:
            sub.read()
        done.append(sub.scanner.publishes)

    t = threading.Thread(target=receive)
    t.start()
    pub = Conn(port, f"pub-{topic}", ws)
    batch = PublishBatch(topic.encode(), b"0123456789abcdef", qos)
    for i in range(count // BATCH):
        pub.send(batch.take(BATCH))
        # QoS 1: at most 20 batches unacknowledged
        while qos and (i + 1) * BATCH - pub.scanner.acks > 20 * BATCH:
            pub.read()
    while qos and pub.scanner.acks < count:
        pub.read()
    t.join(timeout=300)
    assert done == [count]
    pub.s.close()
    sub.s.close()


@pytest.mark.parametrize("qos,ws", [(0, False), (1, False), (1, True)])
def test_mqtt_allocates_nothing_per_message(tmp_path, qos, ws):
    amqp, mqtt, http = free_port(), free_port(), free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "tests.helpers.alloc_broker", "-D", str(tmp_path), "-p", str(amqp),
         "--http-port", str(http), "--metrics-http-port", "0", "--mqtt-port", str(mqtt), "-l", "warning"],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, cwd=ROOT)
    port = http if ws else mqtt
    try:
        assert proc.stdout.readline().strip() == "ready"

        def count():
            proc.stdin.write("count\n")
            proc.stdin.flush()
            return int(proc.stdout.readline())

        flow(port, "warm", qos, 20_000, ws)         # caches, buffers, segments
        before = count()
        flow(port, "measured", qos, MESSAGES, ws)
        allocations = count() - before
        per_message = allocations / MESSAGES
        print(f"\n{MESSAGES} MQTT QoS {qos} messages{' over WebSocket' if ws else ''}: {allocations} object "
              f"allocations ({per_message:.4f} per message)")
        assert per_message < 0.05, f"{per_message:.3f} Python objects allocated per message"
    finally:
        proc.stdin.write("quit\n")
        proc.stdin.flush()
        proc.wait(timeout=30)
