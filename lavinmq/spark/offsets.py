"""Finding offsets of streams over AMQP, and reading a range of one.

AMQP has no "what are the first and last offset" method. What it has is
enough: a consumer that starts at `first` (or at a timestamp) gets, as its
first delivery, the first message there with its x-stream-offset header,
and queue.declare(passive) gives the number of messages. Offsets are dense,
so the next offset is first + count.

A probe consumer is cancelled right after consume-ok: this broker runs a
new consumer's first delivery pass before it reads the next method from the
socket, so whatever is deliverable arrives before cancel-ok."""
import logging
import time

from lavinmq.spark._columns import DeliveryDecoder
from lavinmq.spark.amqp import Connection

PROBE_PREFETCH = 1000
MISSING = "missing"         # bounds() of a queue that does not exist
log = logging.getLogger("lavinmq.spark")


class DataLossError(RuntimeError):
    """Offsets a query still had to read are gone (retention, or the queue
    was deleted); failOnDataLoss=false skips them with a warning instead."""


def data_loss(fail, queue, first_lost, last_lost, why):
    text = (f"stream {queue!r}: offsets {first_lost}..{last_lost} are gone before this query read them "
            f"({why})")
    if fail:
        raise DataLossError(text + ". Restart from another offset, or set failOnDataLoss=false to skip "
                                   "what is gone (as Spark's Kafka source)")
    log.warning("%s: skipped (failOnDataLoss=false)", text)


def probe(conn, queue, spec, min_ts_ms=None):
    """-> (offset, timestamp ms) of the first message at x-stream-offset spec
    (with a timestamp >= min_ts_ms if given), or None if there is none."""
    from lavinmq.spark.schema import record_schema
    while True:
        dec = DeliveryDecoder(0, -1)
        conn.qos(PROBE_PREFETCH)
        tag = conn.consume(queue, {"x-stream-offset": spec, "x-stream-timestamp": True}, dec)
        conn.cancel(tag)
        conn.decoder = None
        if dec.deliveries and dec.last_tag:
            conn.ack(dec.last_tag)
        batch = dec.take().record_batch(record_schema())
        if batch.num_rows == 0:
            return None
        offsets = batch.column("offset").to_pylist()
        stamps = [t.timestamp() * 1000 if t is not None else None
                  for t in batch.column("timestamp").to_pylist()]
        if min_ts_ms is None:
            return offsets[0], stamps[0]
        for o, t in zip(offsets, stamps):
            if t is not None and t >= min_ts_ms:
                return o, t
        spec = offsets[-1] + 1          # all of them earlier: look further


class Streams:
    """Offsets of streams, from the driver, over one connection."""

    def __init__(self, uri):
        self.uri = uri
        self._conn = None

    @property
    def conn(self):
        if self._conn is None:
            self._conn = Connection(self.uri)
        return self._conn

    def close(self):
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def bounds(self, queue):
        """(first offset, next offset) of a stream; None when it holds no
        message; MISSING when there is no such queue. next = first + count
        (a lower bound while retention or publishes run in between)."""
        if self.conn.message_count(queue) is None:
            return MISSING
        got = probe(self.conn, queue, "first")
        if got is None:
            return None
        return got[0], got[0] + self.conn.declare_queue(queue, passive=True)

    def offset_at(self, queue, ts_ms):
        """Offset of the first message stored at or after ts_ms, None if none."""
        import datetime
        # an AMQP timestamp has whole seconds: start at the second, then skip
        # what is earlier than the ms asked for
        second = datetime.datetime.fromtimestamp(ts_ms // 1000, tz=datetime.timezone.utc)
        got = probe(self.conn, queue, second, min_ts_ms=ts_ms)
        return got[0] if got else None

    def resolve(self, queue, spec, bounds=None):
        """A spec (lavinmq.spark.options) -> an offset; 0 means "from the
        first there is" (what an empty stream starts at)."""
        b = self.bounds(queue) if bounds is None else bounds
        if b is MISSING:
            raise ValueError(f"there is no queue {queue!r} (in the vhost of the uri)")
        if spec[0] == "offset":
            return spec[1]
        if spec[0] == "earliest":
            return b[0] if b else 0
        if spec[0] == "time":
            at = self.offset_at(queue, spec[1]) if b else None
            if at is not None:
                return at
        return b[1] if b else 0                 # latest, or nothing that late: the next one


class StreamInfo:
    """Offsets of one stream, from the driver (one connection per call)."""

    def __init__(self, uri, queue):
        self.uri = uri
        self.queue = queue

    def first_offset(self):
        """Offset of the oldest message, None if the stream holds none."""
        with Streams(self.uri) as s:
            b = s.bounds(self.queue)
        return b[0] if b and b is not MISSING else None

    def next_offset(self):
        """Offset the next message will get, as far as can be told; None when empty."""
        with Streams(self.uri) as s:
            b = s.bounds(self.queue)
        return b[1] if b and b is not MISSING else None


def read_range(uri, queue, start, end, schema, prefetch=2000, batch_rows=10000, batch_bytes=32 << 20,
               idle_timeout=5.0, stall_timeout=120.0, fail_on_data_loss=True, finish=None):
    """Record batches of the messages with offsets in [start, end) of a
    stream, read by one consumer. Stops when end - 1 is reached, or when the
    rest of the range is gone (retention dropped it and nothing follows):
    offsets found missing are data loss (raised, or logged and skipped).
    finish(record batch) -> record batch: the columns the query asked for."""
    dec = DeliveryDecoder(start, end)
    conn = Connection(uri)
    finish = finish or (lambda b: b)
    checked = False

    def batch():
        nonlocal checked
        rb = dec.take().record_batch(schema)
        if not checked and rb.num_rows:
            checked = True
            first = rb.column("offset")[0].as_py()
            if start > 0 and first > start:
                data_loss(fail_on_data_loss, queue, start, first - 1, f"the stream now starts at {first}")
        return finish(rb)
    try:
        if conn.message_count(queue) is None:
            data_loss(fail_on_data_loss, queue, start, end - 1, "the queue was deleted")
            return
        conn.qos(prefetch)
        tag = conn.consume(queue, {"x-stream-offset": start, "x-stream-timestamp": True}, dec)
        acked = 0
        last_progress = time.monotonic()
        seen = 0
        while not dec.done:
            got = conn.recv(1.0)
            if dec.last_tag - acked >= prefetch // 2:
                conn.ack(dec.last_tag)
                acked = dec.last_tag
            # a read may end inside a message (header here, body to come):
            # a batch is cut only between messages
            if dec.between_messages and (dec.batch.rows >= batch_rows or dec.batch.body_bytes >= batch_bytes):
                yield batch()
            if dec.deliveries != seen:
                seen = dec.deliveries
                last_progress = time.monotonic()
            elif not got and time.monotonic() - last_progress > idle_timeout:
                # nothing for a while: is anything of the range left to come?
                # (not asked inside a message: the rest of it is on its way)
                if dec.between_messages and conn.declare_queue(queue, passive=True) == 0:
                    if dec.last_offset < end - 1:
                        data_loss(fail_on_data_loss, queue, max(start, dec.last_offset + 1), end - 1,
                                  "the stream holds no message any more")
                    break
                if time.monotonic() - last_progress > stall_timeout:
                    raise TimeoutError(f"stream {queue}: offsets {dec.last_offset + 1}..{end - 1} did not "
                                       f"arrive in {stall_timeout:.0f} s")
        if dec.batch.rows:
            yield batch()
        elif not checked and start > 0 and dec.last_offset >= end:
            # every delivery was past the range: retention took all of it
            data_loss(fail_on_data_loss, queue, start, end - 1, f"the stream now starts after {end - 1}")
        try:
            conn.cancel(tag)
        except Exception:
            pass
    finally:
        conn.close()


def split(start, end, size):
    """[start, end) in pieces of at most size offsets."""
    out = []
    while start < end:
        out.append((start, min(end, start + size)))
        start += size
    return out
