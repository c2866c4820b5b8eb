"""Offsets are dense and stable across a clean restart and across kill -9
under load: no confirmed message is lost, no offset moves."""
import threading
import time

import pika

from tests.conftest import BrokerProcess
from tests.streams.conftest import Collector, declare, publish

SMALL = {"x-stream-max-segment-size-bytes": 16384}


def read_all(url, name, n=None, **args):
    conn = pika.BlockingConnection(pika.URLParameters(url))
    try:
        if n is None:
            n = conn.channel().queue_declare(name, passive=True).method.message_count
        c = Collector(conn, name, prefetch=1000, **{"x-stream-offset": "first", **args})
        return [(o, b) for o, b, _, _ in c.wait(n, timeout=30)]
    finally:
        conn.close()


def test_clean_restart_keeps_offsets_retention_and_tracking(tmp_path):
    b = BrokerProcess(tmp_path / "data").start()
    try:
        conn = pika.BlockingConnection(pika.URLParameters(b.url))
        ch = conn.channel()
        name = declare(ch, "durable-stream", **SMALL, **{"x-max-length": 200})
        publish(ch, name, [b"m%05d" % i for i in range(1000)])
        c = Collector(conn, name, prefetch=1, tag="tracked", ack=False,      # tracked, from next
                      **{"x-stream-offset": "next", "x-stream-automatic-offset-tracking": True})
        publish(ch, name, [b"m%05d" % i for i in range(1000, 1010)])
        first = c.wait(1)[0]
        c.ch.basic_ack(first[3].delivery_tag)
        c.cancel()
        before = read_all(b.url, name)
        conn.close()
        assert before[-1] == (1010, b"m01009")
        assert before[0][0] > 1 and len(before) >= 200
        b.restart()
        after = read_all(b.url, name, len(before))
        assert after == before
        # the stream goes on from where it was
        conn = pika.BlockingConnection(pika.URLParameters(b.url))
        ch = conn.channel()
        publish(ch, name, [b"new"])
        assert read_all(b.url, name, len(before) + 1)[-1] == (1011, b"new")
        # and the tracked consumer resumes after what it acked
        c = Collector(conn, name, prefetch=1, tag="tracked")
        assert c.wait(1)[0][:2] == (1002, b"m01001")
        conn.close()
    finally:
        b.stop()
    b.check_clean()


def test_kill_9_under_load_loses_no_confirmed_message_and_moves_no_offset(tmp_path):
    b = BrokerProcess(tmp_path / "data").start()
    conn = pika.BlockingConnection(pika.URLParameters(b.url))
    ch = conn.channel()
    name = declare(ch, "crash-stream", **SMALL)
    conn.close()
    confirmed = []
    stop = threading.Event()

    def publisher():
        try:
            c = pika.BlockingConnection(pika.URLParameters(b.url))
            pch = c.channel()
            pch.confirm_delivery()
            i = 0
            while not stop.is_set():
                pch.basic_publish("", name, b"p%06d" % i)      # returns once confirmed
                confirmed.append(i)
                i += 1
        except Exception:
            pass        # the broker went away under it

    t = threading.Thread(target=publisher)
    t.start()
    # a reader in the middle of the stream while it is killed
    deadline = time.monotonic() + 20
    while len(confirmed) < 3000 and time.monotonic() < deadline:
        time.sleep(0.05)
    seen = read_all(b.url, name, 1000)
    b.kill()
    stop.set()
    t.join(10)
    assert len(confirmed) >= 3000
    b.start()
    try:
        n = len(confirmed)
        got = read_all(b.url, name, n)
        assert len(got) >= n
        # offset k holds the k-th message published, for every confirmed one
        assert got[:n] == [(i + 1, b"p%06d" % i) for i in range(n)]
        assert got[:len(seen)] == seen
        # offsets stay dense after the crash
        conn = pika.BlockingConnection(pika.URLParameters(b.url))
        ch = conn.channel()
        publish(ch, name, [b"after"])
        conn.close()
        last = read_all(b.url, name, len(got) + 1)[-1]
        assert last == (len(got) + 1, b"after")
    finally:
        b.stop()
    b.check_clean()


def test_empty_write_segment_after_retention_keeps_next_offset(tmp_path):
    # every sealed segment purged: only the (empty) write segment is left, and
    # its meta file is what remembers the next offset
    b = BrokerProcess(tmp_path / "data").start()
    try:
        conn = pika.BlockingConnection(pika.URLParameters(b.url))
        ch = conn.channel()
        name = declare(ch, "purged", **{"x-stream-max-segment-size-bytes": 4096})
        publish(ch, name, [b"x" * 4000 for _ in range(5)])     # one message per segment
        ch.queue_purge(name)
        conn.close()
        b.restart()
        conn = pika.BlockingConnection(pika.URLParameters(b.url))
        ch = conn.channel()
        publish(ch, name, [b"y"])
        conn.close()
        got = read_all(b.url, name, 2)
        assert got[-1] == (6, b"y")
    finally:
        b.stop()
    b.check_clean()
