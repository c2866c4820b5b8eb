"""format("lavinmq") as a source: a batch read of an offset or time range,
and a streaming query that restarts from its checkpoint, with the broker
killed (kill -9) and restarted in between, and sees every offset once."""
import time

import pytest
from pyspark.sql import functions as F

from lavinmq.spark.amqp import Connection
from tests.conftest import BrokerProcess
from tests.spark.conftest import publish


def test_batch_read_of_an_offset_range_with_every_column(spark, broker, stream):
    publish(broker.url, stream, [b"m%04d" % i for i in range(3000)],
            headers=lambda i: {"i": i, "kind": "even" if i % 2 == 0 else "odd", "nested": {"a": [1, "x"]}})
    df = (spark.read.format("lavinmq").option("uri", broker.url).option("queue", stream)
          .option("startingOffsets", "101").option("endingOffsets", "2601").option("partitionSize", "1000").load())
    assert df.rdd.getNumPartitions() == 3
    rows = df.orderBy("offset").collect()
    assert [r.offset for r in rows] == list(range(101, 2601))
    assert [r.body for r in rows] == [b"m%04d" % i for i in range(100, 2600)]
    r = rows[0]
    assert (r.exchange, r.routing_key) == ("", stream)
    assert r.properties.content_type == "text/plain" and r.properties.message_id == "id-100"
    assert r.properties.delivery_mode == 2 and r.properties.priority is None
    assert r.headers == {"i": "100", "kind": "even", "nested": '{"a":[1,"x"]}'}
    assert "x-stream-offset" not in r.headers
    assert abs(r.timestamp.timestamp() - time.time()) < 300
    # the whole stream by default, and with Spark doing the work
    everything = spark.read.format("lavinmq").option("uri", broker.url).option("queue", stream).load()
    assert everything.count() == 3000
    assert everything.where(F.col("headers")["kind"] == "odd").count() == 1500


def test_batch_read_of_a_time_range(spark, broker, stream):
    publish(broker.url, stream, [b"early"] * 10)
    time.sleep(1.2)
    middle = int(time.time() * 1000)
    time.sleep(0.2)
    publish(broker.url, stream, [b"late"] * 5)
    df = (spark.read.format("lavinmq").option("uri", broker.url).option("queue", stream)
          .option("startingTimestamp", str(middle)).load())
    rows = df.orderBy("offset").collect()
    assert [r.body for r in rows] == [b"late"] * 5
    assert [r.offset for r in rows] == list(range(11, 16))
    until = (spark.read.format("lavinmq").option("uri", broker.url).option("queue", stream)
             .option("endingTimestamp", str(middle)).load())
    assert until.count() == 10


def test_missing_queue_option_is_a_clear_error(spark, broker):
    with pytest.raises(Exception, match="one of the options queue"):
        spark.read.format("lavinmq").option("uri", broker.url).load().count()


def offsets_written(spark, path):
    return [r.offset for r in spark.read.parquet(path).orderBy("offset").collect()]


@pytest.mark.timeout(600)
def test_streaming_exactly_once_across_checkpoint_restart_and_broker_kill(spark, tmp_path):
    b = BrokerProcess(tmp_path / "data").start()
    out, ck = str(tmp_path / "out"), str(tmp_path / "checkpoint")
    try:
        with Connection(b.url) as c:
            c.declare_queue("events", arguments={"x-queue-type": "stream",
                                                 "x-stream-max-segment-size-bytes": 32768})
        publish(b.url, "events", [b"e%05d" % i for i in range(2000)])

        def start(**trigger):
            df = (spark.readStream.format("lavinmq").option("uri", b.url).option("queue", "events")
                  .option("startingOffsets", "earliest").option("maxOffsetsPerTrigger", "400").load())
            w = (df.select("offset", "body").writeStream.format("parquet").option("path", out)
                 .option("checkpointLocation", ck))
            return w.trigger(**trigger).start() if trigger else w.start()

        def wait_batches(q, n, timeout=120):
            deadline = time.monotonic() + timeout
            while time.monotonic() < deadline:
                if q.exception() is not None:
                    raise q.exception()
                done = [p["batchId"] for p in q.recentProgress if p["numInputRows"]]
                if len(done) >= n:
                    return
                time.sleep(0.2)
            raise AssertionError(f"{n} batches did not run in {timeout} s")

        # 1. a few batches, then a clean stop
        q = start()
        wait_batches(q, 2)
        q.stop()
        # 2. more messages; restart from the checkpoint; kill -9 the broker under it
        publish(b.url, "events", [b"e%05d" % i for i in range(2000, 3000)])
        q = start()
        wait_batches(q, 1)
        b.kill()
        with pytest.raises(Exception):
            q.awaitTermination(120)
            raise AssertionError("the query went on without its broker")
        # 3. the broker comes back with everything; more is published
        b.start()
        publish(b.url, "events", [b"e%05d" % i for i in range(3000, 4000)])
        # 4. the query resumes from its checkpoint and reads what is there
        q = start(availableNow=True)
        assert q.awaitTermination(240)
        assert q.exception() is None
        rows = spark.read.parquet(out).orderBy("offset").collect()
        assert [r.offset for r in rows] == list(range(1, 4001))           # every offset, once
        assert all(r.body == b"e%05d" % (r.offset - 1) for r in rows)
    finally:
        for active in spark.streams.active:
            active.stop()
        b.stop()
