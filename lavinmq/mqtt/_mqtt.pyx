# cython: language_level=3
"""MQTT 3.1.1 connections' per-message path (see _mqtt.pxd).

A PUBLISH becomes a store record in this module: exchange amq.topic, the
topic as routing key with '/' and '.' swapped (RabbitMQ's MQTT plugin's
mapping, so AMQP clients bound to amq.topic get MQTT messages and the other
way round), headers {x-mqtt-publish-qos: QoS}, delivery_mode 2 for QoS 1
and 2. It is routed by amq.topic's Cython trie and appended to each queue's
store, as an AMQP publish is. Sessions are queues (mqtt.<client_id>) bound
to amq.topic; their consumer (_deliver.pxi) writes PUBLISH packets."""
import logging

from cpython.bytearray cimport PyByteArray_AS_STRING, PyByteArray_GET_SIZE
from cpython.buffer cimport PyBUF_WRITE
from cpython.memoryview cimport PyMemoryView_FromMemory
from cpython.object cimport PyObject, PyTypeObject, Py_TYPE
from libc.stdint cimport uint8_t, uint16_t, uint32_t, uint64_t
from libc.stdlib cimport malloc, realloc, free
from libc.string cimport memcpy, memmove, memcmp
from posix.time cimport clock_gettime, timespec, CLOCK_MONOTONIC

from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_GET_SIZE
from lavinmq._core.buffer cimport WriteBuffer, be16, be32, be64, le16, le32, le64, put_le64, put_be16
from lavinmq._core.channel cimport ConnState, FLOW_BACKLOG
from lavinmq._core.flow cimport flow_forget
from lavinmq._core.clock cimport now_ms
from lavinmq._core.props cimport P_HEADERS, PROP_COUNT, prop_field_size
from lavinmq._core.queue cimport Queue, ConsumerBase, schedule_queue, PUBLISH_NO_SPACE
from lavinmq._core.routing cimport Exchange, RouteOut, acquire_route_out, release_route_out
from lavinmq._core.exchange_store cimport keep_routed
from lavinmq._core.segment cimport SP

from lavinmq.mqtt.errors import (
    ProtocolError, ConnectRefused, BAD_PROTOCOL_VERSION,
)

log = logging.getLogger("lavinmq.mqtt")

# MQTTCore.phase, for Python
MP_CONNECT_ = MP_CONNECT
MP_OPEN_ = MP_OPEN
MP_CLOSED_ = MP_CLOSED

include "_codec.pxi"
include "_deliver.pxi"

cdef enum:
    # A connection's first read buffer is small (a device may send a packet a
    # minute); it doubles while reads fill it, up to READ_STREAM, and for a
    # larger packet doubles as the packet's bytes arrive, never ahead of them
    READ_BUFFER = 16384
    READ_STREAM = 262144
    READ_KEEP = 1 << 20         # a buffer above this is given back once it is empty again
    REC_KEEP = 1 << 20

# The properties of a record made from a PUBLISH of QoS 0, 1, 2 (disk form:
# flags LE, headers as a LE length and the wire's table body, delivery_mode)
cdef bytes _qos_props(int qos):
    table = b"\x12x-mqtt-publish-qos" + b"b" + bytes((qos,))
    return b"\x00\x30" + len(table).to_bytes(4, "little") + table + bytes((2 if qos else 1,))

cdef list PROPS = [_qos_props(q) for q in range(3)]
cdef Py_ssize_t PROPS_LEN = len(PROPS[0])
cdef bytes EXCHANGE_NAME = b"amq.topic"

# the Python class of session queues (lavinmq.mqtt.session.SessionQueue):
# a QoS 0 message is not kept for a session whose client is away
cdef PyTypeObject *_session_type = NULL
cdef object _session_type_ref = None


def set_session_type(cls):
    global _session_type, _session_type_ref
    _session_type_ref = cls
    _session_type = <PyTypeObject *>cls


cdef inline double monotonic() noexcept nogil:
    cdef timespec ts
    clock_gettime(CLOCK_MONOTONIC, &ts)
    return ts.tv_sec + ts.tv_nsec * 1e-9


cdef inline bint is_session(Queue q) noexcept:
    return <PyTypeObject *>Py_TYPE(q) == _session_type


cdef class MQTTCore:

    def __cinit__(self, *args, **kwargs):
        self.rcap = READ_BUFFER
        self.rbuf = <char *>malloc(self.rcap)
        if self.rbuf is NULL:
            raise MemoryError()
        self.state = ConnState(self)
        self.open_phase = MP_OPEN
        self.max_packet_size = MAX_REMAINING
        self.may_publish = True
        self.last_recv = self.last_send = monotonic()

    def __dealloc__(self):
        free(self.rbuf)

    def release_buffer(self):
        """The connection is gone: its buffers go now, not when the garbage
        collector gets to its reference cycles."""
        free(self.rbuf)
        self.rbuf = NULL
        self.rcap = self.rlen = 0
        self.state.wbuf.clear()
        self.rec = None
        if self.flow_line is not None:
            flow_forget(self)

    # -- asyncio.BufferedProtocol ------------------------------------------------

    def get_buffer(self, Py_ssize_t sizehint):
        cdef Py_ssize_t cap = self.rcap
        cdef Py_ssize_t newcap = cap
        cdef Py_ssize_t total
        cdef uint32_t rem
        cdef Py_ssize_t k
        cdef char *nb
        if self.filled and cap < READ_STREAM:
            newcap = cap * 2            # the last read filled it: a busy publisher
        if self.rlen >= 2 and self.phase != MP_CLOSED:
            # a packet is partly here: room for more of it, at most doubling
            k = read_varint(self.rbuf + 1, self.rlen - 1, &rem)
            if k > 0 and rem <= self.max_packet_size:
                total = 1 + k + <Py_ssize_t>rem
                if total > cap:
                    newcap = max(newcap, min(total, cap * 2))
        if cap - self.rlen < 4096:
            newcap = max(newcap, cap * 2)
        if newcap != cap:
            nb = <char *>realloc(self.rbuf, newcap)
            if nb is NULL:
                raise MemoryError()
            self.rbuf = nb
            self.rcap = newcap
        self.offered = self.rcap - self.rlen
        return PyMemoryView_FromMemory(self.rbuf + self.rlen, self.offered, PyBUF_WRITE)

    def buffer_updated(self, Py_ssize_t nbytes):
        cdef ConnState st = self.state
        cdef uint64_t publishes = self.publish_count
        self.filled = nbytes == self.offered
        self.rlen += nbytes
        st.recv_oct += nbytes
        self.last_recv = monotonic()
        try:
            self.process()
        except Exception as exc:        # nothing escapes a read callback
            self.connection_error(exc)
        try:
            self.end_batch()
        except Exception as exc:
            self.connection_error(exc)
        if st.blocked and self.publish_count != publishes:
            self.block_reading()        # a resource alarm: no more publishes from here
        if st.flow_queue is not None:
            self.flow_batch = self.publish_count - publishes
            self.slow_down()

    cdef int process(self) except -1:
        cdef Py_ssize_t pos = 0, k
        cdef uint32_t rem
        cdef char *nb
        self.state.now_ms = now_ms()
        try:
            while self.phase != MP_CLOSED and self.rlen - pos >= 2:
                k = read_varint(self.rbuf + pos + 1, self.rlen - pos - 1, &rem)
                if k < 0:
                    break
                if 1 + k + <Py_ssize_t>rem > self.max_packet_size:
                    raise ProtocolError(f"packet of {1 + k + rem} bytes is larger than max_packet_size "
                                        f"{self.max_packet_size}")
                if self.rlen - pos < 1 + k + <Py_ssize_t>rem:
                    break
                self.handle(<uint8_t>self.rbuf[pos], self.rbuf + pos + 1 + k, rem)
                pos += 1 + k + rem
        finally:
            if self.phase == MP_CLOSED:
                self.rlen = 0
            elif pos:
                self.rlen -= pos
                if self.rlen:
                    memmove(self.rbuf, self.rbuf + pos, self.rlen)
            if self.rlen == 0 and self.rcap > READ_KEEP:
                # after a large packet: back to a buffer for streaming
                nb = <char *>realloc(self.rbuf, READ_STREAM)
                if nb is not NULL:
                    self.rbuf = nb
                    self.rcap = READ_STREAM
        return 0

    cdef int handle(self, uint8_t first, const char *p, Py_ssize_t n) except -1:
        cdef uint8_t t = first >> 4
        cdef uint8_t flags = first & 0x0f
        cdef uint16_t pid
        cdef char *bits
        if self.phase == MP_CONNECT:
            if t != T_CONNECT:
                raise ProtocolError(f"the first packet must be CONNECT, not type {t}")
            if flags:
                raise ProtocolError("CONNECT with reserved flags set")
            try:
                args = decode_connect(p, n)
            except ConnectRefused as exc:
                self.refuse_connect(exc)
            else:
                self.on_connect(args)
            return 0
        if t == T_PUBLISH:
            return self.on_publish(flags, p, n)
        if t == T_PUBACK or t == T_PUBREC or t == T_PUBCOMP or t == T_PUBREL:
            if n != 2 or flags != (2 if t == T_PUBREL else 0):
                raise ProtocolError(f"malformed acknowledgement packet (type {t})")
            pid = be16(p)
            if t == T_PUBREL:
                # QoS 2 from the client: the message was routed at PUBLISH;
                # from here on a PUBLISH with this id is a new message
                if self.qos2_in is not None:
                    bits = PyByteArray_AS_STRING(self.qos2_in)
                    bits[pid >> 3] &= ~(1 << (pid & 7))
                self.owe(T_PUBCOMP << 4, pid)
            elif self.consumer is not None:
                self.consumer.on_ack(t, pid)
            return 0
        if t == T_SUBSCRIBE:
            if flags != 2:
                raise ProtocolError("SUBSCRIBE with reserved flags other than 0010")
            self.on_subscribe(*decode_subscribe(p, n))
            return 0
        if t == T_UNSUBSCRIBE:
            if flags != 2:
                raise ProtocolError("UNSUBSCRIBE with reserved flags other than 0010")
            self.on_unsubscribe(*decode_unsubscribe(p, n))
            return 0
        if t == T_PINGREQ:
            if flags or n:
                raise ProtocolError("malformed PINGREQ")
            self.state.wbuf.write_u16(T_PINGRESP << 12)
            return 0
        if t == T_DISCONNECT:
            if flags or n:
                raise ProtocolError("malformed DISCONNECT")
            self.phase = MP_CLOSED
            self.on_disconnect()
            return 0
        if t == T_CONNECT:
            raise ProtocolError("a second CONNECT")
        raise ProtocolError(f"unexpected packet type {t}")

    # -- PUBLISH ------------------------------------------------------------------

    cdef int on_publish(self, uint8_t flags, const char *p, Py_ssize_t n) except -1:
        cdef int qos = (flags >> 1) & 3
        cdef Py_ssize_t tlen, pos
        cdef uint16_t pid = 0
        cdef char *bits
        cdef uint8_t ack_type
        if qos == 3:
            raise ProtocolError("PUBLISH with QoS 3")
        if qos == 0 and flags & 8:
            raise ProtocolError("PUBLISH with QoS 0 and DUP set")
        if n < 2:
            raise ProtocolError("PUBLISH shorter than its topic length")
        tlen = be16(p)
        pos = 2 + tlen
        if qos:
            pos += 2
        if pos > n:
            raise ProtocolError("PUBLISH shorter than its topic and packet id")
        check_topic_name(p + 2, tlen)
        if qos:
            pid = be16(p + 2 + tlen)
            if pid == 0:
                raise ProtocolError("PUBLISH with packet id 0")
        if not self.may_publish:
            raise ProtocolError("access refused: no write permission on amq.topic")
        self.publish_count += 1
        if qos == 2:
            if self.qos2_in is None:
                self.qos2_in = self.qos2_state()      # once per session: its first QoS 2 publish
            bits = PyByteArray_AS_STRING(self.qos2_in)
            if not bits[pid >> 3] & (1 << (pid & 7)):
                bits[pid >> 3] |= 1 << (pid & 7)
                self.publish_record(p + 2, tlen, p + pos, n - pos, qos)
                if flags & 1:
                    self.on_retain(p[2:2 + tlen], p[pos:n], qos)
            # else a resend of one we have: only its PUBREC again
        else:
            self.publish_record(p + 2, tlen, p + pos, n - pos, qos)
            if flags & 1:
                self.on_retain(p[2:2 + tlen], p[pos:n], qos)
        if qos:
            # owed once the message is in the stores (and on disk): end_batch
            self.owe((T_PUBACK if qos == 1 else T_PUBREC) << 4, pid)
        else:
            self.publish_qos0 += 1
        return 0

    cdef int owe(self, uint8_t first, uint16_t pid) except -1:
        """An acknowledgement packet, sent at the end of the read batch."""
        cdef WriteBuffer acks = self.acks
        if acks is None:
            acks = self.acks = WriteBuffer()
        acks.reserve(4)
        acks.buf[acks.len] = <char>first
        acks.buf[acks.len + 1] = 2
        put_be16(acks.buf + acks.len + 2, pid)
        acks.len += 4
        return 0

    cdef int publish_record(self, const char *topic, Py_ssize_t tlen, const char *body, Py_ssize_t blen,
                            int qos) except -1:
        """Build the record in self.rec, route it through amq.topic and
        append it to every queue it reaches."""
        cdef ConnState st = self.state
        cdef WriteBuffer wb = self.rec
        cdef Exchange ex = self.exchange
        cdef Py_ssize_t i, rk_off, props_off
        cdef RouteOut out
        cdef Queue q
        cdef int rc
        cdef int refused = 0
        cdef const char *r
        cdef Py_ssize_t rn
        if ex is None:
            raise ProtocolError("PUBLISH before the connection is set up")
        if <uint64_t>blen > st.max_message_size:
            raise ProtocolError(f"message of {blen} bytes is larger than max_message_size {st.max_message_size}")
        if wb is None:
            wb = self.rec = WriteBuffer()
        elif wb.cap > REC_KEEP:
            wb.shrink(REC_KEEP)
        wb.clear()
        wb.reserve(8 + 1 + 9 + 1 + tlen + PROPS_LEN + 8 + blen)
        put_le64(wb.buf, st.now_ms)
        wb.buf[8] = 9
        memcpy(wb.buf + 9, <const char *>EXCHANGE_NAME, 9)
        wb.buf[18] = <char>tlen
        rk_off = 19
        for i in range(tlen):
            wb.buf[rk_off + i] = swap_separator(topic[i])
        props_off = rk_off + tlen
        memcpy(wb.buf + props_off, <const char *>(<bytes>PROPS[qos]), PROPS_LEN)
        put_le64(wb.buf + props_off + PROPS_LEN, <uint64_t>blen)
        memcpy(wb.buf + props_off + PROPS_LEN + 8, body, blen)
        wb.len = props_off + PROPS_LEN + 8 + blen
        out = acquire_route_out()
        r, rn = wb.buf, wb.len
        try:
            ex.route(out, wb.buf + rk_off, tlen, wb.buf + props_off, PROPS_LEN)
            if out.npstores:
                # a persistent exchange bound to amq.topic keeps it, stamped with its x-offset
                r = keep_routed(out, r, &rn, &refused)
            if out.nq == 0:
                self.unroutable_count += 1
            else:
                ex.publish_out_count += 1
            for i in range(out.nq):
                q = <Queue><object>out.queues[i]
                if q.closed:
                    continue
                if qos == 0 and not q.consumers and is_session(q):
                    # QoS 0 is not kept for a session whose client is away (as LavinMQ)
                    self.dropped_offline += 1
                    continue
                rc = q.publish(r, rn)
                if rc:
                    refused |= rc
                elif (q.consumers and q.store.ready > FLOW_BACKLOG) or q.expiry_behind:
                    st.flow_queue = q
        finally:
            release_route_out(out)
        if refused & PUBLISH_NO_SPACE:
            # MQTT 3.1.1 has no negative acknowledgement: the client learns by
            # the connection closing, and publishes again after reconnecting
            raise ProtocolError("disk full: the message could not be stored")
        return 0

    def publish_message(self, bytes topic, bytes body, int qos):
        """A will (or a test) published as if it came in a PUBLISH."""
        check_topic_name(topic, len(topic))
        self.state.now_ms = now_ms()
        self.publish_record(topic, len(topic), body, len(body), qos)

    # -- output ---------------------------------------------------------------------

    cdef int end_batch(self) except -1:
        """PUBACK/PUBREC/PUBCOMP of the batch: now, or once a flush has put
        the messages on disk (group commit, lavinmq.sync), in order."""
        cdef WriteBuffer acks = self.acks
        syncer = self.state.syncer
        if acks is not None and acks.len:
            if syncer is None or (self.acks_deferred == 0 and syncer.idle_for(True)):
                self.state.wbuf.write_raw(acks.buf, acks.len)
                acks.clear()
            else:
                self.acks_deferred += 1
                syncer.after_flush(_DeferredAcks(self, acks.take()))
        self.flush()
        return 0

    def send_deferred(self, bytes data):
        self.acks_deferred -= 1
        if self.phase != MP_CLOSED:
            self.state.wbuf.write_bytes(data)
            return self
        return None

    def flush(self):
        cdef WriteBuffer wb = self.state.wbuf
        if wb.len == 0 or self.output_held:
            return
        if self.transport is None:
            wb.clear()
            return
        self.state.send_oct += wb.len
        self.last_send = monotonic()
        self.transport.write(wb.take())

    def send_raw(self, buf):
        """Part of a packet made elsewhere (a retained message, lavinmq.mqtt.
        retain_delivery), written as it is; the caller holds other output
        back (output_held) until its packet is whole."""
        if self.transport is None:
            return
        self.state.send_oct += len(buf)
        self.transport.write(buf)
        self.last_send = monotonic()

    def send(self, bytes data):
        """A control packet from Python (CONNACK, SUBACK, ...); flushed with
        the batch it answers, or by the caller."""
        self.state.wbuf.write_bytes(data)

    # -- upcalls, implemented by lavinmq.mqtt.connection ------------------------------

    def on_connect(self, tuple args):
        raise NotImplementedError

    def refuse_connect(self, exc):
        raise NotImplementedError

    def qos2_state(self):
        """-> the session's bytearray of QoS 2 packet ids awaiting PUBREL."""
        raise NotImplementedError

    def on_subscribe(self, uint16_t pid, list filters):
        raise NotImplementedError

    def on_unsubscribe(self, uint16_t pid, list filters):
        raise NotImplementedError

    def on_disconnect(self):
        raise NotImplementedError

    def on_retain(self, bytes topic, bytes body, int qos):
        raise NotImplementedError

    def connection_error(self, exc):
        raise NotImplementedError

    @property
    def buffered_input(self):
        return self.rlen


cdef class _DeferredAcks:
    """An after-flush callback without a closure per batch of acks."""
    cdef MQTTCore conn
    cdef bytes data

    def __init__(self, MQTTCore conn, bytes data):
        self.conn = conn
        self.data = data

    def __call__(self):
        return self.conn.send_deferred(self.data)


def bench_feed(MQTTCore conn, bytes data, int repeat):
    """Benchmarks and tests: feed the same bytes through the packet reader
    repeat times (no event loop: acks go out at once)."""
    cdef int i
    cdef Py_ssize_t n = len(data)
    for i in range(repeat):
        if conn.rlen + n > conn.rcap:
            raise ValueError("bench_feed: data larger than the read buffer")
        memcpy(conn.rbuf + conn.rlen, <const char *>data, n)
        conn.rlen += n
        conn.process()
        conn.end_batch()
