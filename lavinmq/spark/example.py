"""The example data pipeline, one command after `./dev run`:

    ./dev pipeline                      # or: .venv/bin/python -m lavinmq.spark.example
    ./dev pipeline --cluster            # on a Spark standalone cluster it starts (a master, two workers)
    ./dev pipeline --master spark://HOST:7077   # on a cluster that runs (its workers need lavinmq)

1. A generator publishes JSON click events ({"user", "page", "ts"}) to the
   stream queue `clicks`, their event times spread over --minutes minutes.
2. A Structured Streaming query reads the stream (format "lavinmq"), parses
   the JSON, and counts clicks per page and minute with a one-minute
   watermark.
3. The finished aggregates go two ways: published to the fanout exchange
   `page-stats` (format "lavinmq" as a sink; the queue `page-stats` is bound
   to it) and written to Parquet under --out.
4. Progress is printed while it runs (with Spark's query progress: batch,
   rows, rows/s, how far behind the stream's end), and a summary checks
   every count against what the generator published.

Before it writes or starts Spark, it checks that the broker at --uri is
this one (lavinmq for Python, from what the broker says of itself when a
client connects; another broker listening on the same port gets nothing
unless --any-broker is given), that it takes the user and password, and
that the vhost exists. Each way that fails is one line on stderr and an
exit code of its own:

    64  --uri is not an amqp:// URI
    68  no such vhost (the last part of --uri)
    69  no broker: nothing listens at --uri's host and port, the host is
        unknown, or it does not answer
    76  something else listens there: not an AMQP 0-9-1 broker (it did not
        answer the protocol header with a Connection.Start within 2 s)
    77  the broker refused the user name and password, or the user's access
        to the vhost
    78  another AMQP broker, not this one (--any-broker writes there anyway)
"""
import argparse
import collections
import datetime
import json
import os
import random
import shutil
import socket
import sys
import threading
import time
import urllib.parse

from lavinmq.spark.amqp import (AMQPError, Connection, NotAMQP, parse_uri, properties, publish_frames,
                                server_properties)

STREAM, EXCHANGE, RESULTS = "clicks", "page-stats", "page-stats"
END_PAGE = "__end__"          # one last event, late enough to close every window
# what this broker says of itself in Connection.Start ("information"; its
# "product" is "LavinMQ", as LavinMQ's own): lavinmq/amqp/connection.py
THIS_BROKER = "lavinmq for Python"


# the known failures' exit codes (the module's docstring lists them: --help)
EXIT_USAGE = 64             # --uri is not amqp://
EXIT_NO_VHOST = 68          # the vhost does not exist
EXIT_NO_BROKER = 69         # nothing listens there, unknown host, no answer
EXIT_NOT_AMQP = 76          # something that is not an AMQP 0-9-1 broker answers
EXIT_LOGIN = 77             # user name and password refused, or the vhost refused to the user
EXIT_OTHER_BROKER = 78      # another broker, without --any-broker


class WrongBroker(Exception):
    """The broker at --uri is not this one."""


class Failure(Exception):
    """A known way the pipeline cannot start: one line on stderr, and its exit code."""

    def __init__(self, message, code):
        super().__init__(message)
        self.code = code


def log(msg):
    print(f"[pipeline {time.strftime('%H:%M:%S')}] {msg}", flush=True)


def shown_uri(uri):
    """The URI without its password, to print."""
    host, port, user, _, vhost = parse_uri(uri)
    return f"amqp://{user}:***@{host}:{port}/{urllib.parse.quote(vhost, safe='')}"


def check_target(uri, any_broker=False):
    """-> how the broker at uri names itself; WrongBroker when it is not
    this broker (and any_broker is not set), before anything is sent to it."""
    props = server_properties(uri)
    info = props.get("information")
    name = " ".join(str(props[k]) for k in ("product", "version") if props.get(k)) or "an unnamed broker"
    if info:
        name += f" ({info})"
    if info != THIS_BROKER and not any_broker:
        raise WrongBroker(
            f"{shown_uri(uri)} is {name}, not {THIS_BROKER}: the pipeline would declare a stream "
            f"'{STREAM}', an exchange and a queue there and publish into them. Start this broker "
            f"(./dev run), point --uri at it, or pass --any-broker to write there anyway")
    return name


def preflight(uri, any_broker=False):
    """-> how the broker at uri names itself, once it is known that it is
    this broker (or any_broker), that it takes the user and password and
    has the vhost; Failure (a line and an exit code) for each way that
    fails. Nothing is declared or published, and Spark is not started."""
    try:
        host, port, user, _, vhost = parse_uri(uri)
    except ValueError as exc:
        raise Failure(f"--uri {uri!r}: {exc}", EXIT_USAGE) from None
    where, shown = f"{host}:{port}", shown_uri(uri)
    try:
        name = check_target(uri, any_broker)
    except WrongBroker as exc:
        raise Failure(str(exc), EXIT_OTHER_BROKER) from None
    except NotAMQP as exc:
        raise Failure(str(exc), EXIT_NOT_AMQP) from None
    except ConnectionRefusedError:
        raise Failure(f"no broker at {shown}: nothing listens on {where} (start one with ./dev run, or point "
                      f"--uri at one)", EXIT_NO_BROKER) from None
    except socket.gaierror as exc:
        raise Failure(f"no broker at {shown}: the host {host!r} is unknown ({exc.strerror})", EXIT_NO_BROKER) from None
    except (TimeoutError, socket.timeout):
        raise Failure(f"no broker at {shown}: {where} did not take a connection in 5 s", EXIT_NO_BROKER) from None
    except OSError as exc:
        raise Failure(f"no broker at {shown}: {where}: {exc.strerror or exc}", EXIT_NO_BROKER) from None
    try:
        Connection(uri, timeout=10.0).close()
    except AMQPError as exc:
        stage = getattr(exc, "stage", None)
        said = f"(the broker said: {exc.code} {exc.text})"
        if exc.code == 403 or (stage == "login" and exc.code == 320):     # refused, or dropped after the login
            raise Failure(f"login refused by {where} for user {user!r}: wrong user name or password {said}; "
                          f"--uri amqp://USER:PASSWORD@{where}/VHOST", EXIT_LOGIN) from None
        if stage == "open" and exc.code == 530 and "not found" in exc.text:
            raise Failure(f"no vhost {vhost!r} on {where} {said}: create it (lavinmqctl add_vhost NAME) or name "
                          f"another at the end of --uri (%2F is /)", EXIT_NO_VHOST) from None
        if stage == "open" and exc.code == 530:
            raise Failure(f"{where} refused vhost {vhost!r} to user {user!r} {said} (lavinmqctl set_permissions "
                          f"-p VHOST USER '.*' '.*' '.*')", EXIT_LOGIN) from None
        raise Failure(f"{where} closed the connection ({stage}): {exc}", EXIT_NO_BROKER) from None
    except (OSError, TimeoutError) as exc:
        raise Failure(f"{where} did not complete the AMQP handshake: {exc}", EXIT_NO_BROKER) from None
    return name


def start_text(bounds):
    """Where Spark starts reading the stream, said in words: bounds is
    (first offset, next offset) of what it holds, or None when it is empty
    (then the source starts at 0, "from the first message there is", and
    no offset is named: a stream's first message has offset 1, or more
    after retention removed older ones)."""
    if not bounds:
        return f"stream '{STREAM}' is empty: Spark reads it from its first message"
    first, following = bounds
    return (f"stream '{STREAM}' holds offsets {first} to {following - 1} from earlier runs: Spark reads from "
            f"offset {following}, this run's first event")


def progress_text(published, events, spark_read):
    """The progress line's counts. Spark reads one message more than the
    events published: the end marker after them, which closes the last
    windows (a count of 20001 for 20000 events is right)."""
    return (f"published {published}/{events} events | Spark read {spark_read}/{events + 1} messages "
            f"(the events and the end marker)")


def setup_topology(uri):
    """The stream, the exchange and the queue bound to it. Results of
    earlier runs are purged; the stream keeps its history (this run reads
    from its current end)."""
    with Connection(uri) as c:
        c.declare_queue(STREAM, arguments={"x-queue-type": "stream"})
        c.declare_exchange(EXCHANGE, "fanout")
        c.declare_queue(RESULTS)
        c.bind_queue(RESULTS, EXCHANGE)
        c.call(50, 30, b"\x00\x00" + bytes((len(RESULTS),)) + RESULTS.encode() + b"\x00", (50, 31))


class Generator(threading.Thread):
    """Publishes the click events with publisher confirms; knows what the
    aggregates must be."""

    def __init__(self, uri, events, pages, minutes, rate, seed=42):
        super().__init__(name="click-generator", daemon=True)
        self.uri, self.events, self.pages, self.minutes, self.rate = uri, events, pages, minutes, rate
        self.random = random.Random(seed)
        self.base = datetime.datetime(2024, 1, 1, tzinfo=datetime.timezone.utc).timestamp()
        self.expected = collections.Counter()      # (page, minute start) -> clicks
        self.published = 0
        self.error = None

    def event(self, i):
        # a few pages get most of the clicks
        page = f"/page/{min(int(self.random.paretovariate(1.2)) - 1, self.pages - 1)}"
        ts = self.base + i * self.minutes * 60.0 / self.events
        return page, ts, {"user": f"u{self.random.randrange(1000)}", "page": page, "ts": ts}

    def run(self):
        try:
            with Connection(self.uri) as c:
                c.confirm_select()
                props = properties(content_type="application/json", delivery_mode=2)
                started = time.monotonic()
                batch = []
                for i in range(self.events + 1):
                    if i < self.events:
                        page, ts, ev = self.event(i)
                        self.expected[(page, int(ts // 60) * 60)] += 1
                    else:
                        ev = {"user": "-", "page": END_PAGE, "ts": self.base + self.minutes * 60 + 121}
                    batch.append(publish_frames(1, "", STREAM, json.dumps(ev).encode(), props, c.frame_max))
                    if len(batch) >= 500 or i == self.events:
                        c.sock.sendall(b"".join(batch))
                        c.published += len(batch)
                        batch = []
                        c.wait_confirms(c.published)
                        self.published = min(c.published, self.events)
                        ahead = self.published / self.rate - (time.monotonic() - started) if self.rate else 0
                        if ahead > 0:
                            time.sleep(ahead)
                if c.nacked:
                    raise RuntimeError(f"{c.nacked} events were nacked")
        except Exception as exc:      # reported by the main thread
            self.error = exc


def spark_session(app="lavinmq-pipeline", master="local[2]", conf=None):
    from lavinmq.spark.cluster import session
    return session(master, app, conf)


def build_queries(spark, uri, start, out):
    from pyspark.sql import functions as F
    clicks = (spark.readStream.format("lavinmq").option("uri", uri).option("queue", STREAM)
              .option("startingOffsets", str(start)).option("maxOffsetsPerTrigger", "50000").load())
    events = (clicks
              .select(F.from_json(F.col("body").cast("string"), "user STRING, page STRING, ts DOUBLE").alias("e"))
              .select("e.page", F.col("e.ts").cast("timestamp").alias("event_time"))
              .withWatermark("event_time", "1 minute"))
    # the last event's window never closes (nothing comes after it), so it is
    # never emitted; filtering it out instead would be pushed below the
    # watermark and keep it from closing the other windows
    per_minute = (events.groupBy(F.window("event_time", "1 minute").alias("w"), "page").count()
                  .select("page", F.col("w.start").alias("minute"), F.col("count").alias("clicks")))
    to_broker = (per_minute
                 .select(F.to_json(F.struct(F.col("page"), F.date_format("minute", "yyyy-MM-dd'T'HH:mm'Z'")
                                            .alias("minute"), "clicks")).alias("body"),
                         F.col("page").alias("routing_key"),
                         F.struct(F.lit("application/json").alias("content_type")).alias("properties"))
                 .writeStream.queryName("to-broker").format("lavinmq").option("uri", uri)
                 .option("exchange", EXCHANGE)
                 .option("checkpointLocation", os.path.join(out, "checkpoints", "to-broker"))
                 .outputMode("append").start())
    to_parquet = (per_minute.writeStream.queryName("to-parquet").format("parquet")
                  .option("path", os.path.join(out, "page_minute"))
                  .option("checkpointLocation", os.path.join(out, "checkpoints", "to-parquet"))
                  .outputMode("append").start())
    return to_broker, to_parquet


def parquet_rows(spark, out):
    try:
        return spark.read.parquet(os.path.join(out, "page_minute")).count()
    except Exception:           # nothing committed yet
        return 0


def input_rows(query):
    return sum(p.get("numInputRows", 0) for p in query.recentProgress)


def progress_line(query, seen):
    """Spark's progress of the query's last micro-batch (None if it is the
    one already shown): batch id, rows, rows/s and how far behind the
    stream's end it ended (the source's latestOffset, lavinmq.spark.source)."""
    import json
    p = query.lastProgress
    if not p or p["batchId"] == seen.get(query.name):
        return None
    seen[query.name] = p["batchId"]
    src = p["sources"][0] if p["sources"] else {}
    behind = ""
    try:
        latest = json.loads(src.get("latestOffset") or "null")
        if latest:
            behind = f", {latest['maxOffsetsBehindLatest']} offsets behind the stream's end"
    except (ValueError, KeyError, TypeError):
        pass
    return (f"  spark {query.name}: batch {p['batchId']} read {p['numInputRows']} rows "
            f"({p.get('processedRowsPerSecond') or 0:.0f} rows/s) in {p['durationMs'].get('triggerExecution', 0)} ms"
            f"{behind}")


def run(opts, spark=None):
    """-> 0 when every aggregate arrived and matches. spark: a session to
    use (and leave running); by default one is started and stopped."""
    started = time.monotonic()
    own_session = spark is None
    cluster = None
    name = preflight(opts.uri, opts.any_broker)
    log(f"broker {shown_uri(opts.uri)}: {name}")
    if os.path.exists(opts.out):
        shutil.rmtree(opts.out)
    os.makedirs(opts.out)
    setup_topology(opts.uri)
    from lavinmq.spark.offsets import MISSING, Streams
    with Streams(opts.uri) as streams:
        bounds = streams.bounds(STREAM)         # (first, next offset); None when empty
    bounds = None if bounds is MISSING else bounds
    start = bounds[1] if bounds else 0          # 0: from the first message there is
    if own_session:
        master, conf = opts.master, {}
        if opts.cluster:
            from lavinmq.spark.cluster import StandaloneCluster
            log("starting a Spark standalone cluster: a master and two workers (pyspark's own classes)")
            cluster = StandaloneCluster(workers=2, cores=1).start()
            master, conf = cluster.master_url, cluster.app_conf()
        log(f"{start_text(bounds)}; starting Spark ({master})")
        spark = spark_session(master=master, conf=conf)
        if cluster is not None:
            from lavinmq.spark.cluster import wait_executors
            log(f"executors {', '.join(wait_executors(spark, 2))} registered")
    else:
        log(f"{start_text(bounds)}; Spark: {spark.conf.get('spark.master', '?')}")
    try:
        return _run(opts, spark, start, started)
    finally:
        if own_session:
            spark.stop()
        if cluster is not None:
            cluster.stop()


def _run(opts, spark, start, started):
    to_broker, to_parquet = build_queries(spark, opts.uri, start, opts.out)
    gen = Generator(opts.uri, opts.events, opts.pages, opts.minutes, opts.rate)
    gen.start()
    log(f"publishing {opts.events} click events over {opts.minutes} simulated minutes to '{STREAM}'")
    windows_written = received = 0
    deadline = time.monotonic() + opts.timeout
    expected_windows = None
    seen = {}
    try:
        while time.monotonic() < deadline:
            time.sleep(2)
            for q in (to_broker, to_parquet):
                if q.exception() is not None:
                    raise RuntimeError(f"query {q.name or q.id} failed: {q.exception()}")
            if gen.error:
                raise gen.error
            with Connection(opts.uri) as c:
                received = c.declare_queue(RESULTS, passive=True)
            if not gen.is_alive() and expected_windows is None:
                expected_windows = len(gen.expected)
            if expected_windows is not None and received >= expected_windows:
                windows_written = parquet_rows(spark, opts.out)
            log(f"{progress_text(gen.published, opts.events, input_rows(to_broker))} | "
                f"aggregates: {received} in queue '{RESULTS}'"
                + (f", {windows_written} in Parquet" if windows_written else "")
                + (f" (of {expected_windows})" if expected_windows is not None else ""))
            for q in (to_broker, to_parquet):
                line = progress_line(q, seen)
                if line:
                    print(line, flush=True)
            if expected_windows is not None and windows_written >= expected_windows and received >= expected_windows:
                log("every aggregate is in")
                break
        else:
            raise TimeoutError(f"not every aggregate arrived in {opts.timeout} s")
    finally:
        for q in (to_broker, to_parquet):
            q.stop()
    rows = spark.read.parquet(os.path.join(opts.out, "page_minute")).collect()
    got = {(r["page"], int(r["minute"].timestamp())): r["clicks"] for r in rows}
    ok = got == dict(gen.expected)
    top = collections.Counter()
    for (page, _), n in got.items():
        top[page] += n
    print()
    print("summary")
    print(f"  events published to stream '{STREAM}':       {gen.published}")
    print(f"  (page, minute) aggregates written to Parquet: {len(rows)} in {os.path.join(opts.out, 'page_minute')}")
    print(f"  aggregates received on queue '{RESULTS}':     {received} (via exchange '{EXCHANGE}')")
    print(f"  clicks counted:                               {sum(got.values())}")
    print(f"  every aggregate matches the generator:        {'yes' if ok else 'NO'}")
    print("  top pages:                                    " +
          ", ".join(f"{p} {n}" for p, n in top.most_common(5)))
    print(f"  took {time.monotonic() - started:.1f} s")
    return 0 if ok and received == len(rows) else 1


class HelpFormatter(argparse.RawDescriptionHelpFormatter, argparse.ArgumentDefaultsHelpFormatter):
    """The docstring as written, and each option's default."""


def parse_args(argv=None):
    ap = argparse.ArgumentParser(prog="python -m lavinmq.spark.example", description=__doc__,
                                 formatter_class=HelpFormatter)
    ap.add_argument("--uri", default=os.environ.get("LAVINMQ_URI", "amqp://guest:guest@127.0.0.1:5672/%2F"),
                    help="the broker (./dev run's defaults; LAVINMQ_URI sets another default)")
    ap.add_argument("--any-broker", action="store_true",
                    help="write to the broker at --uri even when it is not lavinmq for Python")
    ap.add_argument("--events", type=int, default=20000, help="click events to publish")
    ap.add_argument("--pages", type=int, default=20, help="distinct pages the events are spread over")
    ap.add_argument("--minutes", type=int, default=10, help="simulated minutes the events span")
    ap.add_argument("--rate", type=int, default=5000, help="events per second (0: as fast as possible)")
    ap.add_argument("--out", default="pipeline-out", help="Parquet and checkpoints (replaced)")
    ap.add_argument("--timeout", type=float, default=600, help="seconds to wait for every aggregate")
    where = ap.add_mutually_exclusive_group()
    where.add_argument("--master", default="local[2]",
                       help="Spark master URL; a cluster's workers need lavinmq installed")
    where.add_argument("--cluster", action="store_true",
                       help="start a Spark standalone cluster here (a master and two workers, pyspark's own "
                            "classes, loopback) and run on it")
    return ap.parse_args(argv)


def main(argv=None):
    opts = parse_args(argv)
    try:
        return run(opts)
    except Failure as exc:
        print(f"pipeline: {exc}", file=sys.stderr)
        return exc.code


if __name__ == "__main__":
    sys.exit(main())
