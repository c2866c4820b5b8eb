# cython: language_level=3
"""The message path of shovels and federation links: deliveries read from
one AMQP connection become publishes on another, as bytes.

A client connection hands each read to a FrameReader, which walks every
complete frame in it. The plain reader returns the method frames for the
control plane (declare-ok, consume-ok, close ...) and skips content. A Relay
owns two readers: its SourceReader turns basic.deliver + header + body frames
into basic.publish + header + body frames in an output buffer (one write per
read batch), its DestReader counts the destination's publisher confirms and
writes basic.ack (multiple) for the source when a run of publishes is
confirmed. No Python object is made per message, except in collect mode
(HTTP destinations), where each message is handed up whole.

Confirms map to source deliveries through a ring indexed by publish
sequence number: slot seq holds the delivery tag the publish came from.
Delivery tags on one channel only grow, so acking the source up to the tag
of the last contiguously confirmed publish (multiple) never acks a message
that is not yet safe at the destination."""
from cpython.bytes cimport PyBytes_FromStringAndSize, PyBytes_AS_STRING, PyBytes_GET_SIZE
from libc.stdint cimport uint8_t, uint16_t, uint32_t, uint64_t
from libc.stdlib cimport calloc, free
from libc.string cimport memcmp

from lavinmq._core.buffer cimport WriteBuffer, be16, be32, be64, put_be32, copy_short

from lavinmq.errors import FrameError, SyntaxError_

cdef enum:
    FRAME_METHOD = 1
    FRAME_HEADER = 2
    FRAME_BODY = 3
    FRAME_HEARTBEAT = 8
    FRAME_END = 0xCE

# ack modes, as LavinMQ names them
cdef enum:
    ON_CONFIRM = 0
    ON_PUBLISH = 1
    NO_ACK = 2

ACK_MODES = {"on-confirm": ON_CONFIRM, "on-publish": ON_PUBLISH, "no-ack": NO_ACK}

# where a message is between its frames
cdef enum:
    EXPECT_METHOD = 0
    EXPECT_HEADER = 1
    EXPECT_BODY = 2


cdef class FrameReader:
    """Splits reads into frames. Method frames come back to Python as
    (channel, class_id, method_id, arguments bytes); content frames are
    skipped (a plain client connection never asks for content)."""
    cdef:
        bytearray pending
        public uint32_t frame_max      # the largest frame accepted (frame_max + slack)
        public uint64_t frames

    def __init__(self, uint32_t frame_max=131072 + 4096):
        self.pending = bytearray()
        self.frame_max = frame_max

    def feed(self, data):
        """Every complete frame in pending + data; the rest waits."""
        cdef list out = []
        cdef const uint8_t[::1] view
        cdef object buf
        cdef Py_ssize_t n, pos = 0
        cdef uint32_t size
        cdef uint8_t ftype
        cdef const char *p
        cdef bint from_pending = len(self.pending) > 0
        if from_pending:
            self.pending += data
            buf = self.pending
        else:
            buf = data
        n = len(buf)
        if n == 0:
            return out
        view = buf
        p = <const char *>&view[0]
        try:
            while n - pos >= 7:
                ftype = <uint8_t>p[pos]
                size = be32(p + pos + 3)
                if size > self.frame_max:
                    raise FrameError(f"frame of {size} bytes is over frame_max {self.frame_max}")
                if n - pos < <Py_ssize_t>size + 8:
                    break
                if <uint8_t>p[pos + 7 + size] != FRAME_END:
                    raise FrameError(f"frame end byte missing (frame type {ftype})")
                self.frames += 1
                self.on_frame(ftype, be16(p + pos + 1), p + pos + 7, size, out)
                pos += <Py_ssize_t>size + 8
        finally:
            del view
        if from_pending:
            if pos:
                del self.pending[:pos]
        elif pos < n:
            self.pending += buf[pos:]
        return out

    cdef int on_frame(self, uint8_t ftype, uint16_t ch, const char *p, uint32_t size, list out) except -1:
        if ftype == FRAME_METHOD:
            if size < 4:
                raise FrameError("method frame shorter than its class and method ids")
            out.append((ch, be16(p), be16(p + 2), PyBytes_FromStringAndSize(p + 4, size - 4)))
        elif ftype != FRAME_HEADER and ftype != FRAME_BODY and ftype != FRAME_HEARTBEAT:
            raise FrameError(f"unknown frame type {ftype}")
        return 0

    @property
    def buffered(self):
        return len(self.pending)


cdef class SourceReader(FrameReader):
    cdef Relay relay

    cdef int on_frame(self, uint8_t ftype, uint16_t ch, const char *p, uint32_t size, list out) except -1:
        cdef Relay r = self.relay
        if ch != r.src_ch or ch == 0:
            return FrameReader.on_frame(self, ftype, ch, p, size, out)
        if ftype == FRAME_METHOD:
            if size >= 4 and be16(p) == 60 and be16(p + 2) == 60:
                return r.on_deliver(p + 4, size - 4)
            return FrameReader.on_frame(self, ftype, ch, p, size, out)
        if ftype == FRAME_HEADER:
            return r.on_header(p, size)
        if ftype == FRAME_BODY:
            return r.on_body(p, size)
        return FrameReader.on_frame(self, ftype, ch, p, size, out)


cdef class DestReader(FrameReader):
    cdef Relay relay

    cdef int on_frame(self, uint8_t ftype, uint16_t ch, const char *p, uint32_t size, list out) except -1:
        cdef Relay r = self.relay
        cdef uint16_t mid
        if ftype == FRAME_METHOD and ch == r.dst_ch and ch != 0 and size >= 13 and be16(p) == 60:
            mid = be16(p + 2)
            if mid == 80 or mid == 120:      # basic.ack / basic.nack: delivery tag, multiple bit
                return r.on_confirm(be64(p + 4), (<uint8_t>p[12]) & 1, mid == 120)
        return FrameReader.on_frame(self, ftype, ch, p, size, out)


cdef Py_ssize_t value_size(const char *p, Py_ssize_t avail) except -1:
    """Bytes taken by one field value (its type byte included)."""
    cdef Py_ssize_t need
    cdef char t
    if avail < 1:
        raise SyntaxError_("field value runs past its table")
    t = p[0]
    if t == b't' or t == b'b' or t == b'B':
        need = 2
    elif t == b's' or t == b'u':
        need = 3
    elif t == b'I' or t == b'i' or t == b'f':
        need = 5
    elif t == b'l' or t == b'L' or t == b'd' or t == b'T':
        need = 9
    elif t == b'D':
        need = 6
    elif t == b'V':
        need = 1
    elif t == b'S' or t == b'x' or t == b'F' or t == b'A':
        if avail < 5:
            raise SyntaxError_("field value runs past its table")
        need = 5 + <Py_ssize_t>be32(p + 1)
    else:
        raise SyntaxError_(f"unknown field type {chr(<uint8_t>t)!r}")
    if need > avail:
        raise SyntaxError_("field value runs past its table")
    return need


cdef class Relay:
    """Deliveries on the source channel -> publishes on the destination
    channel, and the destination's confirms -> acks on the source."""
    cdef:
        readonly SourceReader source
        readonly DestReader dest
        WriteBuffer dst_out
        WriteBuffer src_out
        WriteBuffer body            # collect mode: the body being assembled
        uint16_t src_ch, dst_ch
        uint32_t dst_body_max       # payload of one body frame at the destination
        int ack_mode
        bytes dst_exchange          # None: the message's own
        bytes dst_key               # None: the message's own
        bint collect
        list collected
        bytes rf_plain, rf_redelivered     # x-received-from entries to append (federation)
        public int max_hops         # 0: no limit; drops at or above it (exchange federation)
        public uint64_t stop_after       # src-delete-after: the last delivery tag to move (0: never)
        # the message being read
        int phase
        uint64_t cur_tag
        bint cur_redelivered
        bint cur_skip
        uint8_t cur_ex_len, cur_rk_len
        char cur_ex[256]
        char cur_rk[256]
        uint64_t body_left
        bytes cur_props
        # confirms
        uint64_t *tags
        uint8_t *confirmed
        uint64_t mask
        readonly uint64_t next_seq          # the next publish's sequence number
        readonly uint64_t confirmed_upto    # every publish up to here is confirmed
        readonly uint64_t acked_tag         # the source is acked up to here (multiple)
        readonly uint64_t last_tag          # the last delivery read
        readonly uint64_t last_moved_tag    # the last delivery published (or collected)
        readonly uint64_t messages          # published (or collected)
        readonly uint64_t dropped           # over max-hops: acked, not published
        readonly uint64_t nacked            # publishes the destination refused
        uint64_t nack_floor                 # the first refused publish: confirms never pass it
        readonly uint64_t skipped           # past stop_after: left unacked at the source
        public uint64_t max_collect         # collect mode: the largest body held whole

    def __init__(self, uint16_t src_channel, uint16_t dst_channel, uint32_t dst_frame_max, str ack_mode,
                 bytes dest_exchange=None, bytes dest_key=None, bint collect=False, received_from=None,
                 int max_hops=0, uint64_t stop_after=0, uint32_t src_frame_max=131072):
        if ack_mode not in ACK_MODES:
            raise ValueError(f"ack-mode must be one of {', '.join(ACK_MODES)}")
        if dst_frame_max < 4096:
            raise ValueError("frame_max below 4096")
        if dest_exchange is not None and len(dest_exchange) > 255 or dest_key is not None and len(dest_key) > 255:
            raise ValueError("exchange names and routing keys are at most 255 bytes")
        self.source = SourceReader(src_frame_max + 4096)
        self.source.relay = self
        self.dest = DestReader(dst_frame_max + 4096)
        self.dest.relay = self
        self.dst_out = WriteBuffer()
        self.src_out = WriteBuffer()
        self.body = WriteBuffer()
        self.src_ch = src_channel
        self.dst_ch = dst_channel
        self.dst_body_max = dst_frame_max - 8
        self.ack_mode = ACK_MODES[ack_mode]
        self.dst_exchange = dest_exchange
        self.dst_key = dest_key
        self.collect = collect
        self.collected = []
        if received_from is not None:
            self.rf_plain, self.rf_redelivered = received_from
        self.max_hops = max_hops
        self.stop_after = stop_after
        self.max_collect = 128 * 1024 * 1024
        self.next_seq = 1
        self.nack_floor = 0xFFFFFFFFFFFFFFFF
        self.phase = EXPECT_METHOD
        self.mask = 1023
        self.tags = <uint64_t *>calloc(self.mask + 1, sizeof(uint64_t))
        self.confirmed = <uint8_t *>calloc(self.mask + 1, 1)
        if self.tags is NULL or self.confirmed is NULL:
            raise MemoryError()

    def __dealloc__(self):
        free(self.tags)
        free(self.confirmed)

    # -- the source: deliveries ----------------------------------------------------

    cdef int on_deliver(self, const char *p, uint32_t n) except -1:
        cdef uint32_t pos, l
        if self.phase != EXPECT_METHOD:
            raise FrameError("basic.deliver in the middle of a message")
        # consumer tag, delivery tag, redelivered, exchange, routing key
        if n < 1:
            raise FrameError("truncated basic.deliver")
        pos = 1 + <uint8_t>p[0]
        if pos + 9 + 1 > n:
            raise FrameError("truncated basic.deliver")
        self.cur_tag = be64(p + pos)
        self.cur_redelivered = (<uint8_t>p[pos + 8]) & 1
        pos += 9
        l = <uint8_t>p[pos]
        if pos + 1 + l + 1 > n:
            raise FrameError("truncated basic.deliver")
        self.cur_ex_len = <uint8_t>l
        copy_short(self.cur_ex, p + pos + 1, l)
        pos += 1 + l
        l = <uint8_t>p[pos]
        if pos + 1 + l > n:
            raise FrameError("truncated basic.deliver")
        self.cur_rk_len = <uint8_t>l
        copy_short(self.cur_rk, p + pos + 1, l)
        self.last_tag = self.cur_tag
        self.cur_skip = self.stop_after != 0 and self.cur_tag > self.stop_after
        self.phase = EXPECT_HEADER
        return 0

    cdef int on_header(self, const char *p, uint32_t n) except -1:
        cdef uint64_t size
        cdef int hops = 0
        if self.phase != EXPECT_HEADER:
            raise FrameError("content header without basic.deliver")
        if n < 14:
            raise FrameError("truncated content header")
        size = be64(p + 4)
        if self.collect and size > self.max_collect and not self.cur_skip:
            # a body is held whole only up to this: a peer cannot make us hold more
            raise FrameError(f"a message of {size} bytes is over {self.max_collect} (max_message_size)")
        self.body_left = size
        if self.cur_skip:
            self.skipped += 1
        elif self.rf_plain is not None:
            hops = self.received_from_hops(p + 12, n - 12)
            if self.max_hops > 0 and hops >= self.max_hops:
                self.cur_skip = True
                self.dropped += 1
                if self.ack_mode != NO_ACK:
                    self.write_source_ack(self.cur_tag, False)
            elif self.collect:
                self.cur_props = self.props_with_received_from(p + 12, n - 12)
            else:
                self.write_publish()
                self.dst_out.start_frame(FRAME_HEADER, self.dst_ch)
                self.dst_out.write_raw(p, 12)
                self.write_props_with_received_from(self.dst_out, p + 12, n - 12)
                self.dst_out.end_frame()
        elif self.collect:
            self.cur_props = PyBytes_FromStringAndSize(p + 12, n - 12)
        else:
            self.write_publish()
            self.dst_out.start_frame(FRAME_HEADER, self.dst_ch)
            self.dst_out.write_raw(p, n)
            self.dst_out.end_frame()
        if size == 0:
            self.message_done()
        else:
            self.phase = EXPECT_BODY
            if self.collect and not self.cur_skip:
                self.body.clear()
        return 0

    cdef int on_body(self, const char *p, uint32_t n) except -1:
        cdef uint32_t off = 0, chunk
        if self.phase != EXPECT_BODY or n > self.body_left:
            raise FrameError("body frame without a message or past its size")
        self.body_left -= n
        if not self.cur_skip:
            if self.collect:
                self.body.write_raw(p, n)
            else:
                while off < n:      # the destination's frames may be smaller than the source's
                    chunk = n - off
                    if chunk > self.dst_body_max:
                        chunk = self.dst_body_max
                    self.dst_out.start_frame(FRAME_BODY, self.dst_ch)
                    self.dst_out.write_raw(p + off, chunk)
                    self.dst_out.end_frame()
                    off += chunk
        if self.body_left == 0:
            self.message_done()
        return 0

    cdef int write_publish(self) except -1:
        cdef WriteBuffer o = self.dst_out
        o.start_method(self.dst_ch, 60, 40)
        o.write_u16(0)
        if self.dst_exchange is None:
            o.write_shortstr(self.cur_ex, self.cur_ex_len)
        else:
            o.write_shortstr(PyBytes_AS_STRING(self.dst_exchange), PyBytes_GET_SIZE(self.dst_exchange))
        if self.dst_key is None:
            o.write_shortstr(self.cur_rk, self.cur_rk_len)
        else:
            o.write_shortstr(PyBytes_AS_STRING(self.dst_key), PyBytes_GET_SIZE(self.dst_key))
        o.write_u8(0)       # neither mandatory nor immediate: the destination's routing decides
        o.end_frame()
        return 0

    cdef int message_done(self) except -1:
        self.phase = EXPECT_METHOD
        if self.cur_skip:
            return 0
        self.messages += 1
        self.last_moved_tag = self.cur_tag
        if self.collect:
            self.collected.append((self.cur_tag, self.cur_redelivered,
                                   PyBytes_FromStringAndSize(self.cur_ex, self.cur_ex_len),
                                   PyBytes_FromStringAndSize(self.cur_rk, self.cur_rk_len),
                                   self.cur_props, self.body.take()))
            self.cur_props = None
            return 0
        if self.ack_mode == ON_CONFIRM:
            if self.next_seq - self.confirmed_upto > self.mask:
                self.grow()
            self.tags[self.next_seq & self.mask] = self.cur_tag
            self.confirmed[self.next_seq & self.mask] = 0
        self.next_seq += 1
        return 0

    cdef int grow(self) except -1:
        cdef uint64_t newmask = self.mask * 2 + 1, seq
        cdef uint64_t *tags = <uint64_t *>calloc(newmask + 1, sizeof(uint64_t))
        cdef uint8_t *conf = <uint8_t *>calloc(newmask + 1, 1)
        if tags is NULL or conf is NULL:
            free(tags)
            free(conf)
            raise MemoryError()
        seq = self.confirmed_upto + 1
        while seq < self.next_seq:
            tags[seq & newmask] = self.tags[seq & self.mask]
            conf[seq & newmask] = self.confirmed[seq & self.mask]
            seq += 1
        free(self.tags)
        free(self.confirmed)
        self.tags = tags
        self.confirmed = conf
        self.mask = newmask
        return 0

    # -- the destination: confirms -------------------------------------------------

    cdef int on_confirm(self, uint64_t seq, bint multiple, bint nack) except -1:
        cdef uint64_t s, lo, upto
        if seq >= self.next_seq or seq == 0:
            raise FrameError(f"confirm of publish {seq}, only {self.next_seq - 1} were sent")
        if nack:
            # what it covers stays unconfirmed: the acks stop before it, and
            # the shell restarts the link (the source redelivers)
            lo = self.confirmed_upto + 1 if multiple else seq
            if seq >= lo:
                self.nacked += seq - lo + 1
            if lo < self.nack_floor:
                self.nack_floor = lo
            return 0
        if seq <= self.confirmed_upto:
            return 0
        if multiple:
            upto = seq if seq < self.nack_floor else self.nack_floor - 1
            s = self.confirmed_upto + 1
            while s <= upto:
                self.confirmed[s & self.mask] = 0
                s += 1
            if upto > self.confirmed_upto:
                self.confirmed_upto = upto
        elif seq < self.nack_floor:
            self.confirmed[seq & self.mask] = 1
        while self.confirmed_upto + 1 < self.next_seq and self.confirmed_upto + 1 < self.nack_floor \
                and self.confirmed[(self.confirmed_upto + 1) & self.mask]:
            self.confirmed_upto += 1
            self.confirmed[self.confirmed_upto & self.mask] = 0
        if self.ack_mode == ON_CONFIRM and self.confirmed_upto:
            self.ack_source_upto(self.tags[self.confirmed_upto & self.mask])
        return 0

    cdef int ack_source_upto(self, uint64_t tag) except -1:
        if tag > self.acked_tag:
            self.write_source_ack(tag, True)
            self.acked_tag = tag
        return 0

    cdef int write_source_ack(self, uint64_t tag, bint multiple) except -1:
        cdef WriteBuffer o = self.src_out
        o.start_method(self.src_ch, 60, 80)
        o.write_u64(tag)
        o.write_u8(1 if multiple else 0)
        o.end_frame()
        return 0

    # -- federation: x-received-from --------------------------------------------------

    cdef Py_ssize_t find_headers(self, const char *p, Py_ssize_t n, Py_ssize_t *table_len) except -2:
        """Offset of the headers table in a property list, -1 when it has
        none; table_len gets its size (length prefix included)."""
        cdef uint16_t flags
        cdef Py_ssize_t pos = 2, i
        if n < 2:
            raise SyntaxError_("truncated property list")
        flags = be16(p)
        for i in range(2):      # content-type, content-encoding: shortstrs
            if flags & (0x8000 >> i):
                if pos >= n or pos + 1 + <uint8_t>p[pos] > n:
                    raise SyntaxError_("truncated property list")
                pos += 1 + <uint8_t>p[pos]
        if not (flags & 0x2000):
            return -1
        if pos + 4 > n or pos + 4 + <Py_ssize_t>be32(p + pos) > n:
            raise SyntaxError_("truncated headers table")
        table_len[0] = 4 + be32(p + pos)
        return pos

    cdef Py_ssize_t find_received_from(self, const char *t, Py_ssize_t tlen, Py_ssize_t *entry_len) except -2:
        """Offset in a table (length prefix included) of its x-received-from
        entry (key, type, value), -1 when there is none."""
        cdef Py_ssize_t pos = 4, klen, vlen
        while pos < tlen:
            klen = <uint8_t>t[pos]
            if pos + 1 + klen > tlen:
                raise SyntaxError_("truncated headers table")
            vlen = value_size(t + pos + 1 + klen, tlen - pos - 1 - klen)
            if klen == 15 and memcmp(t + pos + 1, b"x-received-from", 15) == 0:
                entry_len[0] = 1 + klen + vlen
                return pos
            pos += 1 + klen + vlen
        return -1

    cdef int received_from_hops(self, const char *p, Py_ssize_t n) except -1:
        cdef Py_ssize_t tlen = 0, hpos, epos, elen = 0, pos, end
        cdef int hops = 0
        hpos = self.find_headers(p, n, &tlen)
        if hpos < 0:
            return 0
        epos = self.find_received_from(p + hpos, tlen, &elen)
        if epos < 0 or p[hpos + epos + 16] != b'A':
            return 0
        pos = hpos + epos + 1 + 15 + 1 + 4      # the array's first value
        end = hpos + epos + elen
        while pos < end:
            pos += value_size(p + pos, end - pos)
            hops += 1
        return hops

    cdef int write_props_with_received_from(self, WriteBuffer o, const char *p, Py_ssize_t n) except -1:
        """The property list with this link's entry appended to the headers'
        x-received-from array (made when missing)."""
        cdef Py_ssize_t tlen = 0, hpos, epos = -1, elen = 0, tstart, astart, before
        cdef bytes entry = self.rf_redelivered if self.cur_redelivered else self.rf_plain
        cdef uint16_t flags = be16(p)
        hpos = self.find_headers(p, n, &tlen)
        if hpos < 0:
            # no headers: insert a table after content-type/encoding
            before = 2
            if flags & 0x8000:
                before += 1 + <uint8_t>p[before]
            if flags & 0x4000:
                before += 1 + <uint8_t>p[before]
            o.write_u16(flags | 0x2000)
            o.write_raw(p + 2, before - 2)
            tstart = o.len
            o.write_u32(0)
            o.write_shortstr(b"x-received-from", 15)
            o.write_u8(b'A')
            o.write_u32(<uint32_t>PyBytes_GET_SIZE(entry))
            o.write_bytes(entry)
            put_be32(o.buf + tstart, <uint32_t>(o.len - tstart - 4))
            o.write_raw(p + before, n - before)
            return 0
        epos = self.find_received_from(p + hpos, tlen, &elen)
        o.write_raw(p, hpos)
        tstart = o.len
        o.write_u32(0)
        if epos < 0:
            o.write_raw(p + hpos + 4, tlen - 4)
            o.write_shortstr(b"x-received-from", 15)
            o.write_u8(b'A')
            o.write_u32(<uint32_t>PyBytes_GET_SIZE(entry))
            o.write_bytes(entry)
        else:
            # the entries before and after it, then it with one more value
            # (a value of another type than an array is replaced)
            o.write_raw(p + hpos + 4, epos - 4)
            o.write_raw(p + hpos + epos + elen, tlen - epos - elen)
            o.write_shortstr(b"x-received-from", 15)
            o.write_u8(b'A')
            astart = o.len
            o.write_u32(0)
            if p[hpos + epos + 16] == b'A':
                o.write_raw(p + hpos + epos + 1 + 15 + 1 + 4, elen - 1 - 15 - 1 - 4)
            o.write_bytes(entry)
            put_be32(o.buf + astart, <uint32_t>(o.len - astart - 4))
        put_be32(o.buf + tstart, <uint32_t>(o.len - tstart - 4))
        o.write_raw(p + hpos + tlen, n - hpos - tlen)
        return 0

    cdef bytes props_with_received_from(self, const char *p, Py_ssize_t n):
        cdef WriteBuffer o = WriteBuffer()
        self.write_props_with_received_from(o, p, n)
        return o.take()

    # -- Python-facing: once per read batch ------------------------------------------

    def set_dest_frame_max(self, uint32_t frame_max):
        """Once the destination's connection is tuned."""
        if frame_max < 4096:
            raise ValueError("frame_max below 4096")
        self.dst_body_max = frame_max - 8
        self.dest.frame_max = frame_max + 4096

    def set_received_from(self, bytes plain, bytes redelivered):
        """Federation: the x-received-from entries (field values, 'F' +
        table) to append, for messages delivered the first time and again."""
        self.rf_plain = plain
        self.rf_redelivered = redelivered

    def take_dest(self):
        """Publish frames for the destination since the last call (b"" if none)."""
        if self.dst_out.len == 0:
            return b""
        return self.dst_out.take()

    def take_source(self):
        """Acks for the source since the last call (b"" if none)."""
        if self.src_out.len == 0:
            return b""
        return self.src_out.take()

    def take_messages(self):
        """Collect mode: (delivery tag, redelivered, exchange, routing key,
        properties, body) of each whole message read since the last call."""
        out = self.collected
        self.collected = []
        return out

    def ack_upto(self, uint64_t tag):
        """Acks the source up to tag (multiple): collect mode, after the
        messages up to it are delivered; on-publish mode after a write."""
        self.ack_source_upto(tag)

    def ack_published(self):
        """on-publish: what has been written to the destination is acked."""
        self.ack_source_upto(self.last_moved_tag)

    @property
    def outstanding(self):
        """Publishes not yet confirmed."""
        return self.next_seq - 1 - self.confirmed_upto

    @property
    def in_message(self):
        """A message is half read (its frames so far are already written)."""
        return self.phase != EXPECT_METHOD

    @property
    def done(self):
        """src-delete-after: the last message to move is read and, unless
        no-ack, acked at the source."""
        if self.stop_after == 0 or self.last_tag < self.stop_after or self.phase != EXPECT_METHOD:
            return False
        if self.ack_mode == NO_ACK:
            return True
        if self.ack_mode == ON_CONFIRM and not self.collect and self.outstanding:
            return False
        return self.acked_tag >= self.last_moved_tag and not self.collected
