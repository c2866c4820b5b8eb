"""Stream queues through pika: declaration rules, many consumers reading the
same messages, x-stream-offset in all its forms, acks, requeue, basic.get."""
import datetime
import time

import pika
import pytest
from pika.exceptions import ChannelClosedByBroker

from tests.conftest import unique
from tests.streams.conftest import Collector, declare, publish


def code(excinfo):
    return excinfo.value.args[0]


# -- declaration ------------------------------------------------------------------

@pytest.mark.parametrize("kwargs, args", [
    ({"durable": False}, {}),
    ({"exclusive": True}, {}),
    ({"auto_delete": True}, {}),
    ({}, {"x-dead-letter-exchange": "dlx"}),
    ({}, {"x-max-priority": 5}),
    ({}, {"x-max-age": "7 days"}),
    ({}, {"x-max-age": "7d"}),
    ({}, {"x-max-length": -1}),
    ({}, {"x-stream-max-segment-size-bytes": 10}),
])
def test_what_a_stream_cannot_be(conn, kwargs, args):
    ch = conn.channel()
    with pytest.raises(ChannelClosedByBroker) as e:
        ch.queue_declare(unique("s"), **{"durable": True, **kwargs},
                         arguments={"x-queue-type": "stream", **args})
    assert code(e) == 406


def test_redeclare_and_declare_ok_count(ch):
    name = declare(ch, unique("s"), **{"x-max-age": "7D"})
    publish(ch, name, ["a", "b", "c"])
    ok = ch.queue_declare(name, durable=True, arguments={"x-queue-type": "stream", "x-max-age": "7D"})
    assert ok.method.message_count == 3
    assert ch.queue_declare(name, passive=True).method.message_count == 3
    with pytest.raises(ChannelClosedByBroker) as e:
        ch.queue_declare(name, durable=True, arguments={"x-queue-type": "classic"})
    assert code(e) == 406


def test_consumer_rules_and_basic_get(conn):
    ch = conn.channel()
    name = declare(ch, unique("s"))
    publish(ch, name, ["a"])
    for kwargs, qos in (({}, None), ({"auto_ack": True}, 10), ({"exclusive": True}, 10),
                        ({"arguments": {"x-priority": 1}}, 10), ({"arguments": {"x-stream-offset": "now"}}, 10),
                        ({"arguments": {"x-stream-offset": {"a": 1}}}, 10),
                        ({"arguments": {"x-stream-filter": "a", "x-filter-match-type": "some"}}, 10)):
        ch = conn.channel()
        ch.basic_qos(prefetch_count=qos or 0)       # qos 0: no limit, refused on a stream
        with pytest.raises(ChannelClosedByBroker) as e:
            ch.basic_consume(name, lambda *a: None, **kwargs)
            conn.process_data_events(0.1)
        assert code(e) == 406, kwargs
    # a channel that never sent basic.qos has the default prefetch (LavinMQ accepts it)
    ch = conn.channel()
    got = []
    ch.basic_consume(name, lambda c, m, p, b: got.append(b))
    deadline = time.monotonic() + 5
    while not got and time.monotonic() < deadline:
        conn.process_data_events(0.05)
    assert got == [b"a"]
    ch = conn.channel()
    with pytest.raises(ChannelClosedByBroker) as e:
        ch.basic_get(name)
    assert code(e) == 540       # LavinMQ's channel.close (RabbitMQ closes the connection with 540)
    ch = conn.channel()
    ch.basic_qos(prefetch_count=10, global_qos=True)
    with pytest.raises(ChannelClosedByBroker) as e:
        ch.basic_consume(name, lambda *a: None)
        conn.process_data_events(0.1)
    assert code(e) == 406


# -- reading ---------------------------------------------------------------------

def test_every_consumer_reads_every_message(conn, ch):
    name = declare(ch, unique("s"))
    publish(ch, name, [f"m{i}" for i in range(50)], headers=lambda b: {"i": int(b[1:])})
    readers = [Collector(conn, name, prefetch=7, **{"x-stream-offset": "first"}) for _ in range(3)]
    for r in readers:
        r.wait(50)
    for r in readers:
        assert r.offsets == list(range(1, 51))
        assert r.bodies == [b"m%d" % i for i in range(50)]
        assert [g[2].headers["i"] for g in r.got] == list(range(50))
    # nothing was removed by the acks
    assert ch.queue_declare(name, passive=True).method.message_count == 50


def test_first_is_the_default_and_new_messages_arrive_live(conn, ch):
    # LavinMQ: a consumer without x-stream-offset starts at the first message
    name = declare(ch, unique("s"))
    publish(ch, name, ["old"])
    a = Collector(conn, name)
    b = Collector(conn, name, **{"x-stream-offset": "next"})
    assert [g[:2] for g in a.wait(1)] == [(1, b"old")]
    b.settle(0.2)
    assert b.got == []
    publish(ch, name, ["new1", "new2"])
    assert [g[:2] for g in a.wait(3)] == [(1, b"old"), (2, b"new1"), (3, b"new2")]
    assert [g[:2] for g in b.wait(2)] == [(2, b"new1"), (3, b"new2")]


def test_offset_forms(conn, ch):
    name = declare(ch, unique("s"), **{"x-stream-max-segment-size-bytes": 4096})
    publish(ch, name, [f"m{i}" for i in range(100)])
    time.sleep(1.1)
    t = datetime.datetime.now(datetime.timezone.utc)
    time.sleep(1.1)          # timestamps are whole seconds: leave one between the two batches
    publish(ch, name, [f"n{i}" for i in range(20)])

    def first_offset(**args):
        c = Collector(conn, name, prefetch=1000, **args)
        got = c.wait(1)
        c.cancel()
        return got[0][0] if got else None

    # interval: from 2 s ago, which is between the two batches (checked first, while it is)
    assert first_offset(**{"x-stream-offset": "2s"}) == 101
    assert first_offset(**{"x-stream-offset": "first"}) == 1
    assert first_offset(**{"x-stream-offset": 0}) == 1
    assert first_offset(**{"x-stream-offset": 42}) == 42
    assert first_offset(**{"x-stream-offset": -5}) == 116
    assert first_offset(**{"x-stream-offset": -1000}) == 1
    assert first_offset(**{"x-stream-offset": t}) == 101          # AMQP timestamp
    assert first_offset(**{"x-stream-offset": "1h"}) == 1
    last = first_offset(**{"x-stream-offset": "last"})
    assert 1 < last <= 120                                        # the start of the newest segment
    c = Collector(conn, name, **{"x-stream-offset": 10_000})        # past the end: waits for the next
    assert c.settle(0.2) == []
    publish(ch, name, ["z"])
    assert c.wait(1)[0][:2] == (121, b"z")


def test_prefetch_limits_and_acks_free_credit(conn, ch):
    name = declare(ch, unique("s"))
    publish(ch, name, [f"m{i}" for i in range(20)])
    c = Collector(conn, name, prefetch=5, ack=False, **{"x-stream-offset": "first"})
    assert len(c.settle(0.3)) == 5
    c.ch.basic_ack(c.got[-1][3].delivery_tag, multiple=True)
    assert len(c.wait(10)) == 10
    assert c.offsets == list(range(1, 11))


def test_requeue_redelivers_to_the_same_consumer(conn, ch):
    name = declare(ch, unique("s"))
    publish(ch, name, ["a", "b", "c"])
    c = Collector(conn, name, prefetch=1, ack=False, **{"x-stream-offset": "first"})
    first = c.wait(1)[0]
    c.ch.basic_reject(first[3].delivery_tag, requeue=True)
    again = c.wait(2)[1]
    assert again[:2] == (1, b"a") and again[3].redelivered
    c.ch.basic_ack(again[3].delivery_tag)
    nxt = c.wait(3)[2]
    assert nxt[:2] == (2, b"b") and not nxt[3].redelivered
    # nack without requeue just moves on
    c.ch.basic_nack(nxt[3].delivery_tag, requeue=False)
    assert c.wait(4)[3][:2] == (3, b"c")


def test_channel_close_with_unacked_loses_nothing_for_others(conn, ch):
    name = declare(ch, unique("s"))
    publish(ch, name, [f"m{i}" for i in range(10)])
    a = Collector(conn, name, prefetch=3, ack=False, **{"x-stream-offset": "first"})
    a.wait(3)
    a.ch.close()
    b = Collector(conn, name, **{"x-stream-offset": "first"})
    assert b.wait(10) and b.offsets == list(range(1, 11))


def test_large_messages_across_frames_and_segments(conn, ch):
    name = declare(ch, unique("s"), **{"x-stream-max-segment-size-bytes": 4096})
    bodies = [bytes([i]) * (300_000 + i) for i in range(5)]
    publish(ch, name, bodies)
    c = Collector(conn, name, **{"x-stream-offset": "first"})
    assert [g[1] for g in c.wait(5)] == bodies
    assert c.offsets == [1, 2, 3, 4, 5]


def test_purge_drops_sealed_segments_only(conn, ch):
    name = declare(ch, unique("s"), **{"x-stream-max-segment-size-bytes": 4096})
    publish(ch, name, [f"m{i:04d}" + "x" * 100 for i in range(100)])
    purged = ch.queue_purge(name).method.message_count
    left = ch.queue_declare(name, passive=True).method.message_count
    assert purged > 0 and purged + left == 100
    c = Collector(conn, name, **{"x-stream-offset": "first"})
    assert c.wait(left)[0][0] == purged + 1          # offsets did not move
    assert c.offsets[-1] == 100


def test_queue_delete_cancels_consumers(conn, ch):
    name = declare(ch, unique("s"))
    publish(ch, name, ["a"])
    c = Collector(conn, name, **{"x-stream-offset": "first"})
    c.wait(1)
    ch.queue_delete(name)
    c.settle(0.2)
    assert c.ch.consumer_tags == []
    with pytest.raises(ChannelClosedByBroker) as e:
        conn.channel().queue_declare(name, passive=True)
    assert code(e) == 404


def test_bindings_route_into_streams(conn, ch):
    name = declare(ch, unique("s"))
    ex = unique("ex")
    ch.exchange_declare(ex, "fanout")
    ch.queue_bind(name, ex)
    ch.confirm_delivery()
    ch.basic_publish(ex, "", b"routed", pika.BasicProperties(content_type="text/plain"))
    c = Collector(conn, name, **{"x-stream-offset": "first"})
    got = c.wait(1)[0]
    assert got[1] == b"routed" and got[2].content_type == "text/plain" and got[3].exchange == ex
