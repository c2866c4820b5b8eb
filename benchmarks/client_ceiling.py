#!/usr/bin/env python3
"""The most a load generator can consume: its rate against a server that
does nothing but write deliveries it encoded once, before the run.

    python benchmarks/client_ceiling.py --port 5990 --client /opt/lmq/lavinmq/bin/lavinmqperf

No broker can deliver faster than this to the same client on the same
machine, so a comparison row measured with that client can show at most
(this rate / the other broker's rate) : when a goal asks for more, the
client is what stands in the way, not either broker (issue 29: consuming a
backlog with LavinMQ's lavinmqperf).

The server speaks just enough AMQP 0-9-1 for a consumer: the handshake
(PLAIN, any credentials), channel.open, queue.declare, queue.bind,
exchange.declare, basic.qos, confirm.select and basic.consume, each
answered with its -ok; then the consumer's socket gets the same block of
deliveries (BLOCK messages of --size bytes, exchange "" and the queue's
name as routing key, no properties, as a backlog published by lavinmqperf
-y 0 is delivered) over and over, as fast as the socket takes it. Delivery
tags run 1..BLOCK and then repeat: a no-ack consumer never sends them back.
The client runs for --seconds and its own report (lavinmqperf -j:
avg_consume_rate) is printed, with the client's CPU (user + system, its
processes' rusage) per million messages.

--confirms: compare.py's "persistent confirms -c 1000 -p" row, a consumer
and a publisher with 1,000 unconfirmed, against a broker with no work to
do. Each read of the publisher's is acked at once (one basic.ack, multiple)
and the consumer gets as many deliveries. That is not the only way a
broker can answer (one that acks per fsync round answers in larger
batches), so it bounds what a broker without a disk would get, not every
policy: --confirm-delay-us acks each read that much later, as a disk would.
"""
import argparse
import json
import os
import resource
import socket
import struct
import subprocess
import sys
import threading
import time

from lavinmq._core.codec import decode_method, encode_method_frame

BLOCK = 8192
FRAME_END = b"\xce"


def frame(kind, channel, payload):
    return struct.pack(">BHI", kind, channel, len(payload)) + payload + FRAME_END


def method(channel, class_id, method_id, *args):
    return encode_method_frame(channel, class_id, method_id, args)


def deliveries(channel, tag, queue, size):
    """BLOCK deliveries of `size` bytes each, tags 1..BLOCK (all the same
    length: delivery k starts at k * len(block) // BLOCK)."""
    body = b"x" * size
    header = frame(2, channel, struct.pack(">HHQH", 60, 0, size, 0))
    content = frame(3, channel, body)
    parts = []
    for n in range(1, BLOCK + 1):
        parts.append(method(channel, 60, 60, tag, n, False, "", queue) + header + content)
    return b"".join(parts)


class Published:
    """--confirms: what the publishers sent, for the consumers to get as many."""

    def __init__(self):
        self.count = 0
        self.cond = threading.Condition()

    def add(self, n):
        with self.cond:
            self.count += n
            self.cond.notify_all()

    def wait_past(self, n, stop):
        with self.cond:
            while self.count <= n and not stop.is_set():
                self.cond.wait(0.2)
            return self.count


PUBLISH = struct.pack(">HH", 60, 40)    # a basic.publish method frame's payload starts so


def confirm_publishes(conn, channel, buf, published, delay, stop):
    """A confirming publisher: per read, count the basic.publish frames in
    it (bytes.count over the read: the bodies lavinmqperf sends never hold
    those four bytes) and ack them all at once (multiple), as a broker with
    nothing to write would; with `delay`, that many seconds later, as a
    broker whose disk takes that long."""
    total = 0
    tail = b""
    data = bytes(buf)
    while not stop.is_set():
        chunk = tail + data
        n = chunk.count(PUBLISH)
        tail = chunk[-3:]
        if n:
            if delay:
                time.sleep(delay)
            total += n
            conn.sendall(method(channel, 60, 80, total, True))
            published.add(n)
        data = conn.recv(1 << 20)
        if not data:
            return


def read_frame(sock, buf):
    """-> (type, channel, payload), reading more into buf as needed."""
    while True:
        if len(buf) >= 7:
            kind, channel, size = struct.unpack_from(">BHI", buf)
            if len(buf) >= 8 + size:
                payload = bytes(buf[7:7 + size])
                del buf[:8 + size]
                return kind, channel, payload
        data = sock.recv(65536)
        if not data:
            raise ConnectionError("the client closed the connection")
        buf += data


def serve(conn, size, stop, published, delay):
    """One client connection: the handshake, then deliveries once it consumes."""
    buf = bytearray()
    while len(buf) < 8:
        data = conn.recv(8 - len(buf))
        if not data:
            return
        buf += data
    del buf[:8]         # the protocol header
    caps = {"publisher_confirms": True, "basic.nack": True, "consumer_cancel_notify": True,
            "connection.blocked": True, "per_consumer_qos": True, "exchange_exchange_bindings": True}
    conn.sendall(method(0, 10, 10, 0, 9, {"capabilities": caps}, b"PLAIN", b"en_US"))
    queue = "ceiling"
    while True:
        kind, channel, payload = read_frame(conn, buf)
        if kind != 1:
            continue        # heartbeats, and content a publisher would send
        class_id, method_id = struct.unpack_from(">HH", payload)
        args = decode_method(class_id, method_id, payload[4:])
        if (class_id, method_id) == (10, 11):          # start-ok
            conn.sendall(method(0, 10, 30, 2047, 131072, 0))
        elif (class_id, method_id) == (10, 31):        # tune-ok
            pass
        elif (class_id, method_id) == (10, 40):        # connection.open
            conn.sendall(method(0, 10, 41, ""))
        elif (class_id, method_id) == (10, 50):        # connection.close
            conn.sendall(method(0, 10, 51))
            return
        elif (class_id, method_id) == (20, 10):        # channel.open
            conn.sendall(method(channel, 20, 11, b""))
        elif (class_id, method_id) == (20, 40):        # channel.close
            conn.sendall(method(channel, 20, 41))
        elif (class_id, method_id) == (40, 10):        # exchange.declare
            conn.sendall(method(channel, 40, 11))
        elif (class_id, method_id) == (50, 10):        # queue.declare
            queue = args[1] or "ceiling"
            conn.sendall(method(channel, 50, 11, queue, 0, 0))
        elif (class_id, method_id) == (50, 20):        # queue.bind
            conn.sendall(method(channel, 50, 21))
        elif (class_id, method_id) == (60, 10):        # basic.qos
            conn.sendall(method(channel, 60, 11))
        elif (class_id, method_id) == (85, 10):        # confirm.select
            conn.sendall(method(channel, 85, 11))
            confirm_publishes(conn, channel, buf, published, delay, stop)
            return
        elif (class_id, method_id) == (60, 20):        # basic.consume
            tag = args[2] or "ctag-ceiling"
            conn.sendall(method(channel, 60, 21, tag))
            block = deliveries(channel, tag, queue, size)
            step = len(block) // BLOCK
            try:
                if published is None:
                    while not stop.is_set():
                        conn.sendall(block)
                    return
                sent = published.count      # from now on (runs before this one left theirs)
                while not stop.is_set():
                    # as many deliveries as the publishers have sent
                    count = published.wait_past(sent, stop)
                    while sent < count:
                        start = sent % BLOCK
                        n = min(count - sent, BLOCK - start)
                        conn.sendall(block[start * step:(start + n) * step])
                        sent += n
            except OSError:
                pass
            return


def server(port, size, stop, published=None, delay=0.0):
    listener = socket.create_server(("127.0.0.1", port))
    listener.settimeout(0.2)
    while not stop.is_set():
        try:
            conn, _ = listener.accept()
        except TimeoutError:
            continue
        conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        threading.Thread(target=lambda c=conn: _guarded(serve, c, size, stop, published, delay), daemon=True).start()
    listener.close()


def _guarded(fn, conn, *args):
    try:
        fn(conn, *args)
    except (ConnectionError, OSError):
        pass
    finally:
        conn.close()


def run_client(head, port, args, seconds):
    return subprocess.Popen([*head, "throughput", "--uri", f"amqp://guest:guest@127.0.0.1:{port}",
                             "-u", "ceiling", "-j", "-z", str(seconds), *args],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def report(proc, seconds):
    out, err = proc.communicate(timeout=seconds * 5 + 30)
    if proc.returncode != 0:
        sys.exit(f"the client failed: {err.strip()}")
    return json.loads(out.strip().splitlines()[-1])


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--port", type=int, default=5990)
    ap.add_argument("--client", required=True, help="a lavinmqperf executable (LavinMQ's, or ours)")
    ap.add_argument("--seconds", type=int, default=8)
    ap.add_argument("--size", type=int, default=16, help="message body bytes")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--confirms", action="store_true",
                    help="compare.py's persistent confirms row: a consumer, and a publisher with -c 1000 -p")
    ap.add_argument("--confirm-delay-us", type=int, default=0,
                    help="with --confirms: each read's ack this much later (a disk's latency)")
    opts = ap.parse_args(argv)
    stop = threading.Event()
    published = Published() if opts.confirms else None
    threading.Thread(target=server, args=(opts.port, opts.size, stop, published, opts.confirm_delay_us / 1e6),
                     daemon=True).start()
    time.sleep(0.3)
    head = opts.client.split()
    rates = []
    for _ in range(opts.repeat):
        start = time.monotonic()
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        if opts.confirms:
            con = run_client(head, opts.port, ["-x", "0"], opts.seconds + 1)
            time.sleep(0.5)
            pub = run_client(head, opts.port, ["-y", "0", "-c", "1000", "-p", "-s", str(opts.size)], opts.seconds)
            rate = report(pub, opts.seconds)["avg_pub_rate"]
            report(con, opts.seconds)
        else:
            rate = report(run_client(head, opts.port, ["-x", "0"], opts.seconds), opts.seconds)["avg_consume_rate"]
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
        rates.append(rate)
        per_million = cpu / (rate * opts.seconds / 1e6) if rate else float("nan")
        print(f"  run: {rate:,} msgs/s, the client's CPU (all its processes) {cpu:.2f} s in "
              f"{time.monotonic() - start:.1f} s "
              f"({per_million:.2f} s per million)", file=sys.stderr)
    stop.set()
    rates.sort()
    what = "publish with confirms and a consumer" if opts.confirms else "consume"
    print(f"client ceiling ({os.path.basename(head[-1] if len(head) > 1 else head[0])}, {what}, "
          f"{opts.size}-byte messages): median {rates[len(rates) // 2]:,} msgs/s, runs {rates}")


if __name__ == "__main__":
    main()
