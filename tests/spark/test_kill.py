"""Exactly once on the cluster while processes die in the middle of a
micro-batch. Two queries read the same stream (checkpoints in a temp dir):
one into Parquet (Spark's file sink commits only the tasks that
succeeded), one through the lavinmq sink into a fanout exchange bound to a
queue with x-message-deduplication and to a plain queue. A step in each task
(tests/spark/probes.py) paces it and tells where it runs; the test kills
the Python workers of the executor that runs one, or the whole Worker JVM.
Spark runs the failed tasks again; then

  - Parquet holds every offset once,
  - the plain queue holds what every attempt published (the killed ones'
    partial output too), every message id of a successful attempt once per
    attempt that reached it,
  - the deduplicating queue holds each row's deterministic id once."""
import collections
import os
import signal
import time

import pika
import pytest

from lavinmq.spark.amqp import Connection
from tests.conftest import unique
from tests.spark.conftest import publish
from tests.spark.probes import markers, marking

N = 2000
# bodies this large fill the 64 KiB buffers between the Python workers and
# the JVM with every slice of 50 rows: the sink receives and publishes rows
# while the paced step is still producing them
BODY = 2000


def targets(url):
    ex, dedup, plain = unique("kill-ex"), unique("kill-dedup"), unique("kill-all")
    with Connection(url) as c:
        c.declare_exchange(ex, "fanout")
        c.declare_queue(dedup, arguments={"x-message-deduplication": True, "x-cache-size": 100000})
        c.declare_queue(plain)
        c.bind_queue(dedup, ex)
        c.bind_queue(plain, ex)
    return ex, dedup, plain


def start_queries(spark, url, stream, marks, tmp, ex):
    def source(tag):
        df = (spark.readStream.format("lavinmq").option("uri", url).option("queue", stream)
              .option("startingOffsets", "earliest").option("maxOffsetsPerTrigger", "1000")
              .option("partitionSize", "250").load())
        # slices of 50 rows, 0.25 s apart: a task takes over a second
        return df.mapInArrow(marking(marks, tag, slice_rows=50, pause=0.25), df.schema)
    to_parquet = (source("read").select("offset", "body").writeStream.format("parquet")
                  .option("path", os.path.join(tmp, "out"))
                  .option("checkpointLocation", os.path.join(tmp, "ck-read")).trigger(availableNow=True).start())
    to_broker = (source("sink").select("body").writeStream.format("lavinmq").option("uri", url)
                 .option("exchange", ex).option("checkpointLocation", os.path.join(tmp, "ck-sink"))
                 .trigger(availableNow=True).start())
    return to_parquet, to_broker


def running_task(marks, tag=None, min_rows=100, timeout=240):
    """A task attempt past min_rows rows and not finished: its marker."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for m in markers(marks, tag):
            if not m["done"] and m["rows"] >= min_rows and m["attempt"] == 0:
                return m
        time.sleep(0.05)
    raise AssertionError(f"no {tag or ''} task was seen running in {timeout} s")


def publishing_task(marks, url, plain, timeout=240):
    """A sink task attempt in the middle of its rows whose first messages
    are in the broker already: the plain queue holds more than the sink
    tasks that finished and every other running sink task could have
    published (a task publishes at most the rows its marker counted; the
    two executors each run one). A killed process's last writes may be
    lost with its socket; these are not."""
    deadline = time.monotonic() + timeout
    with Connection(url) as c:
        while time.monotonic() < deadline:
            before = markers(marks, "sink")
            count = c.message_count(plain)
            after = markers(marks, "sink")
            finished = sum(m["rows"] for m in after if m["done"])
            if finished == sum(m["rows"] for m in before if m["done"]) and count > finished:
                unfinished = [m for m in after if not m["done"]]
                for m in unfinished:
                    others = sum(o["rows"] for o in unfinished if o is not m)
                    if m["attempt"] == 0 and m["rows"] >= 100 and count > finished + others:
                        return m
            time.sleep(0.05)
    raise AssertionError(f"no sink task was seen publishing in {timeout} s")


def drain_ids(url, queue):
    conn = pika.BlockingConnection(pika.URLParameters(url))
    ch = conn.channel()
    ids = []
    while True:
        m = ch.basic_get(queue, auto_ack=True)
        if m[0] is None:
            break
        ids.append(m[1].message_id)
    conn.close()
    return ids


def check(spark, url, marks, tmp, queries, dedup, plain):
    for q in queries:
        assert q.awaitTermination(400), f"query {q.id} did not finish"
        assert q.exception() is None, q.exception()
    offsets = [r.offset for r in spark.read.parquet(os.path.join(tmp, "out")).select("offset").collect()]
    assert sorted(offsets) == list(range(1, N + 1))                # every offset, once
    kept = drain_ids(url, dedup)
    assert len(kept) == N and len(set(kept)) == N                  # each row's id once
    every = drain_ids(url, plain)
    counts = collections.Counter(every)
    assert set(counts) == set(kept)                                # nothing but those ids
    attempts = collections.Counter((m["tag"], m["done"], m["attempt"] > 0) for m in markers(marks))
    return {"parquet rows": len(offsets), "published (all attempts)": len(every),
            "repeated ids dropped by the broker": len(every) - N, "deduplicated queue": len(kept),
            "task attempts killed (read, sink)": (attempts[("read", False, False)], attempts[("sink", False, False)]),
            "task attempts retried and finished (read, sink)": (attempts[("read", True, True)],
                                                                attempts[("sink", True, True)])}


@pytest.fixture
def arrow_batches_of_50(spark):
    # the sink gets its rows in small Arrow batches and publishes each, so a
    # task killed half way has published part of its rows
    key = "spark.sql.execution.arrow.maxRecordsPerBatch"
    before = spark.conf.get(key)
    spark.conf.set(key, "50")
    yield
    spark.conf.set(key, before)


@pytest.mark.timeout(900)
def test_python_workers_killed_mid_batch(spark, cluster, broker, stream, tmp_path, arrow_batches_of_50):
    marks = tmp_path / "marks"
    marks.mkdir()
    publish(broker.url, stream, [b"e%05d" % i + b"." * BODY for i in range(N)])
    ex, dedup, plain = targets(broker.url)
    queries = start_queries(spark, broker.url, stream, str(marks), str(tmp_path), ex)
    killed = []
    try:
        for tag in ("read", "sink"):
            m = running_task(str(marks), tag) if tag == "read" else publishing_task(str(marks), broker.url, plain)
            worker = int(m["worker"].split("-")[1])
            pids = cluster.python_workers(worker)
            assert m["pid"] in pids
            for pid in pids:
                os.kill(pid, signal.SIGKILL)
            killed.append((tag, m["worker"], m["executor"], m["partition"], len(pids)))
        counts = check(spark, broker.url, str(marks), str(tmp_path), queries, dedup, plain)
    finally:
        for q in queries:
            q.stop()
    print(f"\nkilled the Python workers of: {killed}\n{counts}")
    assert counts["task attempts killed (read, sink)"] >= (1, 1)
    assert counts["task attempts retried and finished (read, sink)"] >= (1, 1)
    # the killed sink task had published part of its rows: the broker dropped them the second time
    assert counts["repeated ids dropped by the broker"] > 0


@pytest.mark.timeout(900)
def test_worker_jvm_killed_mid_batch(spark, cluster, broker, stream, tmp_path, arrow_batches_of_50):
    from lavinmq.spark.cluster import wait_executors
    marks = tmp_path / "marks"
    marks.mkdir()
    publish(broker.url, stream, [b"e%05d" % i + b"." * BODY for i in range(N)])
    ex, dedup, plain = targets(broker.url)
    queries = start_queries(spark, broker.url, stream, str(marks), str(tmp_path), ex)
    try:
        m = publishing_task(str(marks), broker.url, plain)
        worker = int(m["worker"].split("-")[1])
        cluster.kill_worker(worker)
        # its executor and their Python workers notice, and exit
        deadline = time.monotonic() + 60
        while cluster.processes_in(worker) and time.monotonic() < deadline:
            time.sleep(0.5)
        left = cluster.processes_in(worker)
        counts = check(spark, broker.url, str(marks), str(tmp_path), queries, dedup, plain)
    finally:
        for q in queries:
            q.stop()
        cluster.restart_worker(worker)
    wait_executors(spark, 2)
    print(f"\nkilled Worker JVM {m['worker']} (executor {m['executor']}) while partition {m['partition']} "
          f"was half done\n{counts}")
    assert left == [], f"processes of the killed worker still run: {left}"
    assert counts["task attempts killed (read, sink)"][1] >= 1
    # the killed sink task had published part of its rows (publishing_task
    # made sure): the broker dropped them when its retry published them again
    assert counts["repeated ids dropped by the broker"] > 0
