#!/usr/bin/env python3
"""The Spark connector's throughput: N 100-byte messages in a stream, read

  - from its segment files (format "lavinmq-segments") into df.count() and into Parquet,
  - over AMQP (format "lavinmq", a batch read) into df.count() and into Parquet,
  - as a streaming source (maxOffsetsPerTrigger, default 1M, trigger availableNow) into
    the noop sink and into Parquet,

and N rows of a DataFrame written to an exchange (the sink, with confirms; a queue is
bound to it and purged after each run), each reported in rows/s wall-clock and rows
per CPU-second of every process involved (Spark's driver, its cluster's JVMs and Python
workers, and the broker). The Spark session is started once, before the clock; the load
average is printed, since other work on the machine slows the wall-clock figures.

    .venv/bin/python benchmarks/spark_read.py                 # 5M messages, local[2], a broker of its own
    .venv/bin/python benchmarks/spark_read.py --cluster       # on a standalone cluster: two executors
    .venv/bin/python benchmarks/spark_read.py --compare -n 2000000 --repeat 2
                                                              # local[2] and the cluster, alternating
    .venv/bin/python benchmarks/spark_read.py -n 1000000 --only segments

Without --uri it starts a broker of this checkout on free ports with a temporary data
directory (the segment reader reads that directory)."""
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
CASES = ("segments", "amqp", "streaming", "sink")


def tree_cpu(root, seen):
    """CPU seconds used by root and every process under it (the Spark JVM,
    its Python workers), including children that have exited, leaving out
    the processes in seen (and adding those it counts to it)."""
    hz = os.sysconf("SC_CLK_TCK")
    total, todo = 0.0, [root]
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


def cpu_by_tree(roots):
    """[CPU s] per root, each process counted once: the later roots (the
    broker, the cluster's JVMs) first, so the driver's tree (which may hold
    them as children) keeps only its own."""
    seen, out = set(), {}
    for r in reversed(roots):
        out[r] = tree_cpu(r, seen)
    return [out[r] for r in roots]


PIDS = [os.getpid()]        # and the broker's
DETAIL = False              # --cpu-detail: the CPU of each process tree, per case
CLUSTER = []                # the master's and the workers' pids, for --cpu-detail


def timed(label, n, fn, repeat=2, results=None):
    """Wall-clock rows/s and rows per CPU-second of every process involved
    (on a machine shared with other work the second tells more). The best
    of `repeat` runs (the first one also warms up the JVM's compiler for
    that path)."""
    best = None
    for _ in range(repeat):
        roots = PIDS + CLUSTER
        per0, started = cpu_by_tree(roots), time.monotonic()
        got = fn()
        took = time.monotonic() - started
        per = [c - c0 for c, c0 in zip(cpu_by_tree(roots), per0)]
        if best is None or took < best[1]:
            best = (got, took, sum(per), per)
    got, took, cpu, per = best
    print(f"{label:<40} {got:>10,} rows in {took:6.1f} s: {got / took:>10,.0f} rows/s wall, "
          f"{cpu:6.1f} CPU s: {got / cpu:>10,.0f} rows per CPU-second", flush=True)
    if DETAIL:
        print("  CPU s by process tree: " + ", ".join(f"{cmd_name(p)} {c:.1f}" for p, c in zip(PIDS + CLUSTER, per)),
              flush=True)
    if got != n:
        print(f"  expected {n:,} rows", flush=True)
    if results is not None:
        results[label] = {"rows": got, "seconds": took, "cpu": cpu}
    return got / took


def cmd_name(pid):
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            args = f.read().split(b"\0")
    except OSError:
        return str(pid)
    for a in args:
        for name in (b"Master", b"Worker", b"lavinmq", b"spark_read.py"):
            if a.endswith(name):
                return {b"spark_read.py": "driver", b"lavinmq": "broker"}.get(name, name.decode().lower())
    return str(pid)


def publish(uri, queue, n, size):
    out = subprocess.run([sys.executable, "-m", "lavinmq.perf", "throughput", "--uri", uri, "-j",
                          "-y", "0", "-s", str(size), "-C", str(n), "-u", queue,
                          "--queue-args", '{"x-queue-type":"stream"}'],
                         capture_output=True, text=True, check=True, cwd=ROOT)
    pub = json.loads(out.stdout.strip().splitlines()[-1])
    print(f"published {n:,} x {size} B into a stream at {pub['avg_pub_rate']:,} msgs/s", flush=True)


def run_cases(opts, uri, data_dir, queue, tmp):
    """The cases on one Spark session (local[2] or a cluster it starts)."""
    from lavinmq.spark.amqp import Connection
    from lavinmq.spark.cluster import StandaloneCluster, session, wait_executors
    cluster = None
    if opts.cluster:
        cluster = StandaloneCluster(workers=2, cores=1, base_dir=os.path.join(tmp, "cluster"), small=False).start()
        spark = session(cluster.master_url, "lavinmq-bench", {**cluster.app_conf(), "spark.driver.memory": "1g"})
        wait_executors(spark, 2)
        CLUSTER.extend(d.pid for d in [cluster.master, *cluster.workers])
        where = "standalone cluster, 2 executors x 1 core"
    else:
        spark = session("local[2]", "lavinmq-bench", {"spark.driver.memory": "1g"})
        where = "local[2]"
    print(f"Spark: {where}; the streaming source reads with maxOffsetsPerTrigger={opts.max_per_trigger:,}",
          flush=True)
    results = {}
    try:
        qdir = os.path.join(data_dir, hashlib.sha1(b"/").hexdigest(), hashlib.sha1(queue.encode()).hexdigest())
        # warm up: the JVMs, and Python workers that have imported pyarrow and
        # the connector (the first query of a session pays for those)
        spark.read.format("lavinmq-segments").load(qdir).limit(10).collect()
        spark.read.format("lavinmq").option("uri", uri).option("queue", queue) \
            .option("endingOffsets", "1000").load().count()
        n = opts.messages
        only = set(opts.only or CASES)

        def to_parquet(df, name):
            def go():
                path = os.path.join(tmp, name)
                df.write.mode("overwrite").parquet(path)
                return spark.read.parquet(path).count()
            return go
        if "segments" in only:
            seg = spark.read.format("lavinmq-segments").load(qdir)
            timed("segment files -> df.count()", n, seg.count, results=results)
            timed("segment files -> Parquet", n, to_parquet(seg, "segments.parquet"), results=results)
        if "amqp" in only:
            amqp = spark.read.format("lavinmq").option("uri", uri).option("queue", queue).load()
            timed("AMQP batch read -> df.count()", n, amqp.count, results=results)
            timed("AMQP batch read -> Parquet", n, to_parquet(amqp, "amqp.parquet"), results=results)
        if "streaming" in only:
            def stream(sink):
                def go():
                    ck = tempfile.mkdtemp(dir=tmp)           # a new query each time
                    w = (spark.readStream.format("lavinmq").option("uri", uri).option("queue", queue)
                         .option("startingOffsets", "earliest")
                         .option("maxOffsetsPerTrigger", str(opts.max_per_trigger)).load()
                         .writeStream.trigger(availableNow=True).option("checkpointLocation", ck))
                    if sink == "parquet":
                        w = w.format("parquet").option("path", os.path.join(ck, "out"))
                    else:
                        w = w.format("noop")
                    q = w.start()
                    q.awaitTermination()
                    return sum(p["numInputRows"] for p in q.recentProgress)
                return go
            timed("streaming source -> noop", n, stream("noop"), results=results)
            timed("streaming source -> Parquet", n, stream("parquet"), results=results)
        if "sink" in only:
            from pyspark.sql import functions as F
            with Connection(uri) as c:
                c.declare_exchange("bench-sink", "fanout")
                c.declare_queue("bench-sink")
                c.bind_queue("bench-sink", "bench-sink")
            rows = spark.range(n).select(F.lpad(F.col("id").cast("string"), opts.size, "x").alias("body"))

            def sink():
                rows.write.format("lavinmq").option("uri", uri).option("exchange", "bench-sink") \
                    .mode("append").save()
                with Connection(uri) as c:
                    got = c.declare_queue("bench-sink", passive=True)
                    c.call(50, 30, b"\x00\x00" + bytes((10,)) + b"bench-sink" + b"\x00", (50, 31))     # purge
                return got
            timed("DataFrame -> exchange (sink, confirms)", n, sink, results=results)
        print(f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores", flush=True)
        return where, results
    finally:
        spark.stop()
        if cluster is not None:
            cluster.stop()


def compare(opts, uri, argv):
    """local[2] and the cluster in turns, each in a process of its own (one
    Spark driver per process), on the same stream."""
    table = {}
    for rep in range(opts.repeat):
        for mode in ("local", "cluster"):
            args = [sys.executable, os.path.abspath(__file__), *argv, "--uri", uri, "--data-dir", opts.data_dir,
                    "--json-out", os.path.join(opts.tmp, f"{mode}-{rep}.json"),
                    "--broker-pid", str(opts.broker_pid)]
            args = [a for a in args if a != "--compare"]
            if mode == "cluster":
                args.append("--cluster")
            print(f"\n== run {rep + 1}/{opts.repeat}: {mode}", flush=True)
            subprocess.run(args, check=True, cwd=ROOT)
            with open(os.path.join(opts.tmp, f"{mode}-{rep}.json")) as f:
                for label, r in json.load(f)["results"].items():
                    table.setdefault(label, {}).setdefault(mode, []).append(r)
    print(f"\nbest of {opts.repeat} round(s); CPU: Spark's processes and the broker's")
    print(f"{'':<40} {'local[2]':>29}   {'cluster (2 executors)':>29}")
    print(f"{'':<40} {'rows/s wall':>14} {'rows/CPU-s':>14}   {'rows/s wall':>14} {'rows/CPU-s':>14}")
    for label, modes in table.items():
        cells = []
        for mode in ("local", "cluster"):
            best = max(modes.get(mode, []), key=lambda r: r["rows"] / r["seconds"], default=None)
            cells.append(f"{best['rows'] / best['seconds']:>14,.0f} {best['rows'] / best['cpu']:>14,.0f}"
                         if best else f"{'-':>14} {'-':>14}")
        print(f"{label:<40} {cells[0]}   {cells[1]}")


def main(argv=None):
    argv = list(sys.argv[1:] if argv is None else argv)
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("-n", "--messages", type=int, default=5_000_000)
    ap.add_argument("-s", "--size", type=int, default=100)
    ap.add_argument("--max-per-trigger", type=int, default=1_000_000)
    ap.add_argument("--only", action="append", choices=CASES)
    ap.add_argument("--cluster", action="store_true", help="on a standalone cluster it starts: 2 executors x 1 core")
    ap.add_argument("--compare", action="store_true", help="local[2] and the cluster, alternating")
    ap.add_argument("--repeat", type=int, default=1, help="rounds of --compare")
    ap.add_argument("--uri", help="a broker whose stream 'bench' is filled (with --data-dir)")
    ap.add_argument("--data-dir", help="that broker's data directory")
    ap.add_argument("--cpu-detail", action="store_true", help="the CPU of each process tree, per case")
    ap.add_argument("--json-out", help=argparse.SUPPRESS)
    ap.add_argument("--broker-pid", type=int, help=argparse.SUPPRESS)
    opts = ap.parse_args(argv)
    global DETAIL
    DETAIL = opts.cpu_detail
    queue = "bench"
    tmp = tempfile.mkdtemp(prefix="spark-bench-")
    broker = None
    try:
        if opts.uri:
            uri, data_dir = opts.uri, opts.data_dir
        else:
            from tests.conftest import BrokerProcess
            broker = BrokerProcess(os.path.join(tmp, "data")).start()
            uri, data_dir = broker.url, broker.data_dir
            publish(uri, queue, opts.messages, opts.size)
        opts.broker_pid = broker.proc.pid if broker is not None else opts.broker_pid
        if opts.broker_pid:
            PIDS.append(opts.broker_pid)
        if opts.compare:
            opts.tmp, opts.data_dir = tmp, data_dir
            compare(opts, uri, [a for a in argv])
            return 0
        where, results = run_cases(opts, uri, data_dir, queue, tmp)
        if opts.json_out:
            with open(opts.json_out, "w") as f:
                json.dump({"where": where, "results": results}, f)
        return 0
    finally:
        if broker is not None:
            broker.stop()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
