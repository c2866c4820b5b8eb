"""The per-message core: frame parsing of publishes, routing, segment
append/shift/ack, and writing deliveries. Loops run in Cython.
Segment append/shift/ack, delivery writing and publishes through the
connection core are the gate's cases: bench_gate.py."""
import struct

import pytest

from lavinmq._core import codec
from lavinmq._core.routing import bench_route
from lavinmq.vhost import VHost

PROPS = codec.encode_properties({"delivery_mode": 2}, True)


def record(body=b"x" * 16):
    return (struct.pack("<q", 1700000000000) + b"\x00" + b"\x05perf1" + PROPS
            + struct.pack("<Q", len(body)) + body)


@pytest.fixture
def vhost(tmp_path):
    v = VHost("/", str(tmp_path))
    yield v
    v.close()


def test_route_direct_one_key(per_message, vhost):
    q = vhost.declare_queue("perf1", False, None, False, {})
    ex = vhost.exchanges["amq.direct"]
    vhost.bind_queue("perf1", "amq.direct", "perf1", {})
    assert bench_route(ex, b"perf1", 1) == (q,)
    per_message(lambda n: bench_route(ex, b"perf1", n))


def test_route_topic_one_key(per_message, vhost):
    for i in range(50):
        vhost.declare_queue(f"t{i}", False, None, False, {})
        vhost.bind_queue(f"t{i}", "amq.topic", f"stock.{i}.#", {})
    ex = vhost.exchanges["amq.topic"]
    assert len(bench_route(ex, b"stock.7.nyse", 1)) == 1
    per_message(lambda n: bench_route(ex, b"stock.7.nyse", n))


def test_route_headers(per_message, vhost):
    """The headers table is read in place and matched against precompiled
    bindings (no Python object per message)."""
    for i in range(10):
        vhost.declare_queue(f"h{i}", False, None, False, {})
        vhost.bind_queue(f"h{i}", "amq.headers", "", {"x-match": "all", "region": f"r{i}", "kind": "order"})
    ex = vhost.exchanges["amq.headers"]
    props = codec.encode_properties({"headers": {"region": "r3", "kind": "order"}}, True)
    assert [q.name for q in bench_route(ex, b"", 1, props)] == ["h3"]
    per_message(lambda n: bench_route(ex, b"", n, props))


def test_route_topic_resolve_from_python(per_message, vhost):
    """The management API's publish: a Python call per message."""
    for i in range(50):
        vhost.declare_queue(f"t{i}", False, None, False, {})
        vhost.bind_queue(f"t{i}", "amq.topic", f"stock.{i}.#", {})
    ex = vhost.exchanges["amq.topic"]
    per_message(lambda n: [ex.resolve("stock.7.nyse", None) for _ in range(n)], n=1000)
