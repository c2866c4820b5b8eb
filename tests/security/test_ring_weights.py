"""Issue 25 finding 9: one `x-algorithm: ring` binding of weight 10^6 took
1.25 s of loop time (the ring was rebuilt in Python at each binding
change). The ring is now built in C and its points are bounded."""
import random
import time

import pika
import pytest

from lavinmq._core.routing import ConsistentHashMatcher, crc32
from tests.security.stall_meter import ProcessStallMeter as StallMeter


def _reference_ring(entries):
    """The ring as it was built before, in Python: the placement to keep."""
    ring = {}
    for i, (name, weight) in enumerate(entries):
        for t in range(weight):
            ring[crc32(name + b"." + str(t).encode())] = i
    points = sorted(ring)
    return points, [ring[p] for p in points]


def _lookup(points, owners, names, key):
    import bisect
    crc = crc32(key)
    i = bisect.bisect_left(points, crc)
    return names[owners[i % len(points)]]


def test_the_c_ring_places_keys_as_the_python_one_did():
    rng = random.Random(25)
    entries = [(f"queue-{i}".encode(), rng.randint(0, 3000)) for i in range(12)]
    m = ConsistentHashMatcher("ring")
    for name, weight in entries:
        m.add(name.decode(), name, weight, False)
    points, owners = _reference_ring(entries)
    names = [n.decode() for n, _ in entries]
    for i in range(5000):
        key = f"key-{i}".encode()
        assert m.lookup(key) == [_lookup(points, owners, names, key)], key


def test_ring_weights_are_bounded_and_cheap(make_broker):
    b = make_broker()
    conn = pika.BlockingConnection(pika.URLParameters(b.url))
    ch = conn.channel()
    ch.exchange_declare("ring-x", "x-consistent-hash", arguments={"x-algorithm": "ring"})
    ch.queue_declare("ring-q1")
    ch.queue_declare("ring-q2")
    with StallMeter(b.url) as meter:
        ch.queue_bind("ring-q1", "ring-x", "60000")
        ch.queue_bind("ring-q2", "ring-x", "40000")     # 100,000 points in all: rebuilt in C
    assert meter.longest < 0.4, meter.longest
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as err:
        ch.queue_bind("ring-q2", "ring-x", "1000000")
    assert err.value.reply_code == 406 and "100000" in err.value.reply_text
    ch = conn.channel()
    got = set()
    ch.confirm_delivery()
    for i in range(200):
        ch.basic_publish("ring-x", f"k{i}", b"m")
    for q in ("ring-q1", "ring-q2"):
        if ch.queue_declare(q, passive=True).method.message_count:
            got.add(q)
    assert got == {"ring-q1", "ring-q2"}
    conn.close()
