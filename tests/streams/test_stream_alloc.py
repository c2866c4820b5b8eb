"""The hot-path rule for streams: publishing into a stream and two consumers
reading it (with the x-stream-offset header written into every delivery,
acks that move their credit, a filter on one of them) allocate no Python
object per message."""
import os
import subprocess
import sys
import threading
import time

from pamqp import commands

from tests.conftest import free_port
from tests.helpers.rawclient import RawClient, ack_frame, publish_frames

MESSAGES = 500_000
BATCH = 1000
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def read(port, queue, count, arguments, result):
    c = RawClient("127.0.0.1", port)
    c.open_channel(1)
    c.send(1, commands.Basic.Qos(prefetch_count=5000))
    c.expect(commands.Basic.QosOk)
    c.send(1, commands.Basic.Consume(queue=queue, arguments=arguments))
    c.expect(commands.Basic.ConsumeOk)
    delivered = acked = 0
    buf, sock = c.buf, c.sock
    while delivered < count:
        data = sock.recv(1 << 20)
        assert data, "broker closed the consumer's connection"
        buf += data
        pos, n = 0, len(buf)
        while n - pos >= 7:
            size = int.from_bytes(buf[pos + 3:pos + 7], "big")
            if n - pos < size + 8:
                break
            if buf[pos] == 1 and buf[pos + 7:pos + 11] == b"\x00\x3c\x00\x3c":
                delivered += 1
            pos += size + 8
        buf = buf[pos:]
        if delivered - acked >= 1000 or delivered == count:
            sock.sendall(ack_frame(1, delivered))
            acked = delivered
    result.append(delivered)
    c.close()


def run(port, queue, first, count):
    result = []
    readers = [threading.Thread(target=read, args=(port, queue, count, {"x-stream-offset": first}, result)),
               threading.Thread(target=read, args=(port, queue, count // 2,
                                                   {"x-stream-offset": first, "x-stream-filter": "even"},
                                                   result))]
    p = RawClient("127.0.0.1", port)
    p.open_channel(1)
    even = publish_frames(1, "", queue, b"0123456789abcdef",
                          commands.Basic.Properties(headers={"x-stream-filter-value": "even"}))
    odd = publish_frames(1, "", queue, b"0123456789abcdef",
                         commands.Basic.Properties(headers={"x-stream-filter-value": "odd"}))
    batch = (even + odd) * (BATCH // 2)
    for _ in range(count // BATCH):
        p.sendall(batch)
    for t in readers:
        t.start()
    for t in readers:
        t.join(timeout=300)
    p.close()
    assert sorted(result) == [count // 2, count]


def test_stream_publish_and_read_allocate_nothing_per_message(tmp_path):
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "tests.helpers.alloc_broker", "-D", str(tmp_path), "-p", str(port),
         "--http-port", "0", "--metrics-http-port", "0", "--mqtt-port", "0", "-l", "warning"],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, cwd=ROOT)
    try:
        assert proc.stdout.readline().strip() == "ready"

        def count():
            proc.stdin.write("count\n")
            proc.stdin.flush()
            return int(proc.stdout.readline())

        c = RawClient("127.0.0.1", port)
        c.open_channel(1)
        c.send(1, commands.Queue.Declare(queue="alloc-stream", durable=True,
                                         arguments={"x-queue-type": "stream"}))
        c.expect(commands.Queue.DeclareOk)
        c.close()
        run(port, "alloc-stream", "first", 20_000)          # warm-up: caches, buffers, segments
        before = count()
        started = time.monotonic()
        run(port, "alloc-stream", 20_001, MESSAGES)
        allocations = count() - before
        per_message = allocations / MESSAGES
        print(f"\n{MESSAGES} messages in {time.monotonic() - started:.1f}s: "
              f"{allocations} object allocations ({per_message:.4f} per message)")
        assert per_message < 0.05, f"{per_message:.3f} Python objects allocated per message"
    finally:
        proc.stdin.write("quit\n")
        proc.stdin.flush()
        proc.wait(timeout=30)
