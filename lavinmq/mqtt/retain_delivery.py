"""Retained messages a connection's SUBSCRIBEs matched, sent without
holding up anybody else.

They used to be read from their files, made into records and stored in
the session's queue on the event loop, all before the SUBSCRIBE's turn
ended: five retained messages of 100 MB and one `#` subscribe stopped every
client for 7.4 s, 50,000 small ones for 4.4 s. Now, per connection, one
task:

- matches each filter against the retained topics a slice at a time
  (RetainStore.matching_topics);
- has the PUBLISH packets made in a reader thread (RetainStore.packet: a
  large body is its file's read-only map, a small one read), a batch of at
  most BATCH_BYTES (or one larger message) at a time, in retain.READERS
  threads for the whole broker;
- writes them to the connection's transport as they are, never copied on
  the loop (a large body a CHUNK at a time, while the connection's other
  output waits so that packets never interleave), with packet ids from
  the session's window for QoS 1 and 2 -- not through the session's
  queue, whose store copied a 100 MB body on the loop (150-260 ms here)
  before its delivery copied it again;
- charges the subscriber: the next batch is read only once less than
  WINDOW bytes wait in its transport (and, QoS 1 and 2, its window has
  room), so the memory a SUBSCRIBE holds follows its client's pace: at most
  WINDOW and one batch, not the retained store's size.

A retained message sent at QoS 1 or 2 is acknowledged as any delivery, but
not sent again if the client goes first (it never was in the queue); the
next SUBSCRIBE brings it again. The filters waiting are kept per filter (a
SUBSCRIBE again replaces its QoS, an UNSUBSCRIBE drops it): no more than the
session's subscriptions."""
import asyncio
import logging

from lavinmq.mqtt.retain import readers

log = logging.getLogger("lavinmq.mqtt.retain")

BATCH_BYTES = 1 << 20
BATCH_COUNT = 256
JOIN_BELOW = 65536      # packets smaller than this share a buffer
CHUNK = 1 << 20         # a large body is written a slice at a time
WINDOW = 4 << 20        # bytes waiting in a subscriber's transport before more are read
POLL_FIRST, POLL_MAX = 0.002, 0.05

def _read_batch(store, names, start, qos, count):
    """In a reader thread: the packets of names[start:] until BATCH_BYTES
    or `count` of them -> ([(head or joined packets, [offsets of packet
    ids], body or None)], how many packets, where the next batch starts).
    Small packets are joined into one buffer (one write for them all); a
    large one keeps its body apart, not copied."""
    out, joined, ats, size, n, i = [], bytearray(), [], 0, 0, start
    while i < len(names) and size < BATCH_BYTES and n < count:
        got = store.packet(names[i], qos)
        i += 1
        if got is None:
            continue
        head, at, body = got
        n += 1
        size += len(head) + len(body)
        if len(body) >= JOIN_BELOW:
            out.append((head, [at] if qos else [], body))
            continue
        if qos:
            ats.append(len(joined) + at)
        joined += head
        joined += body
    if joined:
        out.append((joined, ats, None))
    return out, n, i


class RetainedDelivery:
    def __init__(self, conn):
        self.conn = conn
        self.pending = {}       # filter bytes -> (its levels, QoS), in SUBSCRIBE order
        self.current = None     # the filter being delivered
        self.task = None

    def add(self, f, levels, qos):
        self.pending.pop(f, None)
        self.pending[f] = (levels, qos)
        if self.task is None:
            self.task = asyncio.get_running_loop().create_task(self._run())

    def discard(self, f):
        self.pending.pop(f, None)
        if self.current == f:
            self.current = None     # what was read is sent, nothing more

    def cancel(self):
        self.pending.clear()
        self.current = None
        if self.task is not None:
            self.task.cancel()
            self.task = None

    async def _run(self):
        try:
            while self.pending:
                f = next(iter(self.pending))
                levels, qos = self.pending.pop(f)
                self.current = f
                await self._deliver(f, levels, qos)
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("MQTT %s: sending retained messages failed", self.conn.name)
        finally:
            self.current = None
            if self.task is asyncio.current_task():
                self.task = None

    async def _deliver(self, f, levels, qos):
        conn = self.conn
        store = conn.broker.retain
        loop = asyncio.get_running_loop()
        for found in store.matching_topics(levels):
            i = 0
            while i < len(found):
                consumer = await self._room()
                if consumer is None or self.current != f:
                    return
                count = min(BATCH_COUNT, consumer.window) if qos else BATCH_COUNT
                buffers, n, i = await loop.run_in_executor(readers(), _read_batch, store, found, i, qos, count)
                if n and not await self._send(f, buffers, n, qos):
                    return
            await asyncio.sleep(0)      # the next slice of topics in another turn of the loop

    async def _send(self, f, buffers, n, qos):
        """Write a batch of n packets, after what the output buffer holds ->
        False if the connection or the subscription went meanwhile."""
        conn = self.conn
        while True:
            consumer = conn.consumer
            if consumer is None or conn.closing or conn.transport is None or self.current != f:
                return False
            ids = consumer.take_packet_ids(n, qos) if qos else []
            if ids is not None:
                break
            await asyncio.sleep(POLL_MAX)       # the window is full: acks free it
        ids = iter(ids)
        for buf, ats, _ in buffers:
            for at in ats:
                buf[at:at + 2] = next(ids).to_bytes(2, "big")
        # the packets go out whole: nothing else is written meanwhile
        # (deliveries wait, PUBACKs stay in the output buffer)
        conn.flush()
        conn.output_held = True
        try:
            for buf, _, body in buffers:
                conn.send_raw(buf)
                if body is not None and not await self._stream(memoryview(body)):
                    return False
        finally:
            conn.output_held = False
            if not conn.closing and conn.transport is not None:
                conn.flush()
                if conn.consumer is not None:
                    conn.consumer.queue.notify()
        return True

    async def _stream(self, body):
        """A large body in CHUNK slices, each once the transport holds less
        than WINDOW: asyncio's transports copy what they cannot send at
        once (100 MB on the loop), uvloop's keep a reference, and neither
        holds more than WINDOW of it. -> False if the connection went."""
        for i in range(0, len(body), CHUNK):
            if i and await self._room() is None:
                return False
            self.conn.send_raw(body[i:i + CHUNK])
        return True

    async def _room(self):
        """The session's consumer once less than WINDOW bytes wait in the
        transport; None if the connection went."""
        wait = POLL_FIRST
        while True:
            conn = self.conn
            transport = conn.transport
            if conn.consumer is None or conn.closing or transport is None:
                return None
            if transport.get_write_buffer_size() < WINDOW:
                return conn.consumer
            await asyncio.sleep(wait)
            wait = min(POLL_MAX, wait * 2)
