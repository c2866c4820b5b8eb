"""The per-message core: frame parsing of publishes, routing, segment
append/shift/ack, and writing deliveries. Loops run in Cython."""
import struct

import pytest

from lavinmq._core import codec
from lavinmq._core.channel import bench_write_content
from lavinmq._core.connection import bench_feed
from lavinmq._core.routing import bench_route
from lavinmq._core.segment import MessageStore, bench_append_shift
from lavinmq.exchange import DirectExchange, TopicExchange
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


def test_segment_append_shift_ack(per_message, tmp_path):
    store = MessageStore(str(tmp_path / "q"), 8 * 1024 * 1024)
    rec = record()
    per_message(lambda n: bench_append_shift(store, rec, n))
    store.close()


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


def test_write_deliveries(per_message):
    rec = record()
    per_message(lambda n: bench_write_content(rec, n))


def test_parse_publish_frames(per_message, tmp_path):
    """Method + header + body frames -> record appended to a queue, through
    the connection core (no socket)."""
    import asyncio
    from tests.unit.test_connection_core import FakeServer, FakeTransport, feed, handshake, frames
    from tests.helpers.rawclient import publish_frames
    from lavinmq.amqp.connection import AMQPConnection

    async def setup():
        server = FakeServer(tmp_path)
        conn = AMQPConnection(server)
        conn.connection_made(FakeTransport())
        conn.t = conn.transport
        handshake(conn)
        return server, conn

    loop = asyncio.new_event_loop()
    server, conn = loop.run_until_complete(setup())
    server.vhosts["/"].declare_queue("perf1", False, None, False, {})
    batch = publish_frames(1, "", "perf1", b"x" * 16) * 2000

    def run(n):
        bench_feed(conn, batch, n // 2000)
    per_message(run, n=20_000)
    assert server.vhosts["/"].queues["perf1"].message_count > 0
    loop.close()
