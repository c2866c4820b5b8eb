"""df.write / df.writeStream .format("lavinmq"): every row becomes a message,
published with publisher confirms; a task fails if the broker nacks any of
its messages (or does not confirm them).

Columns: body (binary or string, required); routing_key, exchange (strings),
headers (map of strings), properties (a struct with any of content_type,
content_encoding, message_id, correlation_id, type, app_id, user_id,
priority, delivery_mode, expiration, reply_to) are optional; other columns
are ignored, so a DataFrame read from format("lavinmq") can be written back.

Options:
  uri                  as the source
  exchange             default exchange for rows without one ("" = the default exchange)
  routingKey           default routing key; with option queue and no exchange, the queue's name
  queue                publish every row to this queue (default exchange; routing_key and
                       exchange columns are ignored)
  mandatory            true (default): a row no queue receives fails the task; false: it is dropped
  deliveryMode         1 or 2 for rows without one
  deduplicationHeader  header that gets the message id (default x-deduplication-header, "" for none)
  confirmWindow        unconfirmed messages before the task waits (default 20000)

Rows without a message_id get a deterministic one: <write id>-<partition>-<row>
for df.write, <query id>-<batch id>-<partition>-<row> for writeStream, so a
task that Spark runs again publishes the same ids and a target with
deduplication (x-message-deduplication) drops the repeats."""
import uuid

from pyspark.sql.datasource import DataSourceArrowWriter, DataSourceStreamArrowWriter, WriterCommitMessage

from lavinmq.spark.schema import PROPERTY_FIELDS

DEFAULT_URI = "amqp://guest:guest@127.0.0.1:5672/%2F"
STRING_PROPS = ("content_type", "content_encoding", "message_id", "correlation_id", "type", "app_id",
                "user_id", "expiration", "reply_to")


class Published(WriterCommitMessage):
    def __init__(self, partition, count):
        self.partition = partition
        self.count = count


class Options:
    def __init__(self, options, schema):
        self.uri = options.get("uri") or DEFAULT_URI
        self.queue = options.get("queue")
        if self.queue:
            if options.get("exchange") or options.get("routingKey"):
                raise ValueError("option queue publishes to that queue: exchange and routingKey do not go with it")
            self.exchange, self.routing_key = "", self.queue
        else:
            self.exchange = options.get("exchange") or ""
            self.routing_key = options.get("routingKey") or ""
        self.mandatory = (options.get("mandatory") or "true").lower() != "false"
        dm = options.get("deliveryMode")
        self.delivery_mode = int(dm) if dm else -1
        if self.delivery_mode not in (-1, 1, 2):
            raise ValueError("option deliveryMode must be 1 or 2")
        header = options.get("deduplicationHeader")
        self.dedup_header = "x-deduplication-header" if header is None else header
        self.window = int(options.get("confirmWindow") or 20000)
        names = set(schema.fieldNames())
        if "body" not in names:
            raise ValueError("writing to lavinmq needs a body column (binary or string)")


def _var(arr):
    """(validity, 64-bit offsets, data, slice offset) of a string/binary column."""
    import pyarrow as pa
    if arr is None:
        return None
    t = arr.type
    if pa.types.is_string(t) or pa.types.is_large_string(t):
        arr = arr.cast(pa.large_string())
    elif pa.types.is_binary(t) or pa.types.is_large_binary(t):
        arr = arr.cast(pa.large_binary())
    else:
        arr = arr.cast(pa.large_string())
    bufs = arr.buffers()
    return (bufs[0], bufs[1], bufs[2], arr.offset)


def _ints(arr):
    import pyarrow as pa
    if arr is None:
        return None
    arr = arr.cast(pa.int32())
    bufs = arr.buffers()
    return (bufs[0], bufs[1], arr.offset)


def columns(batch, fixed_destination=False):
    """The encoder's arguments for one record batch."""
    import pyarrow as pa
    names = set(batch.schema.names)
    if fixed_destination:
        names -= {"routing_key", "exchange"}

    def col(name):
        return batch.column(name) if name in names else None
    out = {"body": _var(col("body")), "routing_key": _var(col("routing_key")), "exchange": _var(col("exchange"))}
    headers = col("headers")
    if headers is not None:
        if not pa.types.is_map(headers.type):
            raise ValueError("the headers column must be a map of strings")
        offsets = headers.offsets          # the slice's offsets, into the whole entries child
        entries = headers.values           # the whole child, whatever the slice
        if offsets.offset != headers.offset:
            raise ValueError("unexpected layout of the headers column")
        out["headers"] = (headers.buffers()[0], offsets.buffers()[1], headers.offset,
                          _var(entries.field(0)), _var(entries.field(1)))
    props = col("properties")
    if props is not None:
        # flatten: each child with the struct's slice and nulls applied
        fields = {props.type.field(i).name: child for i, child in enumerate(props.flatten())}
        unknown = set(fields) - set(PROPERTY_FIELDS)
        if unknown:
            raise ValueError(f"unknown properties {sorted(unknown)}: use {', '.join(PROPERTY_FIELDS)}")
        out["props"] = [_var(fields.get(n)) for n in STRING_PROPS]
        out["priority"] = _ints(fields.get("priority"))
        out["delivery_mode"] = _ints(fields.get("delivery_mode"))
    return out


def publish_batches(opts, batches, id_prefix):
    """Publish every row of the record batches; -> how many. Raises if the
    broker nacks or does not confirm them."""
    from lavinmq.spark._publish import PublishEncoder
    from lavinmq.spark.amqp import Connection
    conn = Connection(opts.uri)
    try:
        conn.confirm_select()
        enc = PublishEncoder(1, conn.frame_max, opts.exchange.encode(), opts.routing_key.encode(),
                             id_prefix.encode(), opts.dedup_header.encode(), opts.delivery_mode, opts.mandatory)
        index = 0
        for rb in batches:
            if rb.num_rows == 0:
                continue
            data = enc.encode(rb.num_rows, index, **columns(rb, bool(opts.queue)))
            conn.sock.sendall(data)
            index += rb.num_rows
            conn.published = index
            if conn.published - conn.confirmed > opts.window:
                conn.wait_confirms(conn.published - opts.window)
            if conn.nacked or conn.returned:
                break
        conn.wait_confirms(index, timeout=120)
        if conn.nacked:
            raise RuntimeError(f"the broker refused (nacked) {conn.nacked} publish(es) of this task")
        if conn.returned:
            raise RuntimeError(f"{conn.returned} message(s) of this task could not be routed to any queue "
                               f"(exchange {opts.exchange!r}); option mandatory=false drops them instead")
        return index
    finally:
        conn.close()


def _partition():
    from pyspark import TaskContext
    ctx = TaskContext.get()
    return ctx.partitionId() if ctx else 0


class BatchWriter(DataSourceArrowWriter):
    def __init__(self, options, schema):
        self.opts = Options(options, schema)
        self.write_id = uuid.uuid4().hex[:16]      # made on the driver: the same for every retry

    def write(self, iterator):
        part = _partition()
        n = publish_batches(self.opts, iterator, f"{self.write_id}-{part}-")
        return Published(part, n)

    def commit(self, messages):
        pass

    def abort(self, messages):
        pass


class StreamWriter(DataSourceStreamArrowWriter):
    def __init__(self, options, schema):
        self.opts = Options(options, schema)

    def write(self, iterator):
        from pyspark import TaskContext
        ctx = TaskContext.get()
        # the query id and batch id survive a restart from the checkpoint: a
        # batch that runs again publishes the same message ids
        query = (ctx.getLocalProperty("sql.streaming.queryId") if ctx else None) or "query"
        batch = (ctx.getLocalProperty("streaming.sql.batchId") if ctx else None) or "0"
        part = ctx.partitionId() if ctx else 0
        n = publish_batches(self.opts, iterator, f"{query}-{batch}-{part}-")
        return Published(part, n)

    def commit(self, messages, batchId):
        pass

    def abort(self, messages, batchId):
        pass
