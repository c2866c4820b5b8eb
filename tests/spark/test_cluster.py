"""The connector on a standalone cluster (tests/spark/conftest.py: a master
and two workers from pyspark's own classes, an executor on each): the
streaming source, the batch source, the segment reader and the sink each
run their partitions on both executors, every process opening its own
connection (or files). Where each partition ran is told by a marker the
task leaves (tests/spark/probes.py): the executor's working directory
names the worker and the executor id."""
import collections

from pyspark.sql import functions as F

from lavinmq.spark.amqp import Connection
from tests.conftest import unique
from tests.spark.conftest import publish
from tests.spark.probes import markers, marking


def placement(directory, tag):
    """{executor: sorted (stage, partition)} of the task attempts that
    finished (a micro-batch is a stage of its own)."""
    where = collections.defaultdict(set)
    for m in markers(directory, tag):
        if m["done"]:
            where[f"{m['worker']}/executor {m['executor']}"].add((m["stage"], m["partition"]))
    return {k: sorted(v) for k, v in sorted(where.items())}


def test_sources_segment_reader_and_sink_use_both_executors(spark, cluster, broker, stream, tmp_path):
    from lavinmq.spark.cluster import executor_ids
    assert len(executor_ids(spark)) == 2
    marks = tmp_path / "marks"
    marks.mkdir()
    publish(broker.url, stream, [b"m%05d" % i + b"." * 200 for i in range(2000)])
    schema = spark.read.format("lavinmq").option("uri", broker.url).option("queue", stream).load().schema
    shown = {}

    # the batch source: 8 ranges of 250 offsets
    df = (spark.read.format("lavinmq").option("uri", broker.url).option("queue", stream)
          .option("partitionSize", "250").load())
    assert df.rdd.getNumPartitions() == 8
    got = df.mapInArrow(marking(str(marks), "batch"), schema).select("offset").collect()
    assert sorted(r.offset for r in got) == list(range(1, 2001))
    shown["batch source"] = placement(marks, "batch")

    # the streaming source: two micro-batches of 1000 in 4 ranges each
    q = (spark.readStream.format("lavinmq").option("uri", broker.url).option("queue", stream)
         .option("startingOffsets", "earliest").option("maxOffsetsPerTrigger", "1000")
         .option("partitionSize", "250").load()
         .mapInArrow(marking(str(marks), "stream"), schema)
         .writeStream.format("noop").option("checkpointLocation", str(tmp_path / "ck"))
         .trigger(availableNow=True).start())
    assert q.awaitTermination(300)
    assert sum(p["numInputRows"] for p in q.recentProgress) == 2000
    shown["streaming source"] = placement(marks, "stream")

    # the segment reader: one partition per segment file of the running broker
    seg = spark.read.format("lavinmq-segments").option("queue", stream).load(broker.data_dir)
    assert seg.rdd.getNumPartitions() >= 4
    got = seg.mapInArrow(marking(str(marks), "segments"), schema).select("offset").collect()
    assert sorted(r.offset for r in got) == list(range(1, 2001))
    shown["segment reader"] = placement(marks, "segments")

    # the sink: 8 partitions of rows, each task publishing on its own connection
    target = unique("placed")
    with Connection(broker.url) as c:
        c.declare_queue(target)
    rows = spark.range(2000).repartition(8).select(F.col("id").cast("string").alias("body"))
    (rows.mapInArrow(marking(str(marks), "sink"), rows.schema)
     .write.format("lavinmq").option("uri", broker.url).option("queue", target).mode("append").save())
    with Connection(broker.url) as c:
        assert c.message_count(target) == 2000
    shown["sink"] = placement(marks, "sink")

    for path, where in shown.items():
        print(f"{path}: " + "; ".join(f"{ex}: partitions " + " ".join(f"{p}" + (f"(stage {s})" if path.startswith(
            "streaming") else "") for s, p in parts) for ex, parts in where.items()))
        assert len(where) == 2, f"{path} ran on {list(where)} only"
        assert sum(len(p) for p in where.values()) == len(set().union(*where.values()))
