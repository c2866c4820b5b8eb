# Property lists, segment files and AMQP deliveries into a Batch (included by _columns.pyx)

# -- properties ----------------------------------------------------------------

cdef enum:
    F_CONTENT_TYPE = 0x8000
    F_CONTENT_ENCODING = 0x4000
    F_HEADERS = 0x2000
    F_DELIVERY_MODE = 0x1000
    F_PRIORITY = 0x0800
    F_CORRELATION_ID = 0x0400
    F_REPLY_TO = 0x0200
    F_EXPIRATION = 0x0100
    F_MESSAGE_ID = 0x0080
    F_TIMESTAMP = 0x0040
    F_TYPE = 0x0020
    F_USER_ID = 0x0010
    F_APP_ID = 0x0008
    F_CLUSTER_ID = 0x0004

# string property flag -> string slot, in the order properties are encoded
cdef uint16_t STR_FLAGS[9]
cdef int STR_SLOT_OF[9]
STR_FLAGS[:] = [F_CONTENT_TYPE, F_CONTENT_ENCODING, F_CORRELATION_ID, F_REPLY_TO, F_EXPIRATION, F_MESSAGE_ID,
                F_TYPE, F_USER_ID, F_APP_ID]
STR_SLOT_OF[:] = [S_CONTENT_TYPE, S_CONTENT_ENCODING, S_CORRELATION_ID, S_REPLY_TO, S_EXPIRATION, S_MESSAGE_ID,
                  S_TYPE, S_USER_ID, S_APP_ID]


cdef const char *headers_of(const char *p, Py_ssize_t n, bint le, Py_ssize_t *tlen) except? NULL:
    """The body of the headers table of a property list, NULL if none."""
    cdef uint16_t flags
    cdef Py_ssize_t pos = 2
    if n < 2:
        raise MalformedMessage("truncated properties")
    flags = le16(p) if le else be16(p)
    if not flags & F_HEADERS:
        return NULL
    if flags & F_CONTENT_TYPE:
        if pos >= n:
            raise MalformedMessage("truncated properties")
        pos += 1 + <uint8_t>p[pos]
    if flags & F_CONTENT_ENCODING:
        if pos >= n:
            raise MalformedMessage("truncated properties")
        pos += 1 + <uint8_t>p[pos]
    if pos + 4 > n:
        raise MalformedMessage("truncated properties")
    tlen[0] = le32(p + pos) if le else be32(p + pos)
    if pos + 4 + tlen[0] > n:
        raise MalformedMessage("truncated headers")
    return p + pos + 4


cdef bint int_value(char t, const char *v, int64_t *out) noexcept nogil:
    """An integer field value (of any width; the broker sends 'l') into out."""
    if t == b"b":
        out[0] = <int8_t>v[0]
    elif t == b"B":
        out[0] = <uint8_t>v[0]
    elif t == b"s":
        out[0] = <int16_t>be16(v)
    elif t == b"u":
        out[0] = be16(v)
    elif t == b"I":
        out[0] = <int32_t>be32(v)
    elif t == b"i":
        out[0] = be32(v)
    elif t == b"l" or t == b"L" or t == b"T":
        out[0] = <int64_t>be64(v)
    else:
        return False
    return True


cdef int stream_headers(const char *t, Py_ssize_t tlen, int64_t *offset, int64_t *ts) except -1:
    """x-stream-offset and x-stream-timestamp of a delivery's headers table."""
    cdef Py_ssize_t pos = 0, kl, m
    cdef char ty
    while pos < tlen:
        kl = <uint8_t>t[pos]
        if pos + 1 + kl + 1 > tlen:
            raise MalformedMessage("malformed headers table")
        ty = t[pos + 1 + kl]
        m = value_size(ty, t + pos + 2 + kl, tlen - pos - 2 - kl)
        if m < 0:
            raise MalformedMessage("malformed headers table")
        if kl == 15 and memcmp(t + pos + 1, b"x-stream-offset", 15) == 0:
            int_value(ty, t + pos + 2 + kl, offset)
        elif kl == 18 and memcmp(t + pos + 1, b"x-stream-timestamp", 18) == 0:
            int_value(ty, t + pos + 2 + kl, ts)
        pos += 2 + kl + m
    return 0


cdef int add_headers(Batch b, const char *t, Py_ssize_t tlen, bint skip_stream_keys) except -1:
    cdef Py_ssize_t pos = 0, kl, m
    cdef char ty
    while pos < tlen:
        kl = <uint8_t>t[pos]
        if pos + 1 + kl + 1 > tlen:
            raise MalformedMessage("malformed headers table")
        ty = t[pos + 1 + kl]
        if skip_stream_keys and ((kl == 15 and memcmp(t + pos + 1, b"x-stream-offset", 15) == 0)
                                 or (kl == 18 and memcmp(t + pos + 1, b"x-stream-timestamp", 18) == 0)):
            m = value_size(ty, t + pos + 2 + kl, tlen - pos - 2 - kl)
            if m < 0:
                raise MalformedMessage("malformed headers table")
            pos += 2 + kl + m
            continue
        b.keys.add(t + pos + 1, kl)
        if ty == b"V":
            b.values.add_null()
            m = 0
        else:
            m = render(b.values.data, ty, t + pos + 2 + kl, tlen - pos - 2 - kl, False, 0)
            if m < 0:
                raise MalformedMessage("malformed headers table")
            b.values.close_value()
        b.map_entries += 1
        pos += 2 + kl + m
    return 0


cdef Py_ssize_t add_properties(Batch b, const char *p, Py_ssize_t n, bint le, bint skip_stream_keys) except -1:
    """Every property column (and the headers map) of one row from a
    property list; -> its length."""
    cdef uint16_t flags
    cdef Py_ssize_t pos = 2, tlen, sl
    cdef const char *sp[9]
    cdef Py_ssize_t sn[9]
    cdef int64_t dm = -1, prio = -1
    cdef int i, j
    if n < 2:
        raise MalformedMessage("truncated properties")
    flags = le16(p) if le else be16(p)
    for i in range(N_STR_PROPS):
        sp[i] = NULL
    # walk in wire order
    for i in range(14):
        if not flags & (1 << (15 - i)):
            continue
        if i == 2:      # headers
            if pos + 4 > n:
                raise MalformedMessage("truncated properties")
            tlen = le32(p + pos) if le else be32(p + pos)
            if pos + 4 + tlen > n:
                raise MalformedMessage("truncated headers")
            add_headers(b, p + pos + 4, tlen, skip_stream_keys)
            pos += 4 + tlen
        elif i == 3 or i == 4:      # delivery_mode, priority: octets
            if pos + 1 > n:
                raise MalformedMessage("truncated properties")
            if i == 3:
                dm = <uint8_t>p[pos]
            else:
                prio = <uint8_t>p[pos]
            pos += 1
        elif i == 9:                # timestamp
            pos += 8
        else:                       # shortstr
            if pos + 1 > n:
                raise MalformedMessage("truncated properties")
            sl = <uint8_t>p[pos]
            if pos + 1 + sl > n:
                raise MalformedMessage("truncated properties")
            for j in range(N_STR_PROPS):
                if STR_FLAGS[j] == (1 << (15 - i)):
                    sp[STR_SLOT_OF[j]] = p + pos + 1
                    sn[STR_SLOT_OF[j]] = sl
            pos += 1 + sl
        if pos > n:
            raise MalformedMessage("truncated properties")
    for i in range(N_STR_PROPS):
        if sp[i] is NULL:
            (<VarCol>b.str_props[i]).add_null()
        else:
            (<VarCol>b.str_props[i]).add(sp[i], sn[i])
    if dm >= 0:
        b.delivery_mode.add(dm)
    else:
        b.delivery_mode.add_null()
    if prio >= 0:
        b.priority.add(prio)
    else:
        b.priority.add_null()
    b.map_offsets.put_i32(<int32_t>b.map_entries)
    return pos


# -- segment files ----------------------------------------------------------------

cdef enum:
    SEGMENT_HEADER = 4
    SCHEMA_VERSION = 4


def read_segment(const unsigned char[::1] data, Batch b, Py_ssize_t pos, int64_t first_offset,
                 const unsigned int[::1] acked, Py_ssize_t max_rows, Py_ssize_t max_bytes):
    """Records of a segment file (its bytes, e.g. an mmap) from byte pos
    into b, until max_rows rows or max_bytes of bodies. first_offset: the
    stream offset of the record at pos, or -1 (no offsets: a classic
    queue). acked: sorted positions to skip (acks.N). -> (next position or
    -1 at the end of data, offset of the record there)."""
    cdef Py_ssize_t n = data.shape[0], exlen, rklen, plen, ai = 0, na = acked.shape[0]
    cdef const char *base = <const char *>&data[0] if n else NULL
    cdef const char *r
    cdef uint64_t ts, body
    cdef int64_t offset = first_offset
    cdef Py_ssize_t start_rows = b.rows, start_bytes = b.body.data.len
    if n < SEGMENT_HEADER or le32(base) != SCHEMA_VERSION:
        raise MalformedMessage("not a segment file (schema version 4)")
    if pos < SEGMENT_HEADER:
        pos = SEGMENT_HEADER
    # records before pos were read by an earlier call: count them for the offset
    while ai < na and acked[ai] < pos:
        ai += 1
    while b.rows - start_rows < max_rows and b.body.data.len - start_bytes < max_bytes:
        if pos + 8 > n:
            return -1, offset
        r = base + pos
        ts = le64(r)
        if ts == 0:
            return -1, offset           # the end of data (or a zero-filled tail)
        if pos + 10 > n:
            return -1, offset
        exlen = <uint8_t>r[8]
        if pos + 9 + exlen + 1 > n:
            return -1, offset
        rklen = <uint8_t>r[9 + exlen]
        if pos + 10 + exlen + rklen + 2 > n:
            return -1, offset
        # properties are walked twice: for their length (to find the body
        # and to tell a torn tail) and, for a kept row, into the columns
        plen = props_length(r + 10 + exlen + rklen, n - pos - 10 - exlen - rklen, True)
        if plen < 0 or pos + 10 + exlen + rklen + plen + 8 > n:
            return -1, offset           # torn: a copy of a segment being written
        body = le64(r + 10 + exlen + rklen + plen)
        if body > <uint64_t>(n - pos - 18 - exlen - rklen - plen):
            return -1, offset
        while ai < na and acked[ai] < pos:
            ai += 1
        if ai < na and acked[ai] == pos:
            ai += 1                     # acked (a classic queue): not a message any more
        else:
            if first_offset >= 0:
                b.offset.add(offset)
            else:
                b.offset.add_null()
            b.timestamp.add(<int64_t>ts * 1000)
            b.exchange.add(r + 9, exlen)
            b.routing_key.add(r + 10 + exlen, rklen)
            add_properties(b, r + 10 + exlen + rklen, plen, True, False)
            b.body.add(r + 18 + exlen + rklen + plen, <Py_ssize_t>body)
            b.rows += 1
        if first_offset >= 0:
            offset += 1
        pos += 18 + exlen + rklen + plen + <Py_ssize_t>body
    return pos, offset


cdef Py_ssize_t props_length(const char *p, Py_ssize_t n, bint le) noexcept nogil:
    """Length of a property list, -1 if it does not fit in n."""
    cdef uint16_t flags
    cdef Py_ssize_t pos = 2
    cdef int i
    if n < 2:
        return -1
    flags = le16(p) if le else be16(p)
    if flags & 3:
        return -1
    for i in range(14):
        if not flags & (1 << (15 - i)):
            continue
        if i == 2:
            if pos + 4 > n:
                return -1
            pos += 4 + <Py_ssize_t>(le32(p + pos) if le else be32(p + pos))
        elif i == 3 or i == 4:
            pos += 1
        elif i == 9:
            pos += 8
        else:
            if pos + 1 > n:
                return -1
            pos += 1 + <uint8_t>p[pos]
        if pos > n:
            return -1
    return pos


# -- AMQP deliveries ----------------------------------------------------------------

cdef enum:
    ST_METHOD = 0       # waiting for a method frame
    ST_HEADER = 1       # got basic.deliver, waiting for its content header
    ST_BODY = 2


cdef class DeliveryDecoder:
    """Fed the bytes of a stream consumer's connection: basic.deliver,
    content header and body frames become rows of the current Batch, for
    offsets in [start, end) (end < 0: no end). Other method frames are kept
    in `others` as (channel, class id, method id, arguments bytes) for the
    client to handle."""
    cdef:
        bytearray pending
        public Batch batch
        public int64_t start
        public int64_t end
        public uint64_t last_tag
        public uint64_t deliveries
        public int64_t last_offset         # the newest offset seen (-1: none yet)
        public list others
        int state
        bint skip
        uint64_t body_left
        char ex[256]
        Py_ssize_t exlen
        char rk[256]
        Py_ssize_t rklen

    def __init__(self, int64_t start=0, int64_t end=-1):
        self.pending = bytearray()
        self.batch = Batch()
        self.start = start
        self.end = end
        self.last_offset = -1
        self.others = []

    @property
    def done(self):
        """Every offset below end has been seen (or skipped over)."""
        return self.end >= 0 and self.last_offset >= self.end - 1 and self.state == ST_METHOD

    @property
    def between_messages(self):
        """No message is half decoded: its header's columns would be in the
        batch without its body (the bytes of one message may arrive in
        several reads)."""
        return self.state == ST_METHOD

    def take(self):
        """-> the Batch of the rows decoded so far; a new one starts. Only
        between messages, or the columns would differ in length."""
        if self.state != ST_METHOD:
            raise RuntimeError("DeliveryDecoder.take() in the middle of a message")
        b = self.batch
        self.batch = Batch()
        return b

    def feed(self, data):
        cdef const unsigned char[::1] view
        cdef Py_ssize_t pos = 0, n
        cdef uint32_t size
        cdef uint8_t ftype
        cdef const char *p
        self.pending += data
        n = len(self.pending)
        if n == 0:
            return
        view = self.pending
        p = <const char *>&view[0]
        while n - pos >= 8:
            ftype = <uint8_t>p[pos]
            size = be32(p + pos + 3)
            if n - pos < <Py_ssize_t>size + 8:
                break
            if <uint8_t>p[pos + 7 + size] != 0xCE:
                raise MalformedMessage("frame-end octet missing")
            self.frame(ftype, be16(p + pos + 1), p + pos + 7, size)
            pos += size + 8
        del view
        if pos:
            del self.pending[:pos]

    cdef int frame(self, uint8_t ftype, uint16_t ch, const char *p, uint32_t size) except -1:
        cdef Py_ssize_t pos, n
        cdef uint16_t cid, mid
        cdef int64_t offset = -1, ts = -1
        cdef Py_ssize_t tlen
        cdef const char *t
        cdef Batch b = self.batch
        if ftype == 8:
            return 0                        # heartbeat
        if ftype == 1:
            if size < 4:
                raise MalformedMessage("method frame too short")
            cid = be16(p)
            mid = be16(p + 2)
            if cid == 60 and mid == 60:     # basic.deliver
                pos = 4
                pos += 1 + <uint8_t>p[pos]                  # consumer tag
                if pos + 9 + 1 > size:
                    raise MalformedMessage("truncated basic.deliver")
                self.last_tag = be64(p + pos)
                pos += 9                                    # delivery tag, redelivered
                self.exlen = <uint8_t>p[pos]
                if pos + 1 + self.exlen + 1 > size:
                    raise MalformedMessage("truncated basic.deliver")
                memcpy(self.ex, p + pos + 1, self.exlen)
                pos += 1 + self.exlen
                self.rklen = <uint8_t>p[pos]
                if pos + 1 + self.rklen > size:
                    raise MalformedMessage("truncated basic.deliver")
                memcpy(self.rk, p + pos + 1, self.rklen)
                self.deliveries += 1
                self.state = ST_HEADER
                return 0
            self.others.append((ch, cid, mid, p[4:size]))
            return 0
        if ftype == 2:
            if self.state != ST_HEADER or size < 14:
                raise MalformedMessage("unexpected content header")
            self.body_left = be64(p + 4)
            t = headers_of(p + 12, size - 12, False, &tlen)
            if t is not NULL:
                stream_headers(t, tlen, &offset, &ts)
            if offset < 0:
                raise MalformedMessage("a delivery without x-stream-offset (not a stream?)")
            if offset > self.last_offset:
                self.last_offset = offset
            self.skip = offset < self.start or (self.end >= 0 and offset >= self.end)
            if not self.skip:
                b.offset.add(offset)
                if ts >= 0:
                    b.timestamp.add(ts * 1000)
                else:
                    b.timestamp.add_null()
                b.exchange.add(self.ex, self.exlen)
                b.routing_key.add(self.rk, self.rklen)
                add_properties(b, p + 12, size - 12, False, True)
            if self.body_left == 0:
                self.end_row()
            else:
                self.state = ST_BODY
            return 0
        if ftype == 3:
            if self.state != ST_BODY or size > self.body_left:
                raise MalformedMessage("unexpected content body")
            if not self.skip:
                b.body.data.put(p, size)
            self.body_left -= size
            if self.body_left == 0:
                self.end_row()
            return 0
        raise MalformedMessage(f"unknown frame type {ftype}")

    cdef int end_row(self) except -1:
        if not self.skip:
            self.batch.body.close_value()
            self.batch.rows += 1
        self.state = ST_METHOD
        return 0
