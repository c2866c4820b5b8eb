"""Stream queues in the management API and lavinmqctl: type, first/last
offset, size, per-consumer offsets, reading a stream over HTTP."""
import base64
import io
import json
import urllib.error
import urllib.request

import pika

from lavinmq import ctl
from tests.conftest import unique
from tests.streams.conftest import Collector, declare, publish

AUTH = "Basic " + base64.b64encode(b"guest:guest").decode()


def api(broker, path, body=None, method=None):
    req = urllib.request.Request(broker.http_url + "/api" + path, method=method or ("POST" if body else "GET"),
                                 data=json.dumps(body).encode() if body is not None else None,
                                 headers={"Authorization": AUTH, "Content-Type": "application/json"})
    with urllib.request.urlopen(req) as r:
        return json.loads(r.read() or b"null")


def ctl_rows(broker, *argv):
    out = io.StringIO()
    rc = ctl.main(["-U", broker.http_url, "-f", "json", *argv], out=out)
    assert rc == 0
    return json.loads(out.getvalue())


def test_queue_shows_stream_offsets_size_and_consumers(broker, conn, ch):
    name = declare(ch, unique("s"), **{"x-stream-max-segment-size-bytes": 4096})
    publish(ch, name, [b"x" * 100 for _ in range(100)])
    ch.queue_purge(name)
    publish(ch, name, [b"y" * 100])
    q = api(broker, f"/queues/%2F/{name}")
    st = q["stream"]
    assert q["type"] == "stream"
    assert st["last_offset"] == 101
    assert 1 < st["first_offset"] <= 101
    assert q["messages"] == 101 - st["first_offset"] + 1
    assert st["message_bytes"] > 100 * q["messages"] and st["segments"] >= 1
    assert st["first_timestamp"] <= st["last_timestamp"]

    tag = unique("tracked")
    a = Collector(conn, name, prefetch=1, tag=tag, ack=False, **{"x-stream-offset": "first"})
    first = a.wait(1)[0]
    a.ch.basic_ack(first[3].delivery_tag)
    a.wait(2)
    b = Collector(conn, name, prefetch=5, **{"x-stream-offset": "last"})
    b.settle(0.2)
    q = api(broker, f"/queues/%2F/{name}")
    by_tag = {c["consumer_tag"]: c["stream"] for c in q["consumer_details"]}
    assert by_tag[tag]["offset"] == first[0] + 2               # its cursor: two delivered
    assert by_tag[tag]["last_delivered_offset"] == first[0] + 1
    assert by_tag[tag]["automatic_offset_tracking"] is False
    assert by_tag[b.tag]["offset"] == 102
    # lavinmqctl
    rows = {r["name"]: r for r in ctl_rows(broker, "list_streams")}
    assert rows[name]["first_offset"] == st["first_offset"] and rows[name]["last_offset"] == 101
    assert rows[name]["consumers"] == 2
    cons = [r for r in ctl_rows(broker, "list_stream_consumers") if r["stream"] == name]
    assert {r["consumer_tag"]: r["offset"] for r in cons} == {tag: first[0] + 2, b.tag: 102}


def test_tracked_offsets_listed_when_disconnected(broker, conn, ch):
    name = declare(ch, unique("s"))
    publish(ch, name, ["a", "b", "c"])
    c = Collector(conn, name, prefetch=1, tag="offline-reader", ack=False,
                  **{"x-stream-offset": "first", "x-stream-automatic-offset-tracking": True})
    c.ch.basic_ack(c.wait(1)[0][3].delivery_tag)
    c.wait(2)
    c.cancel()
    assert api(broker, f"/queues/%2F/{name}")["stream"]["consumer_offsets"] == {"offline-reader": 2}
    rows = [r for r in ctl_rows(broker, "list_stream_consumers") if r["stream"] == name]
    assert rows == [{"stream": name, "consumer_tag": "offline-reader", "connected": False, "offset": None,
                     "last_delivered": None, "stored_offset": 2}]


def test_read_a_stream_over_http(broker, ch):
    name = declare(ch, unique("s"))
    ch.confirm_delivery()
    for i in range(10):
        ch.basic_publish("", name, b"m%d" % i, pika.BasicProperties(headers={"i": i}))
    msgs = api(broker, f"/queues/%2F/{name}/stream", {"offset": "3", "count": 4})
    assert [m["payload"] for m in msgs] == ["m2", "m3", "m4", "m5"]
    assert [m["properties"]["headers"]["x-stream-offset"] for m in msgs] == [3, 4, 5, 6]
    assert msgs[0]["properties"]["headers"]["i"] == 2
    assert [m["payload"] for m in api(broker, f"/queues/%2F/{name}/stream", {"offset": -2, "count": 5})] == \
        ["m8", "m9"]
    # and the classic get is refused with a pointer to it
    try:
        api(broker, f"/queues/%2F/{name}/get", {"count": 1, "ackmode": "ack_requeue_true", "encoding": "auto"})
        raise AssertionError("get on a stream answered")
    except urllib.error.HTTPError as e:
        assert e.code == 400
    try:
        api(broker, f"/queues/%2F/{name}/stream", {"offset": "sometime"})
        raise AssertionError("a bad offset answered")
    except urllib.error.HTTPError as e:
        assert e.code == 400


def test_declare_over_http_and_definitions_export(broker, ch):
    name = unique("s")
    api(broker, f"/queues/%2F/{name}", {"durable": True, "arguments": {"x-queue-type": "stream",
                                                                        "x-max-age": "1D"}}, method="PUT")
    assert ch.queue_declare(name, passive=True).method.message_count == 0
    defs = api(broker, "/definitions")
    q = [x for x in defs["queues"] if x["name"] == name][0]
    assert q["arguments"]["x-queue-type"] == "stream"
    try:
        api(broker, f"/queues/%2F/{unique('s')}", {"durable": False, "arguments": {"x-queue-type": "stream"}},
            method="PUT")
        raise AssertionError("a non-durable stream was declared")
    except urllib.error.HTTPError as e:
        assert e.code in (400, 406)
