"""Per-message cost of the queue semantics (issue 11): publishing at a
length limit with drop-head, expiring with dead-lettering, a priority
queue's publish and take; each against the plain queue it extends."""
import struct
import time

import pytest

from lavinmq._core import codec
from lavinmq._core.queue import bench_drain, bench_expire, bench_publish
from lavinmq.vhost import VHost


def record(props=None, body=b"x" * 16):
    return (struct.pack("<q", int(time.time() * 1000)) + b"\x00" + b"\x01q"
            + codec.encode_properties(props or {}, True) + struct.pack("<Q", len(body)) + body)


@pytest.fixture
def vhost(tmp_path):
    v = VHost("/", str(tmp_path))
    yield v
    v.close()


def test_publish_plain_queue(per_message, vhost):
    q = vhost.declare_queue("plain", False, None, False, {})
    rec = record()

    def run(n):
        bench_publish(q, rec, n)
        bench_drain(q)
    per_message(run)


def test_publish_at_max_length_drop_head(per_message, vhost):
    """Every publish past the limit drops the head: append + shift + delete."""
    q = vhost.declare_queue("capped", False, None, False, {"x-max-length": 1000})
    rec = record()
    bench_publish(q, rec, 1000)
    per_message(lambda n: bench_publish(q, rec, n))
    assert q.message_count == 1000


def test_expire_and_dead_letter(per_message, vhost):
    """Messages expire at the head and are rewritten with x-death into the
    dead-letter queue: the cost of TTL + DLX per message."""
    q = vhost.declare_queue("ttl", False, None, False, {
        "x-message-ttl": 1, "x-dead-letter-exchange": "", "x-dead-letter-routing-key": "dlq"})
    dlq = vhost.declare_queue("dlq", False, None, False, {})
    rec = record()

    def run(n):
        bench_publish(q, rec, n)
        time.sleep(0.002)
        assert bench_expire(q) == n
        bench_drain(dlq)
    per_message(run)


def test_priority_publish_and_take(per_message, vhost):
    q = vhost.declare_queue("prio", False, None, False, {"x-max-priority": 10})
    recs = [record({"priority": p}) for p in range(10)]

    def run(n):
        for r in recs:
            bench_publish(q, r, n // 10)
        assert bench_drain(q) == n - n % 10
    per_message(run)
