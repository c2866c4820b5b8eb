"""format("lavinmq") as a sink: rows become messages (body, routing key,
exchange, headers, properties), published with confirms; unroutable or
refused messages fail the task; message ids are deterministic."""
import time

import pika
import pytest
from pyspark.sql import functions as F

from lavinmq.spark._publish import PublishEncoder
from lavinmq.spark.amqp import Connection
from tests.conftest import unique


def drain(url, queue, n, timeout=20):
    conn = pika.BlockingConnection(pika.URLParameters(url))
    ch = conn.channel()
    got = []
    deadline = time.monotonic() + timeout
    while len(got) < n and time.monotonic() < deadline:
        m = ch.basic_get(queue, auto_ack=True)
        if m[0] is None:
            time.sleep(0.05)
            continue
        got.append(m)
    conn.close()
    return got


def test_rows_become_messages_with_confirms(spark, broker):
    ex, q = unique("ex"), unique("sink")
    with Connection(broker.url) as c:
        c.declare_exchange(ex, "direct")
        c.declare_queue(q)
        c.bind_queue(q, ex, "rk-a")
        c.bind_queue(q, ex, "rk-b")
    df = spark.range(500).repartition(3).select(
        F.format_string("row %d", "id").alias("body"),
        F.when(F.col("id") % 2 == 0, "rk-a").otherwise("rk-b").alias("routing_key"),
        F.create_map(F.lit("n"), F.col("id").cast("string"), F.lit("x-stream-filter-value"), F.lit("f")).alias("headers"),
        F.struct(F.lit("text/plain").alias("content_type"), F.lit(5).alias("priority"),
                 F.when(F.col("id") == 7, "own-id").alias("message_id"),
                 F.lit("app").alias("app_id")).alias("properties"),
        F.lit("ignored").alias("other"))
    df.write.format("lavinmq").option("uri", broker.url).option("exchange", ex).option("deliveryMode", "2").mode("append").save()
    got = drain(broker.url, q, 500)
    assert len(got) == 500
    by_body = {b.decode(): (m, p) for m, p, b in got}
    m, p = by_body["row 7"]
    assert m.routing_key == "rk-b" and m.exchange == ex
    assert (p.content_type, p.priority, p.app_id, p.delivery_mode) == ("text/plain", 5, "app", 2)
    assert p.message_id == "own-id" and p.headers["n"] == "7" and p.headers["x-deduplication-header"] == "own-id"
    ids = {p.message_id for _, p in by_body.values()}
    assert len(ids) == 500                                 # one per row
    _, p = by_body["row 8"]
    assert p.headers["x-deduplication-header"] == p.message_id


def test_a_dataframe_read_from_a_stream_writes_back(spark, broker, stream):
    from tests.spark.conftest import publish
    publish(broker.url, stream, [b"copy %d" % i for i in range(50)], headers=lambda i: {"i": i})
    q = unique("copy")
    with Connection(broker.url) as c:
        c.declare_queue(q)
    src = spark.read.format("lavinmq").option("uri", broker.url).option("queue", stream).load()
    src.write.format("lavinmq").option("uri", broker.url).option("queue", q).mode("append").save()
    got = drain(broker.url, q, 50)
    assert sorted(b for _, _, b in got) == sorted(b"copy %d" % i for i in range(50))
    assert {p.message_id for _, p, _ in got} == {f"id-{i}" for i in range(50)}   # kept from the source


def test_unroutable_rows_fail_the_task(spark, broker):
    ex = unique("nowhere")
    with Connection(broker.url) as c:
        c.declare_exchange(ex, "direct")
    df = spark.range(10).select(F.col("id").cast("string").alias("body"))
    with pytest.raises(Exception, match="could not be routed"):
        df.write.format("lavinmq").option("uri", broker.url).option("exchange", ex).mode("append").save()
    # unless they may be dropped
    df.write.format("lavinmq").option("uri", broker.url).option("exchange", ex).option("mandatory", "false").mode("append").save()


def test_refused_publishes_fail_the_task(spark, broker):
    q = unique("full")
    with Connection(broker.url) as c:
        c.declare_queue(q, arguments={"x-max-length": 1, "x-overflow": "reject-publish"})
        c.confirm_select()
        from lavinmq.spark.amqp import publish_frames
        c.sock.sendall(publish_frames(1, "", q, b"1") + publish_frames(1, "", q, b"2"))
        c.published = 2
        c.wait_confirms(2)
        if c.nacked == 0:
            pytest.skip("this broker does not refuse publishes (x-overflow reject-publish) yet")
    df = spark.range(10).select(F.col("id").cast("string").alias("body"))
    with pytest.raises(Exception, match="nacked"):
        df.write.format("lavinmq").option("uri", broker.url).option("queue", q).mode("append").save()


def test_stream_sink_and_deterministic_ids(spark, broker, stream, tmp_path):
    from tests.spark.conftest import publish
    publish(broker.url, stream, [b"%d" % i for i in range(30)])
    q = unique("out")
    with Connection(broker.url) as c:
        c.declare_queue(q)
    src = spark.readStream.format("lavinmq").option("uri", broker.url).option("queue", stream) \
        .option("startingOffsets", "earliest").load()
    query = (src.select(F.concat(F.lit("seen "), F.col("body").cast("string")).alias("body"))
             .writeStream.format("lavinmq").option("uri", broker.url).option("queue", q)
             .option("checkpointLocation", str(tmp_path / "ck")).trigger(availableNow=True).start())
    assert query.awaitTermination(120)
    got = drain(broker.url, q, 30)
    assert sorted(b for _, _, b in got) == sorted(b"seen %d" % i for i in range(30))
    # <query id>-<batch id>-<partition>-<row>: the same ids when a batch runs again
    assert all(p.message_id.startswith(f"{query.id}-0-") for _, p, _ in got)
    import pyarrow as pa
    batch = pa.RecordBatch.from_pydict({"body": pa.array([b"a", b"b"], pa.binary())})
    from lavinmq.spark.sink import columns
    enc = PublishEncoder(1, 131072, b"", b"q", b"prefix-", b"x-deduplication-header")
    assert enc.encode(2, 10, **columns(batch)) == enc.encode(2, 10, **columns(batch))
    assert b"prefix-10" in enc.encode(2, 10, **columns(batch))
