"""Finding offsets of a stream over AMQP, and reading a range of them.

AMQP has no "what are the first and last offset" method. What it has is
enough: a consumer that starts at `first` (or at a timestamp) gets, as its
first delivery, the first message there with its x-stream-offset header,
and queue.declare(passive) gives the number of messages. Offsets are dense,
so the next offset is first + count.

A probe consumer is cancelled right after consume-ok: this broker runs a
new consumer's first delivery pass before it reads the next method from the
socket, so whatever is deliverable arrives before cancel-ok."""
import time

from lavinmq.spark._columns import DeliveryDecoder
from lavinmq.spark.amqp import Connection

PROBE_PREFETCH = 1000


def probe(conn, queue, spec, min_ts_ms=None):
    """-> (offset, timestamp ms) of the first message at x-stream-offset spec
    (with a timestamp >= min_ts_ms if given), or None if there is none."""
    from lavinmq.spark.schema import arrow_schema
    while True:
        dec = DeliveryDecoder(0, -1)
        conn.qos(PROBE_PREFETCH)
        tag = conn.consume(queue, {"x-stream-offset": spec, "x-stream-timestamp": True}, dec)
        conn.cancel(tag)
        conn.decoder = None
        if dec.deliveries and dec.last_tag:
            conn.ack(dec.last_tag)
        batch = dec.take().record_batch(arrow_schema())
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


class StreamInfo:
    """Offsets of one stream, from the driver."""

    def __init__(self, uri, queue):
        self.uri = uri
        self.queue = queue

    def _conn(self):
        return Connection(self.uri)

    def first_offset(self):
        """Offset of the oldest message, None if the stream holds none."""
        with self._conn() as c:
            got = probe(c, self.queue, "first")
        return got[0] if got else None

    def next_offset(self):
        """Offset the next message will get, as far as can be told: first +
        count (a lower bound while retention runs); None when empty."""
        with self._conn() as c:
            got = probe(c, self.queue, "first")
            if got is None:
                return None
            return got[0] + c.declare_queue(self.queue, passive=True)

    def offset_at(self, ts_ms):
        """Offset of the first message stored at or after ts_ms, None if none."""
        import datetime
        # an AMQP timestamp has whole seconds: start at the second, then skip
        # what is earlier than the ms asked for
        second = datetime.datetime.fromtimestamp(ts_ms // 1000, tz=datetime.timezone.utc)
        with self._conn() as c:
            got = probe(c, self.queue, second, min_ts_ms=ts_ms)
        return got[0] if got else None

    def resolve(self, spec, default):
        """startingOffsets / endingOffsets: earliest, latest, an offset, or
        an ISO 8601 time (and the *Timestamp options' ms). -> an offset; 0
        means "from the first there is" (what an empty stream starts at)."""
        spec = (spec if spec is not None else default).strip()
        if spec == "earliest":
            return self.first_offset() or 0
        if spec == "latest":
            nxt = self.next_offset()
            return nxt if nxt is not None else 0
        if spec.lstrip("-").isdigit():
            n = int(spec)
            if n < 0:
                raise ValueError(f"offset {n}: offsets start at 1")
            return n
        return self.resolve_time(parse_time(spec))

    def resolve_time(self, ts_ms):
        at = self.offset_at(ts_ms)
        if at is not None:
            return at
        nxt = self.next_offset()            # nothing that late: from the next one
        return nxt if nxt is not None else 0


def parse_time(text):
    """ms since 1970 from an ISO 8601 time (or a number of ms)."""
    import datetime
    text = text.strip()
    if text.isdigit():
        return int(text)
    try:
        t = datetime.datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise ValueError(f"{text!r} is not earliest, latest, an offset or an ISO 8601 time") from None
    if t.tzinfo is None:
        t = t.replace(tzinfo=datetime.timezone.utc)
    return int(t.timestamp() * 1000)


def read_range(uri, queue, start, end, schema, prefetch=2000, batch_rows=10000, batch_bytes=32 << 20,
               idle_timeout=5.0, stall_timeout=120.0):
    """Record batches of the messages with offsets in [start, end) of a
    stream, read by one consumer. Stops when end - 1 is reached (or when the
    rest of the range is gone: retention dropped it and nothing follows)."""
    dec = DeliveryDecoder(start, end)
    conn = Connection(uri)
    try:
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
                yield dec.take().record_batch(schema)
            if dec.deliveries != seen:
                seen = dec.deliveries
                last_progress = time.monotonic()
            elif not got and time.monotonic() - last_progress > idle_timeout:
                # nothing for a while: is anything of the range left to come?
                # (not asked inside a message: the rest of it is on its way)
                if dec.between_messages and conn.declare_queue(queue, passive=True) == 0:
                    break
                if time.monotonic() - last_progress > stall_timeout:
                    raise TimeoutError(f"stream {queue}: offsets {dec.last_offset + 1}..{end - 1} did not "
                                       f"arrive in {stall_timeout:.0f} s")
        if dec.batch.rows:
            yield dec.take().record_batch(schema)
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
