# cython: language_level=3
"""Messages into Arrow columns, without a Python object per message.

Two sources feed the same column builders: segment files read straight from
disk (LavinMQ's record layout: little-endian integers, properties with a
little-endian flag word and table lengths) and AMQP frames from a stream
consumer (basic.deliver, content header and body frames, big-endian), whose
x-stream-offset and x-stream-timestamp headers become the offset and
timestamp columns. A finished batch is handed to pyarrow as buffers: no
copy, no per-row work in Python.

This module is the Spark connector's own: it does not import the broker."""
from cpython.buffer cimport PyBUF_WRITABLE
from libc.stdint cimport int8_t, int16_t, int32_t, int64_t, uint8_t, uint16_t, uint32_t, uint64_t
from libc.stdlib cimport malloc, realloc, free
from libc.stdio cimport snprintf
from libc.string cimport memcpy, memcmp, memset


# -- byte order ------------------------------------------------------------------

cdef inline uint16_t be16(const char *p) noexcept nogil:
    return (<uint16_t><uint8_t>p[0] << 8) | <uint8_t>p[1]

cdef inline uint32_t be32(const char *p) noexcept nogil:
    return ((<uint32_t><uint8_t>p[0] << 24) | (<uint32_t><uint8_t>p[1] << 16)
            | (<uint32_t><uint8_t>p[2] << 8) | <uint8_t>p[3])

cdef inline uint64_t be64(const char *p) noexcept nogil:
    return (<uint64_t>be32(p) << 32) | be32(p + 4)

cdef inline uint16_t le16(const char *p) noexcept nogil:
    cdef uint16_t v
    memcpy(&v, p, 2)
    return v

cdef inline uint32_t le32(const char *p) noexcept nogil:
    cdef uint32_t v
    memcpy(&v, p, 4)
    return v

cdef inline uint64_t le64(const char *p) noexcept nogil:
    cdef uint64_t v
    memcpy(&v, p, 8)
    return v


class MalformedMessage(ValueError):
    """Bytes that are not a message this broker wrote or sent."""


# -- growable buffers that pyarrow can take over --------------------------------

cdef class Buf:
    """A growable byte buffer exposing the buffer protocol: pyarrow wraps it
    without copying (pa.py_buffer), so a Buf is not written once handed over."""
    cdef:
        char *data
        Py_ssize_t len
        Py_ssize_t cap
        int exports

    def __dealloc__(self):
        free(self.data)

    cdef int reserve(self, Py_ssize_t n) except -1:
        cdef Py_ssize_t cap
        cdef char *d
        if self.len + n <= self.cap:
            return 0
        cap = self.cap * 2 if self.cap else 4096
        while cap < self.len + n:
            cap *= 2
        d = <char *>realloc(self.data, cap)
        if d is NULL:
            raise MemoryError()
        self.data = d
        self.cap = cap
        return 0

    cdef inline int put(self, const void *p, Py_ssize_t n) except -1:
        if self.len + n > self.cap:
            self.reserve(n)
        memcpy(self.data + self.len, p, n)
        self.len += n
        return 0

    cdef inline int put_i32(self, int32_t v) except -1:
        return self.put(&v, 4)

    cdef inline int put_i64(self, int64_t v) except -1:
        return self.put(&v, 8)

    def __getbuffer__(self, Py_buffer *view, int flags):
        if self.data is NULL:
            self.reserve(1)
        view.buf = self.data
        view.obj = self
        view.len = self.len
        view.readonly = 0
        view.itemsize = 1
        view.format = NULL
        view.ndim = 1
        view.shape = NULL
        view.strides = NULL
        view.suboffsets = NULL
        view.internal = NULL
        self.exports += 1

    def __releasebuffer__(self, Py_buffer *view):
        self.exports -= 1

    def __len__(self):
        return self.len


cdef class Bits:
    """An Arrow validity bitmap, built one row at a time."""
    cdef:
        Buf buf
        Py_ssize_t n
        Py_ssize_t nulls

    def __cinit__(self):
        self.buf = Buf()

    cdef inline int add(self, bint valid) except -1:
        cdef Py_ssize_t byte = self.n >> 3
        if byte >= self.buf.len:
            self.buf.reserve(1)
            self.buf.data[self.buf.len] = 0
            self.buf.len += 1
        if valid:
            self.buf.data[byte] |= <char>(1 << (self.n & 7))
        else:
            self.nulls += 1
        self.n += 1
        return 0


cdef class VarCol:
    """A string or binary column: int32 offsets, data, validity."""
    cdef:
        Buf offsets
        Buf data
        Bits valid

    def __cinit__(self):
        self.offsets = Buf()
        self.data = Buf()
        self.valid = Bits()
        self.offsets.put_i32(0)

    cdef inline int add(self, const char *p, Py_ssize_t n) except -1:
        self.data.put(p, n)
        if self.data.len > 0x7fffffff:
            raise OverflowError("a batch column over 2 GiB")
        self.offsets.put_i32(<int32_t>self.data.len)
        return self.valid.add(True)

    cdef inline int add_null(self) except -1:
        self.offsets.put_i32(<int32_t>self.data.len)
        return self.valid.add(False)

    cdef inline int close_value(self) except -1:
        # a value whose bytes were put into data piece by piece
        if self.data.len > 0x7fffffff:
            raise OverflowError("a batch column over 2 GiB")
        self.offsets.put_i32(<int32_t>self.data.len)
        return self.valid.add(True)

    def array(self, pa, type_):
        n = self.valid.n
        return pa.Array.from_buffers(type_, n, [pa.py_buffer(self.valid.buf) if self.valid.nulls else None,
                                                pa.py_buffer(self.offsets), pa.py_buffer(self.data)],
                                     null_count=self.valid.nulls)


cdef class IntCol:
    """An int32 or int64 column with validity."""
    cdef:
        Buf values
        Bits valid
        int width

    def __cinit__(self, int width):
        self.values = Buf()
        self.valid = Bits()
        self.width = width

    cdef inline int add(self, int64_t v) except -1:
        if self.width == 8:
            self.values.put_i64(v)
        else:
            self.values.put_i32(<int32_t>v)
        return self.valid.add(True)

    cdef inline int add_null(self) except -1:
        if self.width == 8:
            self.values.put_i64(0)
        else:
            self.values.put_i32(0)
        return self.valid.add(False)

    def array(self, pa, type_):
        return pa.Array.from_buffers(type_, self.valid.n,
                                     [pa.py_buffer(self.valid.buf) if self.valid.nulls else None,
                                      pa.py_buffer(self.values)], null_count=self.valid.nulls)


# property flag bits (flag word bit 15 is content_type)
cdef enum:
    N_STR_PROPS = 9
    # index of each string property among the struct's string children
    S_CONTENT_TYPE = 0
    S_CONTENT_ENCODING = 1
    S_MESSAGE_ID = 2
    S_CORRELATION_ID = 3
    S_TYPE = 4
    S_APP_ID = 5
    S_USER_ID = 6
    S_EXPIRATION = 7
    S_REPLY_TO = 8

# the properties struct's children, in the schema's order (lavinmq.spark.schema)
PROPERTY_FIELDS = ("content_type", "content_encoding", "message_id", "correlation_id", "type", "app_id",
                   "user_id", "priority", "delivery_mode", "expiration", "reply_to")
# which string slot each of those is (-1: the two integers)
cdef int FIELD_SLOT[11]
FIELD_SLOT[:] = [S_CONTENT_TYPE, S_CONTENT_ENCODING, S_MESSAGE_ID, S_CORRELATION_ID, S_TYPE, S_APP_ID,
                 S_USER_ID, -1, -1, S_EXPIRATION, S_REPLY_TO]

cdef enum:
    MAX_DEPTH = 16          # nested tables/arrays rendered as JSON, this deep at most


cdef class Batch:
    """The columns of one Arrow record batch (schema: lavinmq.spark.schema)."""
    cdef:
        public Py_ssize_t rows
        IntCol offset
        IntCol timestamp
        VarCol exchange
        VarCol routing_key
        list str_props     # VarCol per string property, by slot
        IntCol priority
        IntCol delivery_mode
        Buf map_offsets
        Py_ssize_t map_entries
        VarCol keys
        VarCol values
        VarCol body
        Buf scratch

    def __cinit__(self):
        self.offset = IntCol(8)
        self.timestamp = IntCol(8)
        self.exchange = VarCol()
        self.routing_key = VarCol()
        self.str_props = [VarCol() for _ in range(N_STR_PROPS)]
        self.priority = IntCol(4)
        self.delivery_mode = IntCol(4)
        self.map_offsets = Buf()
        self.map_offsets.put_i32(0)
        self.keys = VarCol()
        self.values = VarCol()
        self.body = VarCol()
        self.scratch = Buf()

    @property
    def body_bytes(self):
        return self.body.data.len

    def record_batch(self, schema):
        """-> pyarrow.RecordBatch with exactly the given (Spark's) schema."""
        import pyarrow as pa
        n = self.rows
        props_type = schema.field("properties").type
        children = []
        for i, name in enumerate(PROPERTY_FIELDS):
            t = props_type.field(name).type
            if FIELD_SLOT[i] >= 0:
                children.append((<VarCol>self.str_props[FIELD_SLOT[i]]).array(pa, t))
            elif name == "priority":
                children.append(self.priority.array(pa, t))
            else:
                children.append(self.delivery_mode.array(pa, t))
        headers_type = schema.field("headers").type
        headers = pa.MapArray.from_arrays(
            pa.Array.from_buffers(pa.int32(), n + 1, [None, pa.py_buffer(self.map_offsets)]),
            self.keys.array(pa, headers_type.key_type), self.values.array(pa, headers_type.item_type),
            type=headers_type)
        columns = {
            "offset": self.offset.array(pa, schema.field("offset").type),
            "timestamp": self.timestamp.array(pa, schema.field("timestamp").type),
            "exchange": self.exchange.array(pa, schema.field("exchange").type),
            "routing_key": self.routing_key.array(pa, schema.field("routing_key").type),
            "properties": pa.StructArray.from_arrays(children, fields=list(props_type)),
            "headers": headers,
            "body": self.body.array(pa, schema.field("body").type),
        }
        return pa.RecordBatch.from_arrays([columns[f.name] for f in schema], schema=schema)


# -- field table values as strings ----------------------------------------------

cdef Py_ssize_t value_size(char t, const char *p, Py_ssize_t avail) noexcept nogil:
    """Bytes of a field value after its type octet, -1 if it does not fit."""
    cdef Py_ssize_t n
    if t == b"t" or t == b"b" or t == b"B":
        n = 1
    elif t == b"s" or t == b"u":
        n = 2
    elif t == b"I" or t == b"i" or t == b"f":
        n = 4
    elif t == b"l" or t == b"L" or t == b"d" or t == b"T":
        n = 8
    elif t == b"D":
        n = 5
    elif t == b"V":
        n = 0
    elif t == b"S" or t == b"x" or t == b"F" or t == b"A":
        if avail < 4:
            return -1
        n = 4 + <Py_ssize_t>be32(p)
    else:
        return -1
    return n if n <= avail else -1


cdef int put_json_string(Buf out, const char *s, Py_ssize_t n) except -1:
    cdef Py_ssize_t i
    cdef uint8_t c
    cdef char esc[8]
    out.put(b'"', 1)
    for i in range(n):
        c = <uint8_t>s[i]
        if c == b'"' or c == b'\\':
            out.put(b"\\", 1)
            out.put(&s[i], 1)
        elif c < 0x20:
            snprintf(esc, 8, "\\u%04x", c)
            out.put(esc, 6)
        else:
            out.put(&s[i], 1)
    out.put(b'"', 1)
    return 0


cdef bint valid_utf8(const char *s, Py_ssize_t n) noexcept nogil:
    cdef Py_ssize_t i = 0, k
    cdef uint8_t c
    while i < n:
        c = <uint8_t>s[i]
        if c < 0x80:
            i += 1
            continue
        if c >= 0xf8 or c < 0xc2:
            return False
        k = 1 if c < 0xe0 else (2 if c < 0xf0 else 3)
        if i + k >= n:
            return False
        i += 1
        while k:
            if (<uint8_t>s[i] & 0xc0) != 0x80:
                return False
            i += 1
            k -= 1
    return True


cdef int put_hex(Buf out, const char *s, Py_ssize_t n) except -1:
    cdef Py_ssize_t i
    cdef char h[3]
    for i in range(n):
        snprintf(h, 3, "%02x", <uint8_t>s[i])
        out.put(h, 2)
    return 0


cdef Py_ssize_t render(Buf out, char t, const char *v, Py_ssize_t avail, bint json, int depth) except -2:
    """The text of a field value into out: strings as they are (quoted in
    JSON), numbers in decimal, booleans true/false, byte arrays as text when
    they are UTF-8 (hex otherwise), tables and arrays as JSON. -> bytes of
    the value consumed, -1 for malformed (nothing sensible written)."""
    cdef Py_ssize_t n = value_size(t, v, avail), pos, kl, m
    cdef char buf[64]
    cdef int k = 0
    cdef int64_t i = 0
    cdef float f
    cdef double d
    cdef uint32_t u32
    cdef uint64_t u64
    cdef bint first
    if n < 0 or depth > MAX_DEPTH:
        return -1
    if t == b"S" or t == b"x":
        m = n - 4
        if t == b"x" and not valid_utf8(v + 4, m):
            if json:
                out.put(b'"', 1)
            put_hex(out, v + 4, m)
            if json:
                out.put(b'"', 1)
        elif json:
            put_json_string(out, v + 4, m)
        else:
            out.put(v + 4, m)
        return n
    if t == b"t":
        if v[0]:
            out.put(b"true", 4)
        else:
            out.put(b"false", 5)
        return n
    if t == b"V":
        out.put(b"null", 4)
        return n
    if t == b"f":
        u32 = be32(v)
        memcpy(&f, &u32, 4)
        k = snprintf(buf, 64, "%.9g", f)
        out.put(buf, k)
        return n
    if t == b"d":
        u64 = be64(v)
        memcpy(&d, &u64, 8)
        k = snprintf(buf, 64, "%.17g", d)
        out.put(buf, k)
        return n
    if t == b"D":
        i = <int32_t>be32(v + 1)
        k = snprintf(buf, 64, "%lld", <long long>i)
        if <uint8_t>v[0] and k > 0:
            # decimal: digits with the point scale places from the right
            _put_scaled(out, buf, k, <uint8_t>v[0])
        else:
            out.put(buf, k)
        return n
    if t == b"F" or t == b"A":
        out.put(b"{" if t == b"F" else b"[", 1)
        pos = 4
        first = True
        while pos < n:
            if not first:
                out.put(b",", 1)
            first = False
            if t == b"F":
                kl = <uint8_t>v[pos]
                if pos + 1 + kl + 1 > n:
                    return -1
                put_json_string(out, v + pos + 1, kl)
                out.put(b":", 1)
                pos += 1 + kl
            if pos >= n:
                return -1
            m = render(out, v[pos], v + pos + 1, n - pos - 1, True, depth + 1)
            if m < 0:
                return -1
            pos += 1 + m
        out.put(b"}" if t == b"F" else b"]", 1)
        return n
    # integers
    if t == b"b":
        i = <int8_t>v[0]
    elif t == b"B":
        i = <uint8_t>v[0]
    elif t == b"s":
        i = <int16_t>be16(v)
    elif t == b"u":
        i = be16(v)
    elif t == b"I":
        i = <int32_t>be32(v)
    elif t == b"i":
        i = be32(v)
    elif t == b"l" or t == b"T":
        i = <int64_t>be64(v)
    elif t == b"L":
        k = snprintf(buf, 64, "%llu", <unsigned long long>be64(v))
        out.put(buf, k)
        return n
    k = snprintf(buf, 64, "%lld", <long long>i)
    out.put(buf, k)
    return n


cdef int _put_scaled(Buf out, const char *digits, int k, int scale) except -1:
    cdef int neg = digits[0] == b"-"
    cdef int nd = k - neg
    if neg:
        out.put(b"-", 1)
    if nd <= scale:
        out.put(b"0.", 2)
        while nd < scale:
            out.put(b"0", 1)
            scale -= 1
        out.put(digits + neg, k - neg)
    else:
        out.put(digits + neg, nd - scale)
        out.put(b".", 1)
        out.put(digits + k - scale, scale)
    return 0


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

    def take(self):
        """-> the Batch of the rows decoded so far; a new one starts."""
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
