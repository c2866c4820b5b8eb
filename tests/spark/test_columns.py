"""The connector's Cython codecs without Spark: AMQP deliveries and segment
records into Arrow columns (checked against pamqp and the broker's codec),
publish frames from Arrow columns (decoded back with pamqp), and hostile
bytes that must raise, not crash."""
import array
import datetime
import decimal
import random
import struct

import pyarrow as pa
import pytest
from pamqp import body as pbody, commands, frame, header

from lavinmq.spark._columns import Batch, DeliveryDecoder, MalformedMessage, read_segment
from lavinmq.spark._publish import PublishEncoder
from lavinmq.spark.schema import record_schema
from lavinmq.spark.sink import columns
from tests.unit.records import record


def deliver(tag, offset, body, exchange="ex", rk="rk", frame_max=4096, ts=None, **props):
    headers = dict(props.pop("headers", {}) or {})
    headers["x-stream-offset"] = offset
    if ts is not None:
        headers["x-stream-timestamp"] = ts
    out = [frame.marshal(commands.Basic.Deliver("ctag", tag, False, exchange, rk), 1),
           frame.marshal(header.ContentHeader(0, len(body), commands.Basic.Properties(headers=headers, **props)), 1)]
    for i in range(0, len(body), frame_max - 8):
        out.append(frame.marshal(pbody.ContentBody(body[i:i + frame_max - 8]), 1))
    return b"".join(out)


def test_deliveries_into_columns_in_any_chunking():
    data = b"".join([
        deliver(1, 10, b"a" * 10000, ts=1_700_000_000_123, content_type="text/plain", message_id="m1", priority=3,
                delivery_mode=2, headers={"s": "x", "i": -5, "b": True, "d": decimal.Decimal("1.50"),
                                          "t": {"k": [1, "two"]}, "n": None}),
        deliver(2, 11, b"", ts=1, app_id="app", user_id="guest", reply_to="r", expiration="60000",
                correlation_id="c", message_type="t", content_encoding="gzip"),
        deliver(3, 12, b"skipped (past end)"),
        frame.marshal(commands.Basic.CancelOk("ctag"), 1),
    ])
    rnd = random.Random(7)
    for _ in range(20):
        dec = DeliveryDecoder(10, 12)
        pos = 0
        while pos < len(data):
            n = rnd.randint(1, 3000)
            dec.feed(data[pos:pos + n])
            pos += n
        assert dec.done and dec.last_tag == 3 and dec.deliveries == 3
        assert [o[1:3] for o in dec.others] == [(60, 31)]
        rows = dec.take().record_batch(record_schema()).to_pylist()
        assert [r["offset"] for r in rows] == [10, 11]
        a, b = rows
        assert a["body"] == b"a" * 10000 and (a["exchange"], a["routing_key"]) == ("ex", "rk")
        assert a["timestamp"] == datetime.datetime(2023, 11, 14, 22, 13, 20, 123000, tzinfo=datetime.timezone.utc)
        assert dict(a["headers"]) == {"s": "x", "i": "-5", "b": "true", "d": "1.50", "t": '{"k":[1,"two"]}',
                                      "n": None}
        assert (a["properties"]["content_type"], a["properties"]["message_id"], a["properties"]["priority"],
                a["properties"]["delivery_mode"]) == ("text/plain", "m1", 3, 2)
        p = b["properties"]
        assert (p["app_id"], p["user_id"], p["reply_to"], p["expiration"], p["correlation_id"], p["type"],
                p["content_encoding"]) == ("app", "guest", "r", "60000", "c", "t", "gzip")
        assert b["body"] == b"" and b["headers"] == []


def test_batches_cut_between_reads_keep_every_column_the_same_length():
    """read_range cuts a batch after whichever read fills it; a read may end
    between a message's header and its body (seen as "Arrays were not all
    the same length" from Spark): the cut waits for the message's end."""
    data = b"".join(deliver(i + 1, i, bytes([i % 251]) * (i % 7 * 300)) for i in range(500))
    rnd = random.Random(11)
    for _ in range(10):
        dec = DeliveryDecoder(0, 500)
        pos, batches, mid_message_reads = 0, [], 0
        while pos < len(data):
            n = rnd.randint(1, 700)
            dec.feed(data[pos:pos + n])
            pos += n
            if not dec.between_messages:
                mid_message_reads += 1
                with pytest.raises(RuntimeError):
                    dec.take()
            elif dec.batch.rows >= 7:
                batches.append(dec.take().record_batch(record_schema()))
        batches.append(dec.take().record_batch(record_schema()))
        assert mid_message_reads > 0
        rows = [r for b in batches for r in b.to_pylist()]
        assert [r["offset"] for r in rows] == list(range(500))
        assert all(r["body"] == bytes([r["offset"] % 251]) * (r["offset"] % 7 * 300) for r in rows)


def test_segment_records_match_the_broker_codec(tmp_path):
    from lavinmq._core.stream_store import StreamStore
    s = StreamStore(str(tmp_path), 1 << 20)
    props = [{"content_type": "application/json", "headers": {"k": "v", "n": 1}}, {},
             {"timestamp": 1_700_000_000, "type": "x", "cluster_id": "c", "priority": 9}]
    for i in range(30):
        s.py_append(record(b"body %d" % i, props=props[i % 3], ts=1_000 + i))
    s.close()
    data = open(tmp_path / "msgs.0000000001", "rb").read() + b"\x00" * 64
    b = Batch()
    pos, nxt = read_segment(data, b, 0, 1, array.array("I"), 7, 1 << 30)    # 7 rows per call
    assert (b.rows, nxt) == (7, 8)
    pos, nxt = read_segment(data, b, pos, nxt, array.array("I", [record_pos(data, 10)]), 100, 1 << 30)
    assert pos == -1 and b.rows == 29                         # one acked record left out
    rows = b.record_batch(record_schema()).to_pylist()
    assert [r["offset"] for r in rows] == [o for o in range(1, 31) if o != 11]
    assert rows[0]["properties"]["content_type"] == "application/json" and dict(rows[0]["headers"]) == \
        {"k": "v", "n": "1"}
    assert rows[2]["properties"]["priority"] == 9 and rows[2]["properties"]["type"] == "x"
    assert rows[0]["timestamp"].timestamp() == 1.0


def record_pos(data, index):
    """Byte position of the index-th record of a segment file."""
    from lavinmq._core.segment import MessageStore  # noqa: F401 (the broker side only for the test)
    pos = 4
    for _ in range(index):
        exlen = data[pos + 8]
        rklen = data[pos + 9 + exlen]
        p = pos + 10 + exlen + rklen
        from lavinmq._core.codec import properties_length
        plen = properties_length(data[p:p + 4096], True)
        body = struct.unpack_from("<Q", data, p + plen)[0]
        pos = p + plen + 8 + body
    return pos


def test_torn_and_hostile_input():
    good = deliver(1, 5, b"x" * 100)
    for cut in range(1, len(good)):
        dec = DeliveryDecoder(0, -1)
        dec.feed(good[:cut])                                   # a partial frame waits for more
        dec.feed(good[cut:])
        assert dec.take().rows == 1
    rnd = random.Random(3)
    for _ in range(2000):
        bad = bytearray(good)
        for _ in range(rnd.randint(1, 4)):
            bad[rnd.randrange(len(bad))] = rnd.randrange(256)
        dec = DeliveryDecoder(0, -1)
        try:
            dec.feed(bytes(bad))
            if dec.between_messages:        # (a bad body size leaves it waiting for more)
                dec.take().record_batch(record_schema()).validate(full=True)
        except (MalformedMessage, ValueError, OverflowError):
            pass
    # segment files: random garbage after a valid header ends the data or raises
    for _ in range(500):
        data = struct.pack("<I", 4) + bytes(rnd.randrange(256) for _ in range(rnd.randint(0, 300)))
        try:
            read_segment(data, Batch(), 0, -1, array.array("I"), 100, 1 << 30)
        except MalformedMessage:
            pass
    with pytest.raises(MalformedMessage):
        read_segment(b"\x05\x00\x00\x00", Batch(), 0, -1, array.array("I"), 10, 1 << 30)


def test_publish_frames_decode_with_pamqp():
    batch = pa.RecordBatch.from_pydict({
        "body": pa.array([b"one", b"", b"x" * 300], pa.binary()),
        "routing_key": pa.array(["a", None, "c"]),
        "headers": pa.array([[("h", "1")], None, [("k", "v"), ("z", None)]], pa.map_(pa.string(), pa.string())),
        "properties": pa.array([{"content_type": "text/plain", "priority": 4}, None,
                                {"message_id": "mine", "delivery_mode": 1}],
                               pa.struct([("content_type", pa.string()), ("priority", pa.int64()),
                                          ("message_id", pa.string()), ("delivery_mode", pa.int32())])),
    }).slice(0)
    enc = PublishEncoder(3, 200, b"exch", b"default-rk", b"w-7-", b"x-deduplication-header", 2)
    data = enc.encode(batch.num_rows, 100, **columns(batch))
    frames = []
    pos = 0
    while pos < len(data):
        n, ch, f = frame.unmarshal(data[pos:])
        assert ch == 3
        frames.append(f)
        pos += n
    methods = [f for f in frames if isinstance(f, commands.Basic.Publish)]
    headers = [f for f in frames if isinstance(f, header.ContentHeader)]
    bodies = [f for f in frames if isinstance(f, pbody.ContentBody)]
    assert [(m.exchange, m.routing_key, m.mandatory) for m in methods] == \
        [("exch", "a", True), ("exch", "default-rk", True), ("exch", "c", True)]
    p0, p1, p2 = (h.properties for h in headers)
    assert (p0.content_type, p0.priority, p0.delivery_mode, p0.message_id) == ("text/plain", 4, 2, "w-7-100")
    assert p0.headers == {"h": "1", "x-deduplication-header": "w-7-100"}
    assert p1.message_id == "w-7-101" and p1.headers == {"x-deduplication-header": "w-7-101"}
    assert (p2.message_id, p2.delivery_mode) == ("mine", 1)
    assert p2.headers == {"k": "v", "z": None, "x-deduplication-header": "mine"}
    assert [h.body_size for h in headers] == [3, 0, 300]
    assert b"".join(x.value for x in bodies) == b"one" + b"x" * 300
    assert len(bodies) == 3                                    # 300 bytes in frames of 192
    # a slice of the batch: the same rows, the same ids
    tail = enc.encode(2, 101, **columns(batch.slice(1)))
    assert tail == data[len(data) - len(tail):]


def test_the_connector_never_imports_the_broker():
    import subprocess
    import sys
    code = ("import sys, lavinmq.spark, lavinmq.spark.source, lavinmq.spark.sink, lavinmq.spark.segments, "
            "lavinmq.spark.example, lavinmq.spark.offsets, lavinmq.spark.options, lavinmq.spark.planning, "
            "lavinmq.spark.cluster\n"
            "bad = sorted(m for m in sys.modules if m.startswith('lavinmq.') and not m.startswith('lavinmq.spark'))\n"
            "print(bad)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]", out.stdout
