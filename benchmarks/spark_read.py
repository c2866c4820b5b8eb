#!/usr/bin/env python3
"""The Spark connector's throughput: N 100-byte messages in a stream, read

  - from its segment files (format "lavinmq-segments") into df.count() and into Parquet,
  - over AMQP (format "lavinmq", a batch read) into df.count() and into Parquet,
  - as a streaming source with maxOffsetsPerTrigger (default 1M) into the noop sink,

each reported in rows/s wall-clock and per CPU-second of Spark's processes
(the Spark session is started once, before the clock; the load average is
printed, since other work on the machine slows the wall-clock figures).

    .venv/bin/python benchmarks/spark_read.py                 # 5M messages, a broker of its own
    .venv/bin/python benchmarks/spark_read.py -n 1000000 --only segments

Without --uri it starts a broker of this checkout on free ports with a
temporary data directory (the segment reader reads that directory)."""
import argparse
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)


def tree_cpu(root):
    """CPU seconds used by root and every process under it (the Spark JVM,
    its Python workers), including children that have exited."""
    hz = os.sysconf("SC_CLK_TCK")
    total, todo, seen = 0.0, [root], set()
    while todo:
        pid = todo.pop()
        if pid in seen:
            continue
        seen.add(pid)
        try:
            fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
            total += sum(int(x) for x in fields[11:15]) / hz
            for task in os.listdir(f"/proc/{pid}/task"):
                with open(f"/proc/{pid}/task/{task}/children") as f:
                    todo.extend(int(c) for c in f.read().split())
        except OSError:
            pass
    return total


PIDS = [os.getpid()]        # and the broker's, once it runs


def timed(label, n, fn, repeat=2):
    """Wall-clock rows/s, and rows per CPU-second of Spark's processes and
    the broker's: on a machine shared with other work the second tells what
    2 idle cores would do. The best of `repeat` runs (the first one also
    warms up the JVM's compiler for that path)."""
    best = None
    for _ in range(repeat):
        cpu0, started = sum(map(tree_cpu, PIDS)), time.monotonic()
        got = fn()
        took = time.monotonic() - started
        cpu = sum(map(tree_cpu, PIDS)) - cpu0
        if best is None or took < best[1]:
            best = (got, took, cpu)
    got, took, cpu = best
    print(f"{label:<50} {got:>10,} rows in {took:6.1f} s: {got / took:>10,.0f} rows/s wall, "
          f"{cpu:6.1f} CPU s: {2 * got / cpu:>10,.0f} rows/s per 2 CPU-seconds", flush=True)
    if got != n:
        print(f"  expected {n:,} rows", flush=True)
    return got / took


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("-n", "--messages", type=int, default=5_000_000)
    ap.add_argument("-s", "--size", type=int, default=100)
    ap.add_argument("--max-per-trigger", type=int, default=1_000_000)
    ap.add_argument("--only", action="append", choices=("segments", "amqp", "streaming"))
    opts = ap.parse_args(argv)
    only = set(opts.only or ("segments", "amqp", "streaming"))
    from tests.conftest import BrokerProcess
    tmp = tempfile.mkdtemp(prefix="spark-bench-")
    broker = BrokerProcess(os.path.join(tmp, "data")).start()
    PIDS.append(broker.proc.pid)
    queue = "bench"
    try:
        out = subprocess.run([sys.executable, "-m", "lavinmq.perf", "throughput", "--uri", broker.url, "-j",
                              "-y", "0", "-s", str(opts.size), "-C", str(opts.messages), "-u", queue,
                              "--queue-args", '{"x-queue-type":"stream"}'],
                             capture_output=True, text=True, check=True, cwd=ROOT)
        pub = json.loads(out.stdout.strip().splitlines()[-1])
        print(f"published {opts.messages:,} x {opts.size} B into a stream at {pub['avg_pub_rate']:,} msgs/s",
              flush=True)
        from lavinmq.spark.example import spark_session
        spark = spark_session("lavinmq-bench")
        qdir = os.path.join(broker.data_dir, hashlib.sha1(b"/").hexdigest(), hashlib.sha1(queue.encode()).hexdigest())
        # warm up: the JVM, and Python workers that have imported pyarrow and
        # the connector (the first query of a session pays for those)
        spark.read.format("lavinmq-segments").load(qdir).limit(10).collect()
        spark.read.format("lavinmq").option("uri", broker.url).option("queue", queue) \
            .option("endingOffsets", "1000").load().count()
        n = opts.messages
        results = {}
        if "segments" in only:
            seg = spark.read.format("lavinmq-segments").load(qdir)
            results["segments count"] = timed("segment files -> df.count()", n, seg.count)
            path = os.path.join(tmp, "segments.parquet")

            def to_parquet():
                seg.write.mode("overwrite").parquet(path)
                return spark.read.parquet(path).count()
            results["segments parquet"] = timed("segment files -> Parquet", n, to_parquet)
        if "amqp" in only:
            amqp = spark.read.format("lavinmq").option("uri", broker.url).option("queue", queue).load()
            results["amqp count"] = timed("AMQP batch read -> df.count()", n, amqp.count)
            path = os.path.join(tmp, "amqp.parquet")

            def to_parquet2():
                amqp.write.mode("overwrite").parquet(path)
                return spark.read.parquet(path).count()
            results["amqp parquet"] = timed("AMQP batch read -> Parquet", n, to_parquet2)
        if "streaming" in only:
            def stream():
                ck = tempfile.mkdtemp(dir=tmp)           # a new query each time
                q = (spark.readStream.format("lavinmq").option("uri", broker.url).option("queue", queue)
                     .option("startingOffsets", "earliest").option("maxOffsetsPerTrigger", str(opts.max_per_trigger))
                     .load().writeStream.format("noop").trigger(availableNow=True)
                     .option("checkpointLocation", ck).start())
                q.awaitTermination()
                return sum(p["numInputRows"] for p in q.recentProgress)
            results["streaming"] = timed(f"streaming source, maxOffsetsPerTrigger={opts.max_per_trigger:,}", n,
                                         stream)
        print(f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores", flush=True)
        spark.stop()
        return 0
    finally:
        broker.stop()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
