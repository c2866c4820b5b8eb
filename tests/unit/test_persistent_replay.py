"""A persistent exchange's replay to a new binding, in process: it runs in
batches on the loop, the binding routes nothing until the copy has caught
up (so the queue gets everything in order), and an unbind or the queue's
deletion while it runs stops it and leaves no routing behind."""
import asyncio
import struct

from lavinmq._core.exchange_store import route_and_keep
from lavinmq.exchange import persistent
from lavinmq.http.records import parse_record
from lavinmq.vhost import VHost

N = 3 * persistent.BATCH_MESSAGES + 10


def record(exchange, body, rk="k"):
    props = struct.pack("<H", 0)
    return (struct.pack("<q", 1) + bytes([len(exchange)]) + exchange.encode() + bytes([len(rk)]) + rk.encode()
            + props + struct.pack("<Q", len(body)) + body)


def publish(vhost, ex_name, body):
    ex = vhost.exchanges[ex_name]
    queues, rec, kept = route_and_keep(ex, record(ex_name, body))
    assert kept
    for q in queues:
        assert q.publish_record(rec)
    return queues


def setup(tmp_path):
    v = VHost("/", str(tmp_path))
    v.declare_exchange("px", "fanout", False, False, False, {"x-persist-messages": 1000000})
    for i in range(N):
        publish(v, "px", b"%d" % i)
    v.declare_queue("q", False, None, False, {})
    return v


def test_replay_in_batches_holds_the_binding_until_it_caught_up(tmp_path):
    v = setup(tmp_path)
    q = v.queues["q"]

    async def run():
        job = v.bind_queue("q", "px", "", {"x-from": 0})
        assert job is not None and not job.done
        assert q.message_count == persistent.BATCH_MESSAGES       # the first batch, at once
        # published meanwhile: not routed to q yet, kept, copied in order
        assert publish(v, "px", b"late") == []
        done = asyncio.get_running_loop().create_future()
        job.when_done(lambda: done.set_result(True))
        await asyncio.wait_for(done, 10)
        assert q.message_count == N + 1
        assert publish(v, "px", b"live") == [q]                   # now it routes
        got = [parse_record(r) for r, _ in q.take_records(10 ** 6, False)]
        assert [body for _, _, _, body in got] == [b"%d" % i for i in range(N)] + [b"late", b"live"]
        assert [p["headers"]["x-offset"] for _, _, p, _ in got] == list(range(1, N + 3))
    asyncio.run(run())
    assert v.exchanges["px"].held == {}
    v.close()


def test_an_unbind_or_the_queue_deleted_stops_the_replay(tmp_path):
    v = setup(tmp_path)
    ex = v.exchanges["px"]

    async def run():
        job = v.bind_queue("q", "px", "", {"x-head": N})
        v.unbind_queue("q", "px", "", {"x-head": N})
        assert job.done and job.cancelled and not ex.held
        await asyncio.sleep(0.05)                                  # a scheduled batch finds it stopped
        assert v.queues["q"].message_count == persistent.BATCH_MESSAGES
        assert publish(v, "px", b"after") == [] and ex.bindings == {}
        job = v.bind_queue("q", "px", "", {"x-tail": N})
        v.delete_queue("q")
        assert job.done and job.cancelled and not ex.held and ex.bindings == {}
        await asyncio.sleep(0.05)
        # the same binding made again replays again
        v.declare_queue("q2", False, None, False, {})
        job = v.bind_queue("q2", "px", "", {"x-tail": 5})
        assert job.done and job.copied == 5 and v.queues["q2"].message_count == 5
        assert v.bind_queue("q2", "px", "", {"x-tail": 5}) is None
        assert v.queues["q2"].message_count == 5                 # an existing binding copies nothing
    asyncio.run(run())
    v.close()


def test_selection_of_x_head_x_tail_x_from():
    class Window:
        def __init__(self, lo, hi):
            self.w = (lo, hi)

        def window(self):
            return self.w
    held = Window(11, 20)                       # offsets 11..20
    cases = [("x-head", 3, (11, 13)), ("x-head", -3, (11, 17)), ("x-head", 0, (1, 0)), ("x-head", -10, (1, 0)),
             ("x-tail", 3, (18, 20)), ("x-tail", -3, (14, 20)), ("x-tail", 50, (11, 20)), ("x-tail", -10, (1, 0)),
             ("x-from", 15, (15, 20)), ("x-from", 0, (11, 20)), ("x-from", 5, (11, 20)), ("x-from", 21, (11, 20))]
    for key, value, want in cases:
        assert persistent.select(held, key, value) == (*want, 21), (key, value)
    assert persistent.select(Window(1, 0), "x-from", 0) == (1, 0, 1)


def test_a_damaged_store_closes_only_what_the_exchange_keeps(tmp_path):
    v = VHost("/", str(tmp_path), segment_size=4096)
    v.declare_exchange("px", "direct", True, False, False, {"x-persist-messages": 1000})
    v.declare_queue("q", True, None, False, {})
    v.bind_queue("q", "px", "k", {})
    for i in range(200):                                          # several segments
        publish(v, "px", b"message %d" % i)
    store_dir = v.exchanges["px"].persist.store.dir
    v.close()
    with open(f"{store_dir}/msgs.0000000001", "r+b") as f:       # a schema version it does not know
        f.write(struct.pack("<I", 99))
    v = VHost("/", str(tmp_path), segment_size=4096)
    ex = v.exchanges["px"]
    assert ex.persist.store.closed and ex.persist.stats()[0] == 0
    assert publish(v, "px", b"routed") == [v.queues["q"]]         # the exchange routes on
    v.declare_queue("q2", False, None, False, {})
    assert v.bind_queue("q2", "px", "k", {"x-from": 0}) is None   # nothing to copy, bound
    assert publish(v, "px", b"again") == [v.queues["q"], v.queues["q2"]]
    v.close()


def test_the_x_offset_stamp_keeps_every_other_property_and_header(tmp_path):
    from lavinmq._core import codec
    v = VHost("/", str(tmp_path))
    v.declare_exchange("px", "fanout", False, False, False, {"x-persist-messages": 100})
    ex = v.exchanges["px"]
    cases = [
        {},                                                             # no properties at all
        {"content_type": "text/plain", "content_encoding": "gzip", "priority": 3, "message_id": "m"},
        {"content_type": "a/b", "headers": {"h": 1, "list": [1, "x"], "t": {"n": None}}, "app_id": "app"},
        {"headers": {"x-offset": 77, "keep": "me"}},                    # a stale offset is replaced
        {"headers": {}},
    ]
    for i, props in enumerate(cases, start=1):
        body = b"body %d" % i
        rec = (struct.pack("<q", 5) + b"\x02px" + b"\x01k" + codec.encode_properties(props, True)
               + struct.pack("<Q", len(body)) + body)
        _, stamped, kept = route_and_keep(ex, rec)
        assert kept
        exchange, rk, got, got_body = parse_record(stamped)
        want = dict(props, headers=dict(props.get("headers") or {}, **{"x-offset": i}))
        assert (exchange, rk, got_body) == ("px", "k", body)
        assert got == want, props
        assert stamped[:8] == rec[:8]                                   # the timestamp as it came
    # a headers table that does not parse is dropped, the offset kept
    bad = struct.pack("<H", 1 << 13) + struct.pack("<I", 4) + b"\x05abc"      # a key longer than the table
    rec = struct.pack("<q", 5) + b"\x02px" + b"\x01k" + bad + struct.pack("<Q", 1) + b"z"
    _, stamped, _ = route_and_keep(ex, rec)
    assert parse_record(stamped)[2] == {"headers": {"x-offset": 6}} and parse_record(stamped)[3] == b"z"
    v.close()
