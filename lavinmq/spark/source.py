"""spark.read / readStream / write / writeStream .format("lavinmq"): a stream
queue as a Spark source (offsets are stream offsets) and any exchange as a
sink. Options (all strings, as Spark passes them):

  uri                   amqp://user:password@host:port/vhost (default amqp://guest:guest@127.0.0.1:5672/%2F)
  queue                 the stream to read
  startingOffsets       earliest | latest | <offset> | <ISO 8601 time>   (default: streaming latest, batch earliest)
  startingTimestamp     ms since 1970 (instead of startingOffsets)
  endingOffsets         batch only: latest | <offset> (exclusive) | <ISO 8601 time>   (default latest)
  endingTimestamp       batch only: ms since 1970
  maxOffsetsPerTrigger  streaming: at most this many offsets per micro-batch
  partitionSize         offsets per Spark partition: one consumer each (default 250000)
  prefetch              consumer prefetch of each partition's reader (default 2000)

The sink's options are in lavinmq.spark.sink."""
from pyspark.sql.datasource import (
    DataSource, DataSourceReader, DataSourceStreamReader, InputPartition,
)
from pyspark.sql.streaming.datasource import SupportsTriggerAvailableNow

from lavinmq.spark import offsets as off
from lavinmq.spark.amqp import Connection
from lavinmq.spark.schema import spark_schema

DEFAULT_URI = "amqp://guest:guest@127.0.0.1:5672/%2F"


def _int(options, key, default):
    v = options.get(key)
    if v is None or v == "":
        return default
    try:
        n = int(v)
    except ValueError:
        raise ValueError(f"option {key} must be an integer, not {v!r}") from None
    if n <= 0:
        raise ValueError(f"option {key} must be positive")
    return n


class Settings:
    """The options a reader needs, checked once on the driver."""

    def __init__(self, options):
        self.uri = options.get("uri") or DEFAULT_URI
        self.queue = options.get("queue")
        if not self.queue:
            raise ValueError("option queue (the stream to read) is required")
        self.partition_size = _int(options, "partitionSize", 250_000)
        self.prefetch = min(_int(options, "prefetch", 2000), 65535)
        self.max_per_trigger = _int(options, "maxOffsetsPerTrigger", 0) if options.get("maxOffsetsPerTrigger") else 0
        self.options = options

    def info(self):
        return off.StreamInfo(self.uri, self.queue)

    def start(self, default):
        ts = self.options.get("startingTimestamp")
        if ts:
            return self.info().resolve_time(int(ts))
        return self.info().resolve(self.options.get("startingOffsets"), default)


class RangePartition(InputPartition):
    def __init__(self, start, end):
        super().__init__((start, end))
        self.start = start
        self.end = end


def plan(settings, start, end):
    """Partitions for [start, end): ranges below the oldest message are gone
    (retention) and are not planned."""
    if end <= start:
        return []
    if start <= 1 or start < end - settings.partition_size:
        first = settings.info().first_offset()
        if first is not None and first > start:
            start = min(first, end)
    return [RangePartition(a, b) for a, b in off.split(start, end, settings.partition_size)]


def read_partition(settings, partition):
    from lavinmq.spark.schema import arrow_schema
    yield from off.read_range(settings.uri, settings.queue, partition.start, partition.end, arrow_schema(),
                              prefetch=settings.prefetch)


class LavinMQDataSource(DataSource):
    @classmethod
    def name(cls):
        return "lavinmq"

    def schema(self):
        return spark_schema()

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
    """spark.read.format("lavinmq"): a range of offsets (or times) of a stream."""

    def __init__(self, options):
        self.settings = Settings(options)
        self.start = self.settings.start("earliest")
        ts = options.get("endingTimestamp")
        if ts:
            self.end = self.settings.info().resolve_time(int(ts))
        else:
            spec = options.get("endingOffsets") or "latest"
            self.end = self.settings.info().resolve(spec, "latest")

    def partitions(self):
        return plan(self.settings, self.start, self.end)

    def read(self, partition):
        return read_partition(self.settings, partition)


class StreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """spark.readStream.format("lavinmq"): offsets are {"offset": N}, the
    next stream offset to read; a micro-batch reads [start, end)."""

    def __init__(self, options):
        self.settings = Settings(options)
        self.target = None          # the end for trigger(availableNow=True)

    def initialOffset(self):
        return {"offset": self.settings.start("latest")}

    def getDefaultReadLimit(self):
        from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMaxRows
        if self.settings.max_per_trigger:
            return ReadMaxRows(self.settings.max_per_trigger)
        return ReadAllAvailable()

    def latestOffset(self, start=None, limit=None):
        from pyspark.sql.streaming.datasource import ReadMaxRows
        begin = start["offset"] if start else 0
        with Connection(self.settings.uri) as c:
            got = off.probe(c, self.settings.queue, "first")
            if got is None:
                return {"offset": begin}     # empty: nothing new
            first = got[0]
            # dense offsets: the next one is first + count (never more than
            # the truth, even while retention or publishes run in between)
            end = first + c.declare_queue(self.settings.queue, passive=True)
        end = max(end, begin)
        if isinstance(limit, ReadMaxRows):
            end = min(end, max(begin, first) + limit.max_rows)
        if self.target is not None:
            end = min(end, max(begin, self.target))
        return {"offset": end}

    def prepareForTriggerAvailableNow(self):
        """trigger(availableNow=True): read up to what is there now, then stop."""
        nxt = self.settings.info().next_offset()
        self.target = nxt if nxt is not None else 0

    def reportLatestOffset(self):
        nxt = self.settings.info().next_offset()
        return {"offset": nxt} if nxt is not None else None

    def partitions(self, start, end):
        return plan(self.settings, start["offset"], end["offset"])

    def read(self, partition):
        return read_partition(self.settings, partition)

    def commit(self, end):
        pass


def register(spark):
    """Make format("lavinmq") and format("lavinmq-segments") known to a session."""
    from lavinmq.spark.segments import SegmentsDataSource
    spark.dataSource.register(LavinMQDataSource)
    spark.dataSource.register(SegmentsDataSource)
