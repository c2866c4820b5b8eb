"""DESIGN.md's one rule of the hot path: no Python object per message.
Push 1M messages through publish -> consume -> ack and count the broker's
Python object allocations (every PyObject_Malloc call) while they flow."""
import os
import socket
import subprocess
import sys
import threading
import time

from pamqp import commands

from tests.helpers.rawclient import RawClient, ack_frame, publish_frames

MESSAGES = 1_000_000
BATCH = 1000


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def consume(port, queue, count, result):
    c = RawClient("127.0.0.1", port)
    c.open_channel(1)
    c.send(1, commands.Basic.Qos(prefetch_count=10000))
    c.expect(commands.Basic.QosOk)
    c.send(1, commands.Basic.Consume(queue=queue))
    c.expect(commands.Basic.ConsumeOk)
    delivered = acked = 0
    buf = c.buf
    sock = c.sock
    while delivered < count:
        data = sock.recv(1 << 20)
        assert data, "broker closed the consumer's connection"
        buf += data
        pos = 0
        n = len(buf)
        while n - pos >= 7:
            size = int.from_bytes(buf[pos + 3:pos + 7], "big")
            if n - pos < size + 8:
                break
            if buf[pos] == 3:
                delivered += 1
            pos += size + 8
        buf = buf[pos:]
        if delivered - acked >= 1000 or delivered == count:
            sock.sendall(ack_frame(1, delivered))
            acked = delivered
    result.append(delivered)
    c.close()


def run_messages(port, queue, count, consume_from=None):
    result = []
    t = threading.Thread(target=consume, args=(port, consume_from or queue, count, result))
    t.start()
    p = RawClient("127.0.0.1", port)
    p.open_channel(1)
    batch = publish_frames(1, "", queue, b"0123456789abcdef") * BATCH
    for _ in range(count // BATCH):
        p.sendall(batch)
    t.join(timeout=300)
    p.close()
    assert result == [count]


def start_alloc_broker(tmp_path, port):
    return subprocess.Popen(
        [sys.executable, "-m", "tests.helpers.alloc_broker", "-D", str(tmp_path), "-p", str(port),
         "--http-port", "0", "--metrics-http-port", "0", "--mqtt-port", "0", "-l", "warning"],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
        cwd=os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))


def test_ttl_dead_lettering_allocates_nothing_per_message(tmp_path):
    """Messages expire (TTL 1 ms, nobody consumes the queue) and are
    dead-lettered to a queue that is consumed: expiry, the x-death rewrite
    and the routing of the copy all stay in Cython."""
    port = free_port()
    proc = start_alloc_broker(tmp_path, port)
    try:
        assert proc.stdout.readline().strip() == "ready"

        def count():
            proc.stdin.write("count\n")
            proc.stdin.flush()
            return int(proc.stdout.readline())

        c = RawClient("127.0.0.1", port)
        c.open_channel(1)
        c.send(1, commands.Queue.Declare(queue="dlq"))
        c.expect(commands.Queue.DeclareOk)
        c.send(1, commands.Queue.Declare(queue="ttl", arguments={
            "x-message-ttl": 1, "x-dead-letter-exchange": "", "x-dead-letter-routing-key": "dlq"}))
        c.expect(commands.Queue.DeclareOk)
        c.close()
        run_messages(port, "ttl", 20_000, consume_from="dlq")
        before = count()
        n = 300_000
        started = time.monotonic()
        run_messages(port, "ttl", n, consume_from="dlq")
        allocations = count() - before
        per_message = allocations / n
        print(f"\n{n} messages expired and dead-lettered in {time.monotonic() - started:.1f}s: "
              f"{allocations} object allocations ({per_message:.4f} per message)")
        assert per_message < 0.05, f"{per_message:.3f} Python objects allocated per message"
    finally:
        proc.stdin.write("quit\n")
        proc.stdin.flush()
        proc.wait(timeout=30)


def test_publish_consume_ack_allocates_nothing_per_message(tmp_path):
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "tests.helpers.alloc_broker", "-D", str(tmp_path), "-p", str(port),
         "--http-port", "0", "--metrics-http-port", "0", "--amqps-port", "0", "--https-port", "0",
         "--mqtt-port", "0", "--mqtts-port", "0", "-l", "warning"],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
        cwd=os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
    try:
        assert proc.stdout.readline().strip() == "ready"

        def count():
            proc.stdin.write("count\n")
            proc.stdin.flush()
            return int(proc.stdout.readline())

        c = RawClient("127.0.0.1", port)
        c.open_channel(1)
        c.send(1, commands.Queue.Declare(queue="alloc"))
        c.expect(commands.Queue.DeclareOk)
        c.close()
        run_messages(port, "alloc", 50_000)        # warm-up: caches, buffers, segments
        before = count()
        started = time.monotonic()
        run_messages(port, "alloc", MESSAGES)
        allocations = count() - before
        per_message = allocations / MESSAGES
        print(f"\n{MESSAGES} messages in {time.monotonic() - started:.1f}s: "
              f"{allocations} object allocations ({per_message:.4f} per message)")
        # per read batch and per connection objects are fine; one per message is not
        assert per_message < 0.05, f"{per_message:.3f} Python objects allocated per message"
    finally:
        proc.stdin.write("quit\n")
        proc.stdin.flush()
        proc.wait(timeout=30)
