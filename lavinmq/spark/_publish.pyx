# cython: language_level=3
"""Rows of an Arrow record batch into basic.publish frames (method, content
header, body), in one buffer per batch: the Spark sink's per-row work,
without a Python object per row.

Columns arrive as raw Arrow buffers (lavinmq.spark.sink prepares them):
variable-length columns with 64-bit offsets, the headers map with its 32-bit
offsets into a keys and a values column, the properties struct's children.
A row without a message_id gets a deterministic one (prefix + row number)
that is also written to the deduplication header, so that a task Spark runs
again publishes the same ids."""
from cpython.buffer cimport PyObject_GetBuffer, PyBuffer_Release, PyBUF_SIMPLE
from cpython.bytes cimport PyBytes_FromStringAndSize
from libc.stdint cimport int32_t, int64_t, uint8_t, uint16_t, uint32_t, uint64_t
from libc.stdlib cimport realloc, free
from libc.stdio cimport snprintf
from libc.string cimport memcpy, memcmp


cdef struct Var:
    bint present
    const uint8_t *valid        # NULL: no nulls
    const int64_t *offsets
    const char *data
    Py_ssize_t off              # the array's slice offset


cdef struct Ints:
    bint present
    const uint8_t *valid
    const int32_t *values
    Py_ssize_t off


cdef struct Out:
    char *buf
    Py_ssize_t len
    Py_ssize_t cap


cdef int reserve(Out *o, Py_ssize_t n) except -1:
    cdef Py_ssize_t cap
    cdef char *b
    if o.len + n <= o.cap:
        return 0
    cap = o.cap * 2 if o.cap else 1 << 16
    while cap < o.len + n:
        cap *= 2
    b = <char *>realloc(o.buf, cap)
    if b is NULL:
        raise MemoryError()
    o.buf = b
    o.cap = cap
    return 0


cdef inline int put(Out *o, const void *p, Py_ssize_t n) except -1:
    if o.len + n > o.cap:
        reserve(o, n)
    memcpy(o.buf + o.len, p, n)
    o.len += n
    return 0


cdef inline int put_u8(Out *o, uint8_t v) except -1:
    return put(o, &v, 1)


cdef inline void set_be16(char *p, uint16_t v) noexcept nogil:
    p[0] = <char>(v >> 8)
    p[1] = <char>v


cdef inline void set_be32(char *p, uint32_t v) noexcept nogil:
    p[0] = <char>(v >> 24)
    p[1] = <char>(v >> 16)
    p[2] = <char>(v >> 8)
    p[3] = <char>v


cdef inline int put_be16(Out *o, uint16_t v) except -1:
    reserve(o, 2)
    set_be16(o.buf + o.len, v)
    o.len += 2
    return 0


cdef inline int put_be32(Out *o, uint32_t v) except -1:
    reserve(o, 4)
    set_be32(o.buf + o.len, v)
    o.len += 4
    return 0


cdef inline int put_be64(Out *o, uint64_t v) except -1:
    put_be32(o, <uint32_t>(v >> 32))
    return put_be32(o, <uint32_t>v)


cdef int put_shortstr(Out *o, const char *p, Py_ssize_t n, str what) except -1:
    if n > 255:
        raise ValueError(f"{what} is longer than 255 bytes")
    put_u8(o, <uint8_t>n)
    return put(o, p, n)


cdef inline bint is_valid(const uint8_t *valid, Py_ssize_t i) noexcept nogil:
    return valid is NULL or (valid[i >> 3] >> (i & 7)) & 1


cdef inline bint var_get(Var *v, Py_ssize_t i, const char **p, Py_ssize_t *n) noexcept nogil:
    cdef Py_ssize_t j
    if not v.present:
        return False
    j = v.off + i
    if not is_valid(v.valid, j):
        return False
    p[0] = v.data + v.offsets[j]
    n[0] = v.offsets[j + 1] - v.offsets[j]
    return True


cdef const char *address(object buf, list keep) except? NULL:
    """The memory of a buffer-protocol object, valid while keep holds it."""
    cdef Py_buffer view
    cdef const char *p
    if buf is None:
        return NULL
    PyObject_GetBuffer(buf, &view, PyBUF_SIMPLE)
    p = <const char *>view.buf
    PyBuffer_Release(&view)
    keep.append(buf)
    return p


cdef int var_from(object col, Var *v, list keep) except -1:
    v.present = col is not None
    if col is None:
        return 0
    valid, offsets, data, off = col
    v.valid = <const uint8_t *>address(valid, keep)
    v.offsets = <const int64_t *>address(offsets, keep)
    v.data = address(data, keep)
    v.off = off
    return 0


cdef int ints_from(object col, Ints *v, list keep) except -1:
    v.present = col is not None
    if col is None:
        return 0
    valid, values, off = col
    v.valid = <const uint8_t *>address(valid, keep)
    v.values = <const int32_t *>address(values, keep)
    v.off = off
    return 0


# the properties struct's children (lavinmq.spark.schema), and where each
# goes in a property list: its flag bit
STRING_PROPS = ("content_type", "content_encoding", "message_id", "correlation_id", "type", "app_id",
                "user_id", "expiration", "reply_to")
cdef enum:
    P_CONTENT_TYPE = 0
    P_CONTENT_ENCODING = 1
    P_MESSAGE_ID = 2
    P_CORRELATION_ID = 3
    P_TYPE = 4
    P_APP_ID = 5
    P_USER_ID = 6
    P_EXPIRATION = 7
    P_REPLY_TO = 8
    N_STRING_PROPS = 9


cdef class PublishEncoder:
    """Configured once per task: channel, frame_max, the default exchange
    and routing key, the message id prefix and the deduplication header."""
    cdef:
        uint16_t channel
        uint32_t frame_max
        bytes exchange
        bytes routing_key
        bytes id_prefix
        bytes dedup_header
        int delivery_mode
        bint mandatory
        public uint64_t encoded

    def __init__(self, uint16_t channel, uint32_t frame_max, bytes exchange, bytes routing_key,
                 bytes id_prefix, bytes dedup_header, int delivery_mode=-1, bint mandatory=True):
        if len(exchange) > 255 or len(routing_key) > 255 or len(dedup_header) > 255:
            raise ValueError("exchange, routing key and header names are at most 255 bytes")
        self.channel = channel
        self.frame_max = frame_max
        self.exchange = exchange
        self.routing_key = routing_key
        self.id_prefix = id_prefix
        self.dedup_header = dedup_header
        self.delivery_mode = delivery_mode
        self.mandatory = mandatory

    def encode(self, Py_ssize_t rows, uint64_t first_index, body, routing_key=None, exchange=None,
               headers=None, props_valid=None, props=None, priority=None, delivery_mode=None):
        """-> bytes of the publish frames of rows rows.
        body, routing_key, exchange: (validity, offsets, data, slice offset)
        headers: (validity, offsets, slice offset, keys column, values column)
        props: the 9 string properties (STRING_PROPS order), each a column or
        None; priority, delivery_mode: (validity, int32 values, slice offset)."""
        cdef list keep = []
        cdef Var c_body, c_rk, c_ex, c_keys, c_vals
        cdef Var c_props[9]
        cdef Ints c_prio, c_dm
        cdef const uint8_t *hvalid = NULL
        cdef const int32_t *hoffsets = NULL
        cdef const uint8_t *pvalid = NULL
        cdef Py_ssize_t hoff = 0, poff = 0, i, j
        cdef Out o
        cdef bytes out
        o.buf = NULL
        o.len = o.cap = 0
        var_from(body, &c_body, keep)
        if not c_body.present:
            raise ValueError("a body column is required")
        var_from(routing_key, &c_rk, keep)
        var_from(exchange, &c_ex, keep)
        c_keys.present = c_vals.present = False
        if headers is not None:
            hv, ho, hoff, keys, values = headers
            hvalid = <const uint8_t *>address(hv, keep)
            hoffsets = <const int32_t *>address(ho, keep)
            var_from(keys, &c_keys, keep)
            var_from(values, &c_vals, keep)
        for j in range(N_STRING_PROPS):
            var_from(props[j] if props is not None else None, &c_props[j], keep)
        if props_valid is not None:
            pvalid = <const uint8_t *>address(props_valid[0], keep)
            poff = props_valid[1]
        ints_from(priority, &c_prio, keep)
        ints_from(delivery_mode, &c_dm, keep)
        try:
            for i in range(rows):
                self.row(&o, i, first_index + i, &c_body, &c_rk, &c_ex, hvalid, hoffsets, hoff, &c_keys, &c_vals,
                         pvalid, poff, c_props, &c_prio, &c_dm)
            out = PyBytes_FromStringAndSize(o.buf, o.len)
        finally:
            free(o.buf)
        self.encoded += rows
        return out

    cdef int row(self, Out *o, Py_ssize_t i, uint64_t index, Var *body, Var *rk, Var *ex,
                 const uint8_t *hvalid, const int32_t *hoffsets, Py_ssize_t hoff, Var *keys, Var *vals,
                 const uint8_t *pvalid, Py_ssize_t poff, Var *props, Ints *prio, Ints *dm) except -1:
        cdef const char *p
        cdef Py_ssize_t n, frame_start, size_at, flags_at, table_at, k, e0, e1, bodylen, step, sent
        cdef const char *sv[9]
        cdef Py_ssize_t sn[9]
        cdef char idbuf[300]
        cdef int idlen = 0
        cdef uint16_t flags = 0
        cdef int64_t v_dm = -1, v_prio = -1
        cdef bint have_props = pvalid is NULL or is_valid(pvalid, poff + i)
        cdef bint dedup = len(self.dedup_header) > 0
        cdef const char *key
        cdef Py_ssize_t klen
        cdef const char *val
        cdef Py_ssize_t vlen
        for k in range(N_STRING_PROPS):
            if not (have_props and var_get(&props[k], i, &sv[k], &sn[k])):
                sv[k] = NULL
        if have_props and prio.present and is_valid(prio.valid, prio.off + i):
            v_prio = prio.values[prio.off + i]
        if have_props and dm.present and is_valid(dm.valid, dm.off + i):
            v_dm = dm.values[dm.off + i]
        elif self.delivery_mode >= 0:
            v_dm = self.delivery_mode
        if sv[P_MESSAGE_ID] is NULL:
            # deterministic: the same row of the same task gets the same id
            idlen = snprintf(idbuf, 300, "%.*s%llu", <int>len(self.id_prefix), <const char *>self.id_prefix,
                             <unsigned long long>index)
            sv[P_MESSAGE_ID] = idbuf
            sn[P_MESSAGE_ID] = idlen
        # -- basic.publish
        put_u8(o, 1)
        put_be16(o, self.channel)
        size_at = o.len
        put_be32(o, 0)
        frame_start = o.len
        put_be16(o, 60)
        put_be16(o, 40)
        put_be16(o, 0)
        if var_get(ex, i, &p, &n):
            put_shortstr(o, p, n, "exchange")
        else:
            put_shortstr(o, <const char *>self.exchange, len(self.exchange), "exchange")
        if var_get(rk, i, &p, &n):
            put_shortstr(o, p, n, "routing_key")
        else:
            put_shortstr(o, <const char *>self.routing_key, len(self.routing_key), "routing_key")
        put_u8(o, 1 if self.mandatory else 0)
        set_be32(o.buf + size_at, <uint32_t>(o.len - frame_start))
        put_u8(o, 0xCE)
        # -- content header
        if not var_get(body, i, &p, &bodylen):
            raise ValueError(f"row {index}: body is null")
        put_u8(o, 2)
        put_be16(o, self.channel)
        size_at = o.len
        put_be32(o, 0)
        frame_start = o.len
        put_be16(o, 60)
        put_be16(o, 0)
        put_be64(o, <uint64_t>bodylen)
        flags_at = o.len
        put_be16(o, 0)
        if sv[P_CONTENT_TYPE] is not NULL:
            flags |= 0x8000
            put_shortstr(o, sv[P_CONTENT_TYPE], sn[P_CONTENT_TYPE], "content_type")
        if sv[P_CONTENT_ENCODING] is not NULL:
            flags |= 0x4000
            put_shortstr(o, sv[P_CONTENT_ENCODING], sn[P_CONTENT_ENCODING], "content_encoding")
        e0 = e1 = 0
        if keys.present and hoffsets is not NULL and is_valid(hvalid, hoff + i):
            e0 = hoffsets[hoff + i]
            e1 = hoffsets[hoff + i + 1]
        if e1 > e0 or dedup:
            flags |= 0x2000
            table_at = o.len
            put_be32(o, 0)
            for k in range(e0, e1):
                if not var_get(keys, k, &key, &klen):
                    continue
                if dedup and klen == len(self.dedup_header) and memcmp(key, <const char *>self.dedup_header, klen) == 0:
                    continue        # ours wins: it is what makes a retry harmless
                put_shortstr(o, key, klen, "a header name")
                if var_get(vals, k, &val, &vlen):
                    put_u8(o, b"S")
                    put_be32(o, <uint32_t>vlen)
                    put(o, val, vlen)
                else:
                    put_u8(o, b"V")
            if dedup:
                put_shortstr(o, <const char *>self.dedup_header, len(self.dedup_header), "dedup header")
                put_u8(o, b"S")
                put_be32(o, <uint32_t>sn[P_MESSAGE_ID])
                put(o, sv[P_MESSAGE_ID], sn[P_MESSAGE_ID])
            set_be32(o.buf + table_at, <uint32_t>(o.len - table_at - 4))
        if v_dm >= 0:
            flags |= 0x1000
            put_u8(o, <uint8_t>v_dm)
        if v_prio >= 0:
            flags |= 0x0800
            put_u8(o, <uint8_t>v_prio)
        if sv[P_CORRELATION_ID] is not NULL:
            flags |= 0x0400
            put_shortstr(o, sv[P_CORRELATION_ID], sn[P_CORRELATION_ID], "correlation_id")
        if sv[P_REPLY_TO] is not NULL:
            flags |= 0x0200
            put_shortstr(o, sv[P_REPLY_TO], sn[P_REPLY_TO], "reply_to")
        if sv[P_EXPIRATION] is not NULL:
            flags |= 0x0100
            put_shortstr(o, sv[P_EXPIRATION], sn[P_EXPIRATION], "expiration")
        flags |= 0x0080
        put_shortstr(o, sv[P_MESSAGE_ID], sn[P_MESSAGE_ID], "message_id")
        if sv[P_TYPE] is not NULL:
            flags |= 0x0020
            put_shortstr(o, sv[P_TYPE], sn[P_TYPE], "type")
        if sv[P_USER_ID] is not NULL:
            flags |= 0x0010
            put_shortstr(o, sv[P_USER_ID], sn[P_USER_ID], "user_id")
        if sv[P_APP_ID] is not NULL:
            flags |= 0x0008
            put_shortstr(o, sv[P_APP_ID], sn[P_APP_ID], "app_id")
        set_be16(o.buf + flags_at, flags)
        set_be32(o.buf + size_at, <uint32_t>(o.len - frame_start))
        put_u8(o, 0xCE)
        # -- body frames
        step = self.frame_max - 8
        sent = 0
        while sent < bodylen:
            n = bodylen - sent
            if n > step:
                n = step
            put_u8(o, 3)
            put_be16(o, self.channel)
            put_be32(o, <uint32_t>n)
            put(o, p + sent, n)
            put_u8(o, 0xCE)
            sent += n
        return 0
