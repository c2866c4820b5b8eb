"""spark.read / readStream / write / writeStream .format("lavinmq"): stream
queues as a Spark source (offsets are stream offsets) and any exchange as a
sink. Every option, next to the name Spark's Kafka source gives it, is in
lavinmq/spark/README.md; they are parsed in lavinmq.spark.options.

A streaming query's offset is {queue: the next offset to read} for every
queue it reads; a micro-batch reads [start, end) of each. The progress's
`latestOffset` of the source holds, per queue, the offset the stream has
reached and how far the batch is behind it (avgOffsetsBehindLatest ... as
the Kafka source's metrics: Spark's Python sources have no metrics map)."""
from pyspark.sql.datasource import DataSource, DataSourceReader, DataSourceStreamReader
from pyspark.sql.streaming.datasource import SupportsTriggerAvailableNow

from lavinmq.spark import planning
from lavinmq.spark.offsets import MISSING, Streams, read_range
from lavinmq.spark.options import EARLIEST, LATEST, ReadOptions
from lavinmq.spark.schema import spark_schema


def read_partition(opts, partition):
    from lavinmq.spark.schema import arrow_schema, finish, record_schema
    out = arrow_schema(opts.include_headers)
    queue = partition.queue
    yield from read_range(opts.uri, queue, partition.start, partition.end, record_schema(),
                          prefetch=opts.prefetch, fail_on_data_loss=opts.fail_on_data_loss,
                          finish=lambda rb: finish(rb, queue, out))


class LavinMQDataSource(DataSource):
    @classmethod
    def name(cls):
        return "lavinmq"

    def schema(self):
        include = (self.options.get("includeHeaders") or "true").lower() != "false"
        return spark_schema(include)

    def reader(self, schema):
        return BatchReader(self.options)

    def streamReader(self, schema):
        return StreamReader(self.options)

    def writer(self, schema, overwrite):
        from lavinmq.spark.sink import BatchWriter
        return BatchWriter(self.options, schema)

    def streamWriter(self, schema, overwrite):
        from lavinmq.spark.sink import StreamWriter
        return StreamWriter(self.options, schema)


class BatchReader(DataSourceReader):
    """spark.read.format("lavinmq"): a range of offsets (or times) of each
    stream read; by default all of it (earliest to latest)."""

    def __init__(self, options):
        self.opts = ReadOptions(options)
        with Streams(self.opts.uri) as s:
            self.start, self.end = {}, {}
            for q in self.opts.subscribed():
                bounds = s.bounds(q)
                if bounds is MISSING:
                    raise ValueError(f"there is no queue {q!r} (in the vhost of the uri)")
                self.start[q] = s.resolve(q, self.opts.spec("starting", q, EARLIEST), bounds)
                self.end[q] = s.resolve(q, self.opts.spec("ending", q, LATEST), bounds)

    def partitions(self):
        with Streams(self.opts.uri) as s:
            ranges = planning.checked_ranges(s, self.opts, self.start, self.end)
        return planning.partitions(ranges, self.opts.partition_size, self.opts.min_partitions)

    def read(self, partition):
        return read_partition(self.opts, partition)


def legacy(offset, queues):
    """A checkpoint of the single-queue source before several queues were
    read ({"offset": N}) -> {queue: N}."""
    if set(offset) == {"offset"} and "offset" not in (queues or ()) and isinstance(offset["offset"], int):
        return {q: offset["offset"] for q in queues or ()}
    return offset


class StreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """spark.readStream.format("lavinmq"). Queues that a queuePattern
    matches later are read from their first offset (as the Kafka source
    reads partitions discovered after the start from the earliest)."""

    def __init__(self, options):
        self.opts = ReadOptions(options)
        self.target = None          # {queue: end} for trigger(availableNow=True)
        self.latest = {}            # {queue: next offset} when the last end was chosen
        self.last_end = {}

    def initialOffset(self):
        with Streams(self.opts.uri) as s:
            out = {}
            for q in self.opts.subscribed():
                bounds = s.bounds(q)
                if bounds is MISSING:
                    if self.opts.queues is not None:
                        raise ValueError(f"there is no queue {q!r} (in the vhost of the uri)")
                    continue
                out[q] = s.resolve(q, self.opts.spec("starting", q, LATEST), bounds)
        return dict(sorted(out.items()))

    def getDefaultReadLimit(self):
        from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMaxRows
        if self.opts.max_per_trigger:
            return ReadMaxRows(self.opts.max_per_trigger)
        return ReadAllAvailable()

    def _available(self, s, start):
        """{queue: (from, next offset)} of every queue read now and before."""
        queues = set(start) | set(self.opts.subscribed())
        out = {}
        for q in sorted(queues):
            begin = start.get(q, 0)
            if self.target is not None and q not in self.target:
                out[q] = (begin, begin)         # not there when availableNow began
                continue
            bounds = s.bounds(q)
            if bounds is MISSING or bounds is None:
                # deleted (partitions() reports what it took), or empty
                out[q] = (begin, begin)
                continue
            first, nxt = bounds
            # what retention removed is not counted against maxOffsetsPerTrigger:
            # partitions() reports it (failOnDataLoss) and reads from first
            out[q] = (max(begin, first), max(nxt, begin))
        return out

    def latestOffset(self, start=None, limit=None):
        from pyspark.sql.streaming.datasource import ReadMaxRows
        start = legacy(start or {}, self.opts.queues)
        with Streams(self.opts.uri) as s:
            available = self._available(s, start)
        self.latest = {q: nxt for q, (_, nxt) in available.items()}
        if self.target is not None:
            available = {q: (a, max(a, min(b, self.target[q]))) for q, (a, b) in available.items()}
        if isinstance(limit, ReadMaxRows):
            end = planning.rate_limit(available, limit.max_rows)
        else:
            end = {q: b for q, (a, b) in available.items()}
        # a queue that had nothing keeps the offset it had (0: from the first)
        end = {q: (e if e > available[q][0] or q not in start else start[q]) for q, e in end.items()}
        self.last_end = dict(sorted(end.items()))
        return self.last_end

    def prepareForTriggerAvailableNow(self):
        """trigger(availableNow=True): read up to what is there now in the
        queues there are now, then stop."""
        with Streams(self.opts.uri) as s:
            self.target = {}
            for q in self.opts.subscribed():
                bounds = s.bounds(q)
                if bounds is not MISSING:
                    self.target[q] = bounds[1] if bounds else 0

    def reportLatestOffset(self):
        """Shown as the source's latestOffset in the query's progress: where
        each stream is, and how far behind it this batch's end is."""
        if not self.latest:
            return None
        behind = {q: max(0, self.latest[q] - self.last_end.get(q, self.latest[q])) for q in self.latest}
        lags = list(behind.values())
        return {
            "latest": dict(sorted(self.latest.items())),
            "offsetsBehindLatest": dict(sorted(behind.items())),
            "avgOffsetsBehindLatest": sum(lags) / len(lags),
            "maxOffsetsBehindLatest": max(lags),
            "minOffsetsBehindLatest": min(lags),
        }

    def partitions(self, start, end):
        start = legacy(start or {}, self.opts.queues)
        end = legacy(end, self.opts.queues)
        with Streams(self.opts.uri) as s:
            ranges = planning.checked_ranges(s, self.opts, start, end)
        return planning.partitions(ranges, self.opts.partition_size, self.opts.min_partitions)

    def read(self, partition):
        return read_partition(self.opts, partition)

    def commit(self, end):
        pass


def register(spark):
    """Make format("lavinmq") and format("lavinmq-segments") known to a
    session (a classic one, or a Spark Connect client's)."""
    from lavinmq.spark.segments import SegmentsDataSource
    spark.dataSource.register(LavinMQDataSource)
    spark.dataSource.register(SegmentsDataSource)
