"""The options Spark users know from the Kafka source, where they mean
something for streams (lavinmq/spark/README.md): several queues by list and
by pattern, per-queue startingOffsets / endingOffsets as JSON, minPartitions,
Trigger.AvailableNow with maxOffsetsPerTrigger, failOnDataLoss when
retention removed what a checkpoint still wanted, lag per queue in the
query's progress, includeHeaders."""
import json

import pytest

from lavinmq.spark.amqp import Connection
from tests.conftest import unique
from tests.spark.conftest import publish


def streams(url, n, prefix, **arguments):
    names = [unique(prefix) for _ in range(n)]
    with Connection(url) as c:
        for name in names:
            c.declare_queue(name, arguments={"x-queue-type": "stream", **arguments})
    return names


def test_several_queues_with_offsets_per_queue_and_min_partitions(spark, broker):
    a, b = streams(broker.url, 2, "multi")
    publish(broker.url, a, [b"a%03d" % i for i in range(300)])
    publish(broker.url, b, [b"b%03d" % i for i in range(100)])
    df = (spark.read.format("lavinmq").option("uri", broker.url).option("queues", f"{a}, {b}")
          .option("startingOffsets", json.dumps({a: 51, b: {"0": -2}}))
          .option("endingOffsets", json.dumps({a: 251, b: -1})).option("minPartitions", "8").load())
    # 200 + 100 offsets in at least 8 pieces, in proportion: 5 of a's, 3 of b's
    assert df.rdd.getNumPartitions() == 8
    rows = df.select("queue", "offset", "body").collect()
    got = sorted((r.queue, r.offset, r.body) for r in rows)
    assert got == sorted([(a, o, b"a%03d" % (o - 1)) for o in range(51, 251)]
                         + [(b, o, b"b%03d" % (o - 1)) for o in range(1, 101)])
    # Kafka's timestamp variant, per queue
    later = (spark.read.format("lavinmq").option("uri", broker.url).option("queues", f"{a},{b}")
             .option("startingOffsetsByTimestamp", json.dumps({a: 0})).load())
    assert later.where(f"queue = '{a}'").count() == 300
    with pytest.raises(Exception, match="not among the queues read"):
        spark.read.format("lavinmq").option("uri", broker.url).option("queues", a) \
            .option("startingOffsets", json.dumps({"other": 1})).load().count()
    with pytest.raises(Exception, match="earliest is not an end"):
        spark.read.format("lavinmq").option("uri", broker.url).option("queue", a) \
            .option("endingOffsets", "earliest").load().count()


def test_a_pattern_with_available_now_admission_control_and_lag(spark, broker, tmp_path):
    prefix = unique("pat")
    names = [f"{prefix}-{i}" for i in range(3)]
    with Connection(broker.url) as c:
        for name in names + [f"other-{prefix}"]:
            c.declare_queue(name, arguments={"x-queue-type": "stream"})
        c.declare_queue(f"{prefix}-7")                      # matches, but is not a stream
    for i, name in enumerate(names):
        publish(broker.url, name, [b"%d" % k for k in range(100 * (i + 1))])       # 100, 200, 300
    publish(broker.url, f"other-{prefix}", [b"x"] * 50)

    def run():
        q = (spark.readStream.format("lavinmq").option("uri", broker.url)
             .option("managementUri", broker.http_url.replace("http://", "http://guest:guest@"))
             .option("queuePattern", f"{prefix}-\\d+").option("startingOffsets", "earliest")
             .option("maxOffsetsPerTrigger", "240").load()
             .select("queue", "offset").writeStream.format("parquet").option("path", str(tmp_path / "out"))
             .option("checkpointLocation", str(tmp_path / "ck")).trigger(availableNow=True).start())
        assert q.awaitTermination(300)
        assert q.exception() is None
        return [p for p in q.recentProgress if p["numInputRows"]]
    progress = run()
    # 600 offsets in batches of at most 240, each queue its share of the backlog
    assert [p["numInputRows"] for p in progress] == [240, 240, 120]
    first = json.loads(progress[0]["sources"][0]["latestOffset"])
    assert first["latest"] == {names[0]: 101, names[1]: 201, names[2]: 301}
    assert first["offsetsBehindLatest"] == {names[0]: 60, names[1]: 120, names[2]: 180}
    assert (first["maxOffsetsBehindLatest"], first["minOffsetsBehindLatest"]) == (180, 60)
    assert first["avgOffsetsBehindLatest"] == 120
    end = json.loads(progress[-1]["sources"][0]["endOffset"])
    assert end == {names[0]: 101, names[1]: 201, names[2]: 301}
    # a stream that matches appears, and the old ones grow: the next run
    # reads the new one from its first offset and the rest of the others
    new = f"{prefix}-9"
    with Connection(broker.url) as c:
        c.declare_queue(new, arguments={"x-queue-type": "stream"})
    publish(broker.url, new, [b"n"] * 30)
    publish(broker.url, names[0], [b"more"] * 10)
    progress = run()
    assert sum(p["numInputRows"] for p in progress) == 40
    rows = spark.read.parquet(str(tmp_path / "out")).collect()
    got = sorted((r.queue, r.offset) for r in rows)
    expected = sorted([(n, o) for i, n in enumerate(names) for o in range(1, 100 * (i + 1) + 1)]
                      + [(names[0], o) for o in range(101, 111)] + [(new, o) for o in range(1, 31)])
    assert got == expected                                   # every offset of every stream, once


def test_fail_on_data_loss(spark, broker, tmp_path):
    name, = streams(broker.url, 1, "loss", **{"x-stream-max-segment-size-bytes": 4096, "x-max-length": 200})
    publish(broker.url, name, [b"m%04d" % i for i in range(100)])

    def start(**options):
        r = (spark.readStream.format("lavinmq").option("uri", broker.url).option("queue", name)
             .option("startingOffsets", "earliest").option("maxOffsetsPerTrigger", "60"))
        for k, v in options.items():
            r = r.option(k, v)
        return (r.load().select("offset").writeStream.format("parquet").option("path", str(tmp_path / "out"))
                .option("checkpointLocation", str(tmp_path / "ck")).trigger(availableNow=True).start())
    q = start()
    assert q.awaitTermination(300) and q.exception() is None
    # retention drops the oldest segments while the query is away: it wanted offset 101 next
    publish(broker.url, name, [b"m%04d" % i for i in range(100, 1100)])
    from lavinmq.spark.offsets import Streams
    with Streams(broker.url) as s:
        first, nxt = s.bounds(name)
    assert 101 < first < 1100 and nxt == 1101
    q = start()
    with pytest.raises(Exception) as err:
        q.awaitTermination(300)
    text = str(err.value)
    assert f"stream '{name}': offsets 101..{first - 1} are gone" in text, text[-2000:]
    assert "failOnDataLoss=false" in text
    # with failOnDataLoss=false the query skips them (with a warning in the
    # driver's log) and goes on
    q = start(failOnDataLoss="false")
    assert q.awaitTermination(300) and q.exception() is None
    offsets = sorted(r.offset for r in spark.read.parquet(str(tmp_path / "out")).collect())
    assert offsets == list(range(1, 101)) + list(range(first, 1101))


def test_include_headers(spark, broker, stream):
    publish(broker.url, stream, [b"h"] * 5, headers=lambda i: {"i": i})
    df = spark.read.format("lavinmq").option("uri", broker.url).option("queue", stream)
    assert "headers" in df.load().columns
    assert df.load().collect()[4].headers == {"i": "4"}
    without = df.option("includeHeaders", "false").load()
    assert without.columns == ["queue", "offset", "timestamp", "exchange", "routing_key", "properties", "body"]
    assert [r.body for r in without.collect()] == [b"h"] * 5
