"""The per-message cases the regression gate watches (benchmarks/gate.py).

Each case is a builder: `build(tmpdir) -> run`, where `run(n)` processes n
messages through one step of the message path (a Cython loop, so what is
measured is the step, not the Python around it). The same builders serve
the wall-clock gate (pytest-benchmark, bench_gate.py) and the instruction
count gate (callgrind, `python -m benchmarks.cases` below)."""
import asyncio
import struct
import sys

from lavinmq._core import codec

KEYS = 10_000
PROPS = codec.encode_properties({"delivery_mode": 2}, True)


def record(body=b"x" * 16):
    """A message as the segment store keeps it (LavinMQ's record layout)."""
    return (struct.pack("<q", 1700000000000) + b"\x00" + b"\x05perf1" + PROPS
            + struct.pack("<Q", len(body)) + body)


def _vhost(tmpdir):
    from lavinmq.vhost import VHost
    return VHost("/", str(tmpdir))


def codec_decode_queue_declare(tmpdir):
    from pamqp import commands, frame
    declare = frame.marshal(commands.Queue.Declare(queue="orders", durable=True,
                                                   arguments={"x-max-length": 1000}), 1)[11:-1]
    decode = codec.decode_method

    def run(n):
        for _ in range(n):      # each answer freed at once: a steady heap
            decode(50, 10, declare)
    return run


def codec_properties_wire_to_disk(tmpdir):
    import datetime
    from pamqp import commands, header
    wire = header.ContentHeader(0, 16, commands.Basic.Properties(
        content_type="application/json", delivery_mode=2, headers={"trace": "abc", "n": 1},
        timestamp=datetime.datetime(2024, 1, 1, tzinfo=datetime.timezone.utc))).marshal()[12:]
    convert = codec.convert_properties

    def run(n):
        for _ in range(n):
            convert(wire, False)
    return run


def route_direct_10k_keys(tmpdir):
    """10,000 binding keys over 1,000 queues, routing keys cycling over all."""
    from lavinmq._core.routing import bench_route_many
    vhost = _vhost(tmpdir)
    vhost.declare_exchange("d", "direct", False, False, False, {})
    for i in range(1000):
        vhost.declare_queue(f"q{i}", False, None, False, {})
    for i in range(KEYS):
        vhost.bind_queue(f"q{i % 1000}", "d", f"key.{i}", {})
    keys = [f"key.{i}".encode() for i in range(KEYS)]
    ex = vhost.exchanges["d"]
    assert bench_route_many(ex, keys, KEYS) == KEYS
    return lambda n: bench_route_many(ex, keys, n)


def route_topic_1000_bindings_10k_keys(tmpdir):
    """Issue 15's scenario: `dev.<n>.#` for 999 devices plus `#.temp`, keys
    `dev.<i>.temp` for 10,000 devices."""
    from lavinmq._core.routing import bench_route_many
    vhost = _vhost(tmpdir)
    vhost.declare_exchange("t", "topic", False, False, False, {})
    vhost.declare_queue("q", False, None, False, {})
    for i in range(999):
        vhost.bind_queue("q", "t", f"dev.{i}.#", {})
    vhost.bind_queue("q", "t", "#.temp", {})
    keys = [f"dev.{i}.temp".encode() for i in range(KEYS)]
    ex = vhost.exchanges["t"]
    assert bench_route_many(ex, keys, KEYS) == KEYS
    return lambda n: bench_route_many(ex, keys, n)


def route_headers_100_bindings_1000_header_sets(tmpdir):
    """99 bindings on (dev, kind) and one on kind alone, 1,000 header sets."""
    from lavinmq._core.routing import bench_route_many
    vhost = _vhost(tmpdir)
    vhost.declare_exchange("h", "headers", False, False, False, {})
    vhost.declare_queue("q", False, None, False, {})
    for i in range(99):
        vhost.bind_queue("q", "h", "", {"x-match": "all", "dev": str(i), "kind": "temp"})
    vhost.bind_queue("q", "h", "", {"x-match": "all", "kind": "temp"})
    props = [codec.encode_properties({"headers": {"dev": str(i), "kind": "temp"}}, True) for i in range(1000)]
    ex = vhost.exchanges["h"]
    assert bench_route_many(ex, [b""], 1000, props) == 1000
    return lambda n: bench_route_many(ex, [b""], n, props)


def segment_append_shift_ack(tmpdir):
    """Append n records to a queue's segments, then shift and ack them all."""
    from lavinmq._core.segment import MessageStore, bench_append_shift
    store = MessageStore(str(tmpdir / "q"), 8 * 1024 * 1024)
    rec = record()
    return lambda n: bench_append_shift(store, rec, n)


def write_deliveries(tmpdir):
    """basic.deliver + header + body frames of a 16-byte message."""
    from lavinmq._core.channel import bench_write_content
    rec = record()
    return lambda n: bench_write_content(rec, n)


def publish_through_connection_core(tmpdir):
    """Method + header + body frames parsed by the connection core and the
    message appended to a queue (no socket), 2,000 publishes per feed."""
    from lavinmq._core.connection import bench_feed
    from tests.helpers.inproc import open_connection
    from tests.helpers.rawclient import publish_frames
    from tests.unit.test_connection_core import handshake

    async def setup():
        server, conn = open_connection(tmpdir)
        handshake(conn)
        return server, conn

    loop = asyncio.new_event_loop()
    server, conn = loop.run_until_complete(setup())
    server.vhosts["/"].declare_queue("perf1", False, None, False, {})
    batch = publish_frames(1, "", "perf1", b"x" * 16) * 2000

    def run(n):
        bench_feed(conn, batch, max(1, n // 2000))
    run.loop = loop                     # keep the loop alive with the case
    return run


class _Sink:
    """A transport that takes every write whole and keeps nothing."""
    def write(self, data):
        pass

    def get_extra_info(self, name):
        return ("127.0.0.1", 40000) if name in ("peername", "sockname") else None

    def close(self):
        pass


def deliver_from_backlog(tmpdir):
    """A no-ack consumer draining a queue's backlog: the delivery pass
    (store shift, basic.deliver + header + body frames into the
    connection's output, the position deleted), the connection flushed to
    a transport after each pass, as the loop runs them."""
    from pamqp import commands, frame
    from lavinmq._core.connection import bench_feed
    from lavinmq._core.queue import bench_deliver
    from tests.helpers.inproc import feed, open_connection
    from tests.helpers.rawclient import publish_frames
    from tests.unit.test_connection_core import handshake

    async def setup():
        server, conn = open_connection(tmpdir)
        handshake(conn)
        q = server.vhosts["/"].declare_queue("perf1", False, None, False, {})
        bench_feed(conn, publish_frames(1, "", "perf1", b"x" * 16) * 2000, 60)       # 120,000 waiting
        conn.transport = _Sink()        # from here on, deliveries go nowhere
        feed(conn, frame.marshal(commands.Basic.Consume(queue="perf1", consumer_tag="c", no_ack=True), 1))
        return server, conn, q

    loop = asyncio.new_event_loop()
    server, conn, q = loop.run_until_complete(setup())

    def run(n):
        bench_deliver(q, n)
    run.loop = loop
    return run


def ack_each_through_connection_core(tmpdir):
    """A consumer (prefetch 100, manual acks) whose client acks each delivery
    on its own: per message one basic.ack read by the connection core and
    the delivery pass that answers it with the next message (issue 43)."""
    from pamqp import commands, frame
    from lavinmq._core.connection import bench_ack_each, bench_feed
    from tests.helpers.inproc import feed, open_connection
    from tests.helpers.rawclient import publish_frames
    from tests.unit.test_connection_core import handshake

    async def setup():
        server, conn = open_connection(tmpdir)
        handshake(conn)
        q = server.vhosts["/"].declare_queue("perf1", False, None, False, {})
        bench_feed(conn, publish_frames(1, "", "perf1", b"x" * 16) * 2000, 100)       # 200,000 waiting
        conn.transport = _Sink()
        feed(conn, frame.marshal(commands.Basic.Qos(prefetch_count=100), 1)
             + frame.marshal(commands.Basic.Consume(queue="perf1", consumer_tag="c"), 1))
        await asyncio.sleep(0)          # the first window: tags 1-100
        return server, conn, q

    loop = asyncio.new_event_loop()
    server, conn, q = loop.run_until_complete(setup())
    acked = [0]

    def run(n):
        bench_ack_each(conn, q, acked[0] + 1, n)
        acked[0] += n
    run.loop = loop
    return run


CASES = {f.__name__: f for f in (
    codec_decode_queue_declare, codec_properties_wire_to_disk, route_direct_10k_keys,
    route_topic_1000_bindings_10k_keys, route_headers_100_bindings_1000_header_sets,
    segment_append_shift_ack, write_deliveries, publish_through_connection_core, deliver_from_backlog,
    ack_each_through_connection_core)}
# messages per measured call under callgrind (~50x slower than native);
# deliver_from_backlog: whole delivery passes of 8,192 (DELIVERY_BUDGET)
CALLGRIND_N = {"publish_through_connection_core": 20_000, "deliver_from_backlog": 8192}


def _callgrind_main(argv):
    """Under callgrind (benchmarks/gate.py starts it): for each named case,
    build it, warm it up, then call it with n and 2n messages through
    debug.gate_measured, which callgrind counts alone and dumps after each
    call. The gate reads per-message instructions as the difference."""
    import gc
    import pathlib
    import tempfile
    from lavinmq._core.debug import gate_measured
    with tempfile.TemporaryDirectory() as tmp:
        for name in argv:
            d = pathlib.Path(tmp) / name
            d.mkdir()
            run = CASES[name](d)
            n = CALLGRIND_N.get(name, 10_000)
            run(n)                      # warm: buffers grown, caches filled
            gc.collect()
            gc.disable()                # no collection inside a measured call
            gate_measured(run, n)
            gate_measured(run, 2 * n)
            gc.enable()
            print(f"{name} {n}", flush=True)


if __name__ == "__main__":
    _callgrind_main(sys.argv[1:] or list(CASES))
