"""A Spark Connect client in a process of its own (pyspark marks a process
that opened a Connect session as Connect-only: a classic session, such as
the test session, cannot share it): registers the connector and uses it,
printing what it saw as JSON for tests/spark/test_connect.py.

    python -m tests.spark.connect_client sc://HOST:PORT AMQP_URI STREAM DATA_DIR CHECKPOINT_DIR"""
import json
import sys


def main(remote, uri, stream, data_dir, checkpoint):
    from pyspark.sql import SparkSession
    from pyspark.sql import functions as F

    from lavinmq.spark import register
    from lavinmq.spark.amqp import Connection
    out = {}
    spark = SparkSession.builder.remote(remote).getOrCreate()
    try:
        out["session"] = type(spark).__module__
        register(spark)
        df = (spark.read.format("lavinmq").option("uri", uri).option("queue", stream)
              .option("startingOffsets", "101").option("endingOffsets", "701").option("partitionSize", "200").load())
        rows = df.orderBy("offset").collect()
        out["batch offsets"] = [r.offset for r in rows]
        out["first row"] = [rows[0].queue, rows[0].body.decode(), rows[0].headers]
        out["segment rows"] = (spark.read.format("lavinmq-segments").option("queue", stream)
                               .load(data_dir).count())
        target = stream + "-from-connect"
        with Connection(uri) as c:
            c.declare_queue(target)
        q = (spark.readStream.format("lavinmq").option("uri", uri).option("queue", stream)
             .option("startingOffsets", "earliest").option("maxOffsetsPerTrigger", "400").load()
             .select(F.concat(F.lit("seen "), F.col("body").cast("string")).alias("body"))
             .writeStream.format("lavinmq").option("uri", uri).option("queue", target)
             .option("checkpointLocation", checkpoint).trigger(availableNow=True).start())
        q.awaitTermination(300)
        # (a Connect client's progress objects answer by attribute:
        # p["numInputRows"] is None there)
        out["progress"] = [{"rows": p.numInputRows, "latestOffset": p.sources[0].latestOffset}
                           for p in q.recentProgress]
        with Connection(uri) as c:
            out["published"] = c.message_count(target)
    finally:
        spark.stop()
    print(json.dumps(out))


if __name__ == "__main__":
    main(*sys.argv[1:])
