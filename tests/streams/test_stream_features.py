"""Filters, automatic offset tracking and retention (arguments and policy
keys) on stream queues."""
import time

import pika

from tests.conftest import unique
from tests.streams.conftest import Collector, declare, publish


def filtered_stream(ch):
    name = declare(ch, unique("s"))
    ch.confirm_delivery()
    msgs = [("none", None), ("foo", {"x-stream-filter-value": "foo"}),
            ("bar", {"x-stream-filter-value": "bar"}),
            ("foo,bar+kv", {"x-stream-filter-value": "foo,bar", "x-foo": "bar", "n": 7, "ok": True}),
            ("foo,bar,xyz", {"x-stream-filter-value": "foo, bar,xyz"}),
            ("kv only", {"x-foo": "bar"})]
    for body, headers in msgs:
        ch.basic_publish("", name, body.encode(), pika.BasicProperties(headers=headers))
    return name


def bodies(conn, name, **args):
    c = Collector(conn, name, **{"x-stream-offset": "first", **args})
    got = c.settle(0.4)
    c.cancel()
    return [g[1].decode() for g in got], [g[0] for g in got]


def test_filter_values(conn, ch):
    name = filtered_stream(ch)
    assert bodies(conn, name, **{"x-stream-filter": "foo"})[0] == ["foo", "foo,bar+kv", "foo,bar,xyz"]
    assert bodies(conn, name, **{"x-stream-filter": "bar"})[0] == ["bar", "foo,bar+kv", "foo,bar,xyz"]
    # several values: all of them by default (LavinMQ), any with x-filter-match-type
    assert bodies(conn, name, **{"x-stream-filter": "foo,xyz"})[0] == ["foo,bar,xyz"]
    assert bodies(conn, name, **{"x-stream-filter": ["foo", "xyz"]})[0] == ["foo,bar,xyz"]
    assert bodies(conn, name, **{"x-stream-filter": ["bar", "xyz"], "x-filter-match-type": "ANY"})[0] == \
        ["bar", "foo,bar+kv", "foo,bar,xyz"]
    # the offsets are those of the stream, not of the filtered view
    assert bodies(conn, name, **{"x-stream-filter": "xyz"})[1] == [5]
    assert bodies(conn, name, **{"x-stream-filter": "foo", "x-stream-offset": 3})[1] == [4, 5]


def test_match_unfiltered_and_header_filters(conn, ch):
    name = filtered_stream(ch)
    got = bodies(conn, name, **{"x-stream-filter": "foo", "x-stream-match-unfiltered": True})[0]
    assert got == ["none", "foo", "foo,bar+kv", "foo,bar,xyz", "kv only"]
    assert bodies(conn, name, **{"x-stream-filter": {"x-foo": "bar"}})[0] == ["foo,bar+kv", "kv only"]
    assert bodies(conn, name, **{"x-stream-filter": {"n": "7", "ok": "true"}})[0] == ["foo,bar+kv"]
    assert bodies(conn, name, **{"x-stream-filter": {"x-stream-filter": "foo", "x-foo": "bar"}})[0] == \
        ["foo,bar+kv"]
    assert bodies(conn, name, **{"x-stream-filter": ["xyz", {"x-foo": "bar"}],
                                 "x-filter-match-type": "any"})[0] == ["foo,bar+kv", "foo,bar,xyz", "kv only"]
    assert bodies(conn, name, **{"x-stream-filter": "nothing"})[0] == []


def test_filtered_consumer_keeps_up_with_live_messages(conn, ch):
    name = declare(ch, unique("s"))
    c = Collector(conn, name, **{"x-stream-filter": "keep"})
    ch.confirm_delivery()
    for i in range(300):
        ch.basic_publish("", name, b"%d" % i,
                         pika.BasicProperties(headers={"x-stream-filter-value": "keep" if i % 3 == 0 else "skip"}))
    assert [int(b) for b in (g[1] for g in c.wait(100))] == list(range(0, 300, 3))


# -- automatic offset tracking ---------------------------------------------------

def consume_one(broker, name, tag, **args):
    conn = pika.BlockingConnection(pika.URLParameters(broker.url))
    try:
        c = Collector(conn, name, prefetch=1, tag=tag, ack=False, **args)
        got = c.wait(1, timeout=1)
        if got:
            c.ch.basic_ack(got[0][3].delivery_tag)
        c.cancel()                # the ack reaches the broker before the cancel-ok
        return got[0][0] if got else None
    finally:
        conn.close()


def test_named_consumer_resumes_where_it_left_off(broker, ch):
    name = declare(ch, unique("s"))
    publish(ch, name, [f"m{i}" for i in range(5)])
    tag = unique("reader")
    # no x-stream-offset and a tag of its own: tracked; a new one starts at the first...
    assert consume_one(broker, name, tag) == 1
    assert consume_one(broker, name, tag) == 2
    assert consume_one(broker, name, tag) == 3
    # ... and a generated tag is never tracked
    assert consume_one(broker, name, "", **{"x-stream-offset": "first"}) == 1


def test_explicit_tracking_with_an_offset(broker, ch):
    name = declare(ch, unique("s"))
    publish(ch, name, [f"m{i}" for i in range(5)])
    tag = unique("reader")
    args = {"x-stream-offset": "first", "x-stream-automatic-offset-tracking": True}
    assert consume_one(broker, name, tag, **args) == 1
    # the stored offset wins over x-stream-offset once there is one
    assert consume_one(broker, name, tag, **args) == 2
    assert consume_one(broker, name, tag, **{"x-stream-offset": "first"}) == 1     # untracked


# -- retention --------------------------------------------------------------------

SMALL = {"x-stream-max-segment-size-bytes": 4096}


def offsets_from_first(conn, name, n):
    c = Collector(conn, name, prefetch=1000, **{"x-stream-offset": "first"})
    got = c.wait(n)
    c.cancel()
    return [g[0] for g in got]


def test_max_length_drops_whole_segments_and_keeps_offsets(conn, ch):
    name = declare(ch, unique("s"), **SMALL, **{"x-max-length": 100})
    publish(ch, name, ["x" * 100 for _ in range(500)])
    count = ch.queue_declare(name, passive=True).method.message_count
    assert 100 <= count < 200
    offsets = offsets_from_first(conn, name, count)
    assert offsets == list(range(501 - count, 501))


def test_max_length_bytes(conn, ch):
    name = declare(ch, unique("s"), **SMALL, **{"x-max-length-bytes": 10_000})
    publish(ch, name, ["x" * 100 for _ in range(500)])
    count = ch.queue_declare(name, passive=True).method.message_count
    assert 10_000 / 150 <= count < 10_000 / 100 + 60


def test_max_age(conn, ch):
    name = declare(ch, unique("s"), **SMALL, **{"x-max-age": "1s"})
    publish(ch, name, ["x" * 100 for _ in range(200)])
    time.sleep(1.5)
    publish(ch, name, ["y" * 100 for _ in range(60)])      # rolls a segment: old ones are checked
    count = ch.queue_declare(name, passive=True).method.message_count
    # whole segments only: the one that was being written during the sleep
    # holds old and new messages and stays (~30 messages fit a segment)
    assert 60 <= count <= 60 + 4096 // 130
    assert offsets_from_first(conn, name, count)[-1] == 260


def test_consumer_in_a_dropped_segment_moves_on(conn, ch):
    name = declare(ch, unique("s"), **SMALL, **{"x-max-length": 50})
    publish(ch, name, ["x" * 100 for _ in range(60)])
    slow = Collector(conn, name, prefetch=1, ack=False, **{"x-stream-offset": "first"})
    first = slow.wait(1)[0]
    publish(ch, name, ["y" * 100 for _ in range(500)])        # retention drops what it is reading
    slow.ch.basic_ack(first[3].delivery_tag)
    slow.ack = True
    got = slow.wait(3)
    assert got[1][0] > 60                                   # it went on from the oldest left
    assert got[2][0] == got[1][0] + 1


def test_policy_keys_set_retention(broker, conn, ch):
    import urllib.request
    import json
    name = declare(ch, unique("pol"), **SMALL)
    publish(ch, name, ["x" * 100 for _ in range(300)])
    q = broker_queue(broker, name)
    q_before = q["messages"]
    assert q_before == 300
    req = urllib.request.Request(
        f"{broker.http_url}/api/policies/%2F/{name}", method="PUT",
        data=json.dumps({"pattern": f"^{name}$", "definition": {"max-length": 50}, "apply-to": "queues"}).encode(),
        headers={"Content-Type": "application/json", "Authorization": "Basic Z3Vlc3Q6Z3Vlc3Q="})
    urllib.request.urlopen(req).read()
    count = ch.queue_declare(name, passive=True).method.message_count
    assert 50 <= count < 100
    urllib.request.urlopen(urllib.request.Request(
        f"{broker.http_url}/api/policies/%2F/{name}", method="DELETE",
        headers={"Authorization": "Basic Z3Vlc3Q6Z3Vlc3Q="})).read()


def broker_queue(broker, name):
    import json
    import urllib.request
    req = urllib.request.Request(f"{broker.http_url}/api/queues/%2F/{name}",
                                 headers={"Authorization": "Basic Z3Vlc3Q6Z3Vlc3Q="})
    return json.loads(urllib.request.urlopen(req).read())
