"""format("lavinmq-segments"): messages straight from the segment files of
a data directory copied while the broker runs, for streams (with offsets)
and classic queues (acked messages left out)."""
import shutil

import pika

from lavinmq.spark.amqp import Connection
from tests.conftest import BrokerProcess
from tests.spark.conftest import publish


def test_segment_files_of_a_copied_data_dir(spark, tmp_path):
    b = BrokerProcess(tmp_path / "data").start()
    try:
        with Connection(b.url) as c:
            c.declare_queue("s", arguments={"x-queue-type": "stream", "x-stream-max-segment-size-bytes": 16384,
                                            "x-max-length": 1000})
            c.declare_queue("classic")
        publish(b.url, "s", [b"s%05d" % i for i in range(3000)], headers=lambda i: {"n": i})
        publish(b.url, "classic", [b"c%03d" % i for i in range(100)])
        # a consumer acks the first 40 of the classic queue
        conn = pika.BlockingConnection(pika.URLParameters(b.url))
        ch = conn.channel()
        for _ in range(40):
            m, _, _ = ch.basic_get("classic")
            ch.basic_ack(m.delivery_tag)
        conn.close()
        copy = tmp_path / "copy"
        shutil.copytree(tmp_path / "data", copy, ignore=shutil.ignore_patterns("*.sock", ".lock"))
    finally:
        b.stop()
    s = spark.read.format("lavinmq-segments").option("queue", "s").load(str(copy))
    assert s.rdd.getNumPartitions() > 3                      # one per segment file
    rows = s.orderBy("offset").collect()
    # retention dropped whole segments from the front; the offsets left are dense
    first = rows[0].offset
    assert first > 1 and len(rows) >= 1000
    assert [r.offset for r in rows] == list(range(first, 3001))
    assert all(r.body == b"s%05d" % (r.offset - 1) and r.headers["n"] == str(r.offset - 1) for r in rows)
    assert rows[0].properties.message_id == f"id-{first - 1}"
    c = spark.read.format("lavinmq-segments").option("queue", "classic").option("vhost", "/").load(str(copy))
    got = sorted(r.body for r in c.collect())
    assert got == [b"c%03d" % i for i in range(40, 100)]     # acked messages are gone
    assert c.where("offset is not null").count() == 0        # classic queues have no offsets


def test_a_queue_directory_and_bad_paths(spark, tmp_path):
    import hashlib
    import pytest
    b = BrokerProcess(tmp_path / "data").start()
    try:
        with Connection(b.url) as c:
            c.declare_queue("q", arguments={"x-queue-type": "stream"})
        publish(b.url, "q", [b"x"] * 10)
    finally:
        b.stop()
    qdir = tmp_path / "data" / hashlib.sha1(b"/").hexdigest() / hashlib.sha1(b"q").hexdigest()
    assert spark.read.format("lavinmq-segments").load(str(qdir)).count() == 10
    with pytest.raises(Exception, match="option"):
        spark.read.format("lavinmq-segments").load(str(tmp_path / "data")).count()
    with pytest.raises(Exception, match="no queue"):
        spark.read.format("lavinmq-segments").option("queue", "nope").load(str(tmp_path / "data")).count()
