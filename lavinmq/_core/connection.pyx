# cython: language_level=3
import asyncio
import logging

from cpython.buffer cimport PyBUF_WRITE
from cpython.memoryview cimport PyMemoryView_FromMemory
from libc.stdint cimport int64_t, uint8_t, uint16_t, uint32_t, uint64_t
from libc.stdlib cimport malloc, realloc, free
from libc.string cimport memcmp, memmove, memcpy

from lavinmq._core.buffer cimport WriteBuffer, be16, be32, be64, put_be16, put_be32, put_be64
from lavinmq._core.queue cimport Queue
from lavinmq._core.clock cimport monotonic_s, now_ms
from lavinmq._core.channel cimport ConnState, Channel
from lavinmq._core.flow cimport flow_forget
from lavinmq._core.codec cimport decode_method_args, encode_method_args
from lavinmq._core cimport spec

from lavinmq._core import queue as _queue_mod
from lavinmq.errors import (
    AMQPError, ChannelErrorHard, FrameError, UnexpectedFrame, InternalError, SyntaxError_,
    CommandInvalid,
)

log = logging.getLogger("lavinmq.connection")

cdef bytes PROTOCOL_HEADER = b"AMQP\x00\x00\x09\x01"

cdef enum:
    READ_BUFFER = 262144


cdef extern from "malloc.h":
    int mallopt(int param, int value)
    int M_MMAP_THRESHOLD

# Read buffers (256 KiB) must each get their own mapping, so that a closed
# connection's buffer goes back to the OS. glibc's default threshold adapts
# upwards after the first such free and then serves them from the heap,
# where churned connections leave resident holes (RSS grew ~20 MB per 1000
# short connections in the fuzz run). A fixed threshold turns that off.
mallopt(M_MMAP_THRESHOLD, 128 * 1024)


cdef class CoreConnection:

    def __cinit__(self, *args, **kwargs):
        self.rcap = READ_BUFFER
        self.rbuf = <char *>malloc(self.rcap)
        if self.rbuf is NULL:
            raise MemoryError()
        self.state = ConnState(self)
        self.open_phase = PH_OPEN
        self.channels = [None]
        self.channels_hi = {}
        self.channel_max = 2048
        self.frame_max = 131072
        self.last_recv = self.last_send = monotonic_s()

    def __dealloc__(self):
        free(self.rbuf)

    # -- asyncio.BufferedProtocol --------------------------------------------

    def release_buffer(self):
        """The connection is gone: its read buffer goes now, not when the
        garbage collector gets to the connection's reference cycles."""
        free(self.rbuf)
        self.rbuf = NULL
        self.rcap = self.rlen = 0
        self.state.wbuf.clear()
        if self.flow_line is not None:
            flow_forget(self)

    def get_buffer(self, Py_ssize_t sizehint):
        cdef Py_ssize_t need = <Py_ssize_t>self.frame_max + 16    # see max_payload in process()
        cdef char *nb
        if self.rcap - self.rlen < 4096 or self.rcap < need:
            # a partial frame larger than what is left: make room for a whole one
            nb = <char *>realloc(self.rbuf, max(self.rcap * 2, need + self.rlen))
            if nb is NULL:
                raise MemoryError()
            self.rbuf = nb
            self.rcap = max(self.rcap * 2, need + self.rlen)
        return PyMemoryView_FromMemory(self.rbuf + self.rlen, self.rcap - self.rlen, PyBUF_WRITE)

    def buffer_updated(self, Py_ssize_t nbytes):
        cdef uint64_t publishes = self.state.publishes
        self.rlen += nbytes
        self.state.recv_oct += nbytes
        self.last_recv = monotonic_s()
        try:
            self.process()
        except Exception as exc:    # nothing escapes a read callback
            self.connection_error(exc)
        self.end_of_batch()
        if self.state.blocked and self.state.publishes != publishes:
            self.block_reading()      # a resource alarm: no more publishes from here
        if self.state.flow_queue is not None:
            self.flow_batch = self.state.publishes - publishes
            self.slow_down()

    def end_of_batch(self):
        cdef Channel ch
        cdef list dirty = self.state.confirm_dirty
        syncer = self.state.syncer
        if dirty:
            self.state.confirm_dirty = []
            # a confirm also vouches for the acks this connection sent before it
            acks = self.state.acked
            self.state.acked = False
            for x in dirty:
                ch = <Channel>x
                if syncer is None or syncer.idle_for(acks):
                    ch.send_confirms()
                else:
                    # the messages must reach the disk first: the syncer
                    # confirms after the flush that covers them
                    ch.in_confirm_dirty = False
                    syncer.confirm_later(ch, acks)
        self.flush()

    def flush(self):
        cdef WriteBuffer wb = self.state.wbuf
        if wb.len == 0:
            return
        if self.transport is None or self.phase == PH_CLOSED:
            wb.clear()
            return
        self.state.send_oct += wb.len
        self.last_send = monotonic_s()
        wb.send(self.transport)

    # -- frame parsing -------------------------------------------------------

    cdef int process(self) except -1:
        cdef Py_ssize_t pos = 0
        cdef const char *p
        cdef uint8_t ftype
        cdef uint16_t ch
        cdef uint32_t size
        cdef uint32_t max_payload
        self.state.now_ms = now_ms()
        if self.phase == PH_CLOSED or self.framing_lost:
            # after close-ok, or once a frame's bounds could not be trusted:
            # read and discard until the client hangs up (or the close timer)
            self.rlen = 0
            return 0
        if self.phase == PH_HEADER:
            if self.rlen < 8:
                if memcmp(self.rbuf, <const char *>PROTOCOL_HEADER, self.rlen) != 0:
                    self.bad_protocol_header()
                return 0
            if memcmp(self.rbuf, <const char *>PROTOCOL_HEADER, 8) != 0:
                self.bad_protocol_header()
                return 0
            pos = 8
            self.phase = PH_HANDSHAKE
            self.on_protocol_header()
        while self.phase != PH_CLOSED:
            if self.rlen - pos < 7:
                break
            p = self.rbuf + pos
            ftype = <uint8_t>p[0]
            ch = be16(p + 1)
            size = be32(p + 3)
            # frame_max counts the 8 bytes of frame header and end, but many
            # clients (amqpstorm, rabbitpy) send payloads of frame_max: accept
            # 8 bytes of slack, as RabbitMQ does
            max_payload = self.frame_max if self.frame_max >= 4096 else 4096
            if size > max_payload:
                self.lose_framing()
                raise FrameError(f"frame payload of {size} bytes is larger than the negotiated "
                                 f"frame_max {self.frame_max} allows ({self.frame_max - 8} bytes)")
            if self.rlen - pos < <Py_ssize_t>size + 8:
                break
            if <uint8_t>p[7 + size] != 0xCE:
                self.lose_framing()
                raise FrameError("frame-end octet missing")
            pos += size + 8
            self.recv_frames += 1
            try:
                self.handle_frame(ftype, ch, p + 7, size)
            except AMQPError as exc:
                if exc.hard or ch == 0:
                    # the frames handled so far are consumed: left in the
                    # buffer, each later read would handle them (and fail) again
                    self.consume(pos)
                    raise
                self.channel_error(ch, exc)
            except BaseException:
                self.consume(pos)
                raise
        if pos:
            self.consume(pos)
        return 0

    cdef void consume(self, Py_ssize_t pos) noexcept:
        self.rlen -= pos
        if self.rlen:
            memmove(self.rbuf, self.rbuf + pos, self.rlen)

    cdef int lose_framing(self) except -1:
        """A frame header we cannot trust (too large, or no frame-end where
        its size says): nothing after it can be parsed, and a header that
        stayed in the buffer would make every read fail on it again and the
        buffer grow. Everything from here on is discarded; the close-ok the
        client may send is lost with it and the close timer ends the socket."""
        self.framing_lost = True
        self.rlen = 0
        # and stop reading: the kernel's buffers fill and the sender's
        # writes block, instead of both sides spending CPU on bytes that are
        # thrown away until the close timer (the socket is reset then)
        self.block_reading()
        return 0

    cdef int handle_frame(self, uint8_t ftype, uint16_t ch, const char *p, uint32_t size) except -1:
        cdef Channel c
        if ftype == spec.FRAME_METHOD:
            return self.handle_method(ch, p, size)
        if ftype == spec.FRAME_HEARTBEAT:
            if ch != 0:         # LavinMQ's (and the spec's) unexpected frame, not a frame error
                raise UnexpectedFrame("heartbeat frame must be on channel 0")
            return 0
        if ftype == spec.FRAME_HEADER:
            c = self.channel_for_content(ch)
            if c is not None:
                if c.pstate != 1:
                    raise UnexpectedFrame("content header frame without a publish", 60, 40)
                c.on_header(p, size)
            return 0
        if ftype == spec.FRAME_BODY:
            c = self.channel_for_content(ch)
            if c is not None:
                if c.pstate != 2:
                    raise UnexpectedFrame("content body frame without a content header", 60, 40)
                c.on_body(p, size)
            return 0
        raise FrameError(f"unknown frame type {ftype}")

    cdef Channel channel_for_content(self, uint16_t ch):
        cdef object c
        if self.phase != PH_OPEN:
            if self.phase == PH_CLOSING:
                return None
            raise UnexpectedFrame("content frame before the connection is open")
        c = self.lookup(ch) if ch else None
        if c is None:
            # RabbitMQ answers 505 here, and clients expect it
            raise UnexpectedFrame(f"content frame on channel {ch} that is not open")
        if (<Channel>c).closing:
            return None
        return <Channel>c

    cdef inline Channel lookup(self, uint16_t ch):
        if ch < len(self.channels):
            return <Channel>self.channels[ch]
        if self.channels_hi:
            return <Channel>self.channels_hi.get(ch)
        return None

    def get_channel(self, uint16_t ch):
        return self.lookup(ch)

    def set_channel(self, uint16_t ch, Channel c):
        """Open (c) or free (None) channel id ch."""
        if self.lookup(ch) is not None:
            self.open_count -= 1
        if c is not None:
            self.open_count += 1
        if ch < LOW_CHANNELS:
            while len(self.channels) <= ch:
                self.channels.append(None)
            self.channels[ch] = c
        elif c is None:
            self.channels_hi.pop(ch, None)
        else:
            self.channels_hi[ch] = c

    def open_channels(self):
        """Every open channel, in id order."""
        out = [c for c in self.channels if c is not None]
        if self.channels_hi:
            out.extend(self.channels_hi[k] for k in sorted(self.channels_hi))
        return out

    cdef int handle_method(self, uint16_t ch, const char *p, uint32_t size) except -1:
        cdef uint16_t cid, mid
        cdef Channel c = None
        cdef uint8_t bits
        if size < 4:
            raise FrameError("method frame too short")
        cid = be16(p)
        mid = be16(p + 2)
        if self.phase == PH_CLOSING:
            # after connection.close only close/close-ok mean anything
            if cid == spec.CLASS_CONNECTION and (mid == spec.CONNECTION_CLOSE or mid == spec.CONNECTION_CLOSE_OK):
                self.on_method(ch, None, cid, mid, decode_method_args(cid, mid, p + 4, size - 4))
            return 0
        if ch != 0 and self.phase == PH_OPEN:
            c = self.lookup(ch)
            if c is None:
                if cid == spec.CLASS_CHANNEL and mid == spec.CHANNEL_OPEN:
                    self.on_method(ch, None, cid, mid, decode_method_args(cid, mid, p + 4, size - 4))
                    return 0
                raise ChannelErrorHard(f"expected 'channel.open' on channel {ch}", cid, mid)
            if c.closing:
                if cid == spec.CLASS_CHANNEL and (mid == spec.CHANNEL_CLOSE_OK or mid == spec.CHANNEL_CLOSE):
                    self.on_method(ch, c, cid, mid, decode_method_args(cid, mid, p + 4, size - 4))
                return 0
            if c.pstate != 0:
                raise UnexpectedFrame("method frame while a message's content was expected", cid, mid)
            if cid == spec.CLASS_BASIC:
                if mid == spec.BASIC_PUBLISH:
                    return c.on_publish(p + 4, size - 4)
                if mid == spec.BASIC_ACK or mid == spec.BASIC_REJECT or mid == spec.BASIC_NACK:
                    if size < 13:
                        raise FrameError("truncated method arguments", cid, mid)
                    bits = <uint8_t>p[12]
                    if mid == spec.BASIC_ACK:
                        return c.on_ack(be64(p + 4), bits & 1, 0)
                    if mid == spec.BASIC_REJECT:
                        return c.on_ack(be64(p + 4), False, 1 if bits & 1 else 2)
                    return c.on_ack(be64(p + 4), bits & 1, 1 if bits & 2 else 2)
        elif ch != 0 and self.phase != PH_OPEN:
            raise UnexpectedFrame(f"method on channel {ch} before the connection is open", cid, mid)
        self.on_method(ch, c, cid, mid, decode_method_args(cid, mid, p + 4, size - 4))
        return 0

    # -- upcalls, implemented by lavinmq.amqp.connection ----------------------

    def on_protocol_header(self):
        raise NotImplementedError

    def bad_protocol_header(self):
        raise NotImplementedError

    def on_method(self, uint16_t ch, Channel channel, int class_id, int method_id, tuple args):
        raise NotImplementedError

    def channel_error(self, uint16_t ch, exc):
        raise NotImplementedError

    def connection_error(self, exc):
        raise NotImplementedError

    # -- helpers for the control plane --------------------------------------

    def send_method(self, uint16_t ch, int class_id, int method_id, tuple args=()):
        cdef WriteBuffer wb = self.state.wbuf
        cdef Py_ssize_t start = wb.len
        wb.start_method(ch, class_id, method_id)
        try:
            encode_method_args(wb, class_id, method_id, args)
        except BaseException:
            wb.len = start          # never leave half a frame in the output
            raise
        wb.end_frame()

    def send_raw(self, bytes data):
        self.state.wbuf.write_bytes(data)

    def heartbeat(self):
        self.state.wbuf.write_bytes(b"\x08\x00\x00\x00\x00\x00\x00\xce")
        self.flush()

    @property
    def buffered_input(self):
        return self.rlen


def bench_feed(CoreConnection conn, bytes data, int repeat):
    """Benchmarks: feed the same bytes through the frame parser repeat times."""
    cdef int i
    cdef Py_ssize_t n = len(data)
    if n > conn.rcap:
        raise ValueError("bench_feed: data larger than the read buffer")
    for i in range(repeat):
        memcpy(conn.rbuf + conn.rlen, <const char *>data, n)
        conn.rlen += n
        conn.process()


def bench_ack_each(CoreConnection conn, Queue q, uint64_t first_tag, uint64_t n):
    """Benchmarks: a client acking each delivery on its own. n basic.ack
    frames on channel 1 (tags first_tag, first_tag + 1, ...), one a read,
    each answered by the delivery pass that refills the consumer's window
    (its next message written, the ack position kept, the output flushed),
    without an event loop."""
    from lavinmq._core.channel import flush_dirty_connections
    cdef char frm[21]
    cdef uint64_t i
    frm[0] = 1
    put_be16(frm + 1, 1)
    put_be32(frm + 3, 13)
    put_be16(frm + 7, 60)
    put_be16(frm + 9, 80)
    frm[19] = 0
    frm[20] = <char>0xCE
    q.scheduled = True          # the ack's schedule_queue: the pass below is this case's own
    for i in range(n):
        put_be64(frm + 11, first_tag + i)
        memcpy(conn.rbuf + conn.rlen, frm, 21)
        conn.rlen += 21
        conn.process()
        q.deliver_pending()
        q.store.flush_acks()
        flush_dirty_connections()
    q.scheduled = False
    return n
