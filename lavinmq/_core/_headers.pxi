# Reading a message's properties and headers table in place: where the table
# is, its entries as comparable values (HVal), CC/BCC routing keys, one
# property by index (for the consistent-hash exchange), and the same values
# built from Python objects for bindings. Included by routing.pyx.

cdef enum:
    PROP_HEADERS_FLAG = 0x2000
    PROP_COUNT = 14

# property index (flag order) -> 1 shortstr, 2 table, 3 octet, 4 timestamp
cdef uint8_t PROP_KIND[14]
PROP_KIND[:] = [1, 1, 2, 3, 3, 1, 1, 1, 1, 4, 1, 1, 1, 1]
PROPERTY_INDEX = {
    "content_type": 0, "content_encoding": 1, "headers": 2, "delivery_mode": 3, "priority": 4,
    "correlation_id": 5, "reply_to": 6, "expiration": 7, "message_id": 8, "timestamp": 9,
    "type": 10, "user_id": 11, "app_id": 12, "cluster_id": 13,
}


cdef Py_ssize_t find_property(const char *props, Py_ssize_t plen, int which, Py_ssize_t *vlen) noexcept:
    """Offset of property `which` in a disk-form property list, its length in
    *vlen (a shortstr's bytes without the length octet, a table's body), or
    -1 when it is absent or the list is cut short."""
    cdef Py_ssize_t pos = 2, n
    cdef uint16_t flags
    cdef int i
    cdef uint8_t kind
    if props is NULL or plen < 2:
        return -1
    flags = le16(props)
    if not (flags & (1 << (15 - which))):
        return -1
    for i in range(which + 1):
        if not (flags & (1 << (15 - i))):
            continue
        kind = PROP_KIND[i]
        if kind == 1:
            if pos + 1 > plen:
                return -1
            n = <uint8_t>props[pos]
            if i == which:
                vlen[0] = n
                return pos + 1 if pos + 1 + n <= plen else -1
            pos += 1 + n
        elif kind == 2:
            if pos + 4 > plen:
                return -1
            n = le32(props + pos)
            if i == which:
                vlen[0] = n
                return pos + 4 if pos + 4 + n <= plen else -1
            pos += 4 + n
        elif kind == 3:
            if i == which:
                vlen[0] = 1
                return pos if pos + 1 <= plen else -1
            pos += 1
        else:
            if i == which:
                vlen[0] = 8
                return pos if pos + 8 <= plen else -1
            pos += 8
    return -1


cdef inline bint fits_int64(double d) noexcept nogil:
    return d == d and d >= -9.2233720368547758e18 and d < 9.2233720368547758e18 and d == <double><int64_t>d


cdef inline void hval_from_double(HVal *v, double d) noexcept nogil:
    cdef int64_t bits
    if fits_int64(d):
        v.cls = HC_INT
        v.i = <int64_t>d
    else:
        v.cls = HC_FLOAT
        memcpy(&bits, &d, 8)
        v.i = bits


cdef Py_ssize_t read_field(const char *p, Py_ssize_t n, uint8_t *type_out, HVal *v) noexcept nogil:
    """Decode the field value (type octet, then value, big-endian) at p into
    v. -> bytes used, or -1 if it runs past n or has an unknown type."""
    cdef uint8_t t
    cdef uint32_t u32
    cdef uint64_t u64
    cdef float f32
    cdef double f64
    cdef Py_ssize_t need
    if n < 1:
        return -1
    t = <uint8_t>p[0]
    type_out[0] = t
    p += 1
    n -= 1
    v.p = NULL
    v.n = 0
    if t == b't' or t == b'b' or t == b'B':
        need = 1
    elif t == b's' or t == b'u':
        need = 2
    elif t == b'I' or t == b'i' or t == b'f':
        need = 4
    elif t == b'l' or t == b'L' or t == b'T' or t == b'd':
        need = 8
    elif t == b'D':
        need = 5
    elif t == b'S' or t == b'x' or t == b'A' or t == b'F':
        if n < 4:
            return -1
        u32 = be32(p)
        if <Py_ssize_t>u32 > n - 4:
            return -1
        v.p = p + 4
        v.n = u32
        v.cls = HC_BYTES if (t == b'S' or t == b'x') else (HC_ARRAY if t == b'A' else HC_TABLE)
        v.i = 0
        return 1 + 4 + u32
    elif t == b'V':
        v.cls = HC_VOID
        v.i = 0
        return 1
    else:
        return -1
    if n < need:
        return -1
    if t == b't':
        v.cls = HC_BOOL
        v.i = 1 if p[0] else 0
    elif t == b'b':
        v.cls = HC_INT
        v.i = <int8_t>p[0]
    elif t == b'B':
        v.cls = HC_INT
        v.i = <uint8_t>p[0]
    elif t == b's':
        v.cls = HC_INT
        v.i = <int16_t>be16(p)
    elif t == b'u':
        v.cls = HC_INT
        v.i = be16(p)
    elif t == b'I':
        v.cls = HC_INT
        v.i = <int32_t>be32(p)
    elif t == b'i':
        v.cls = HC_INT
        v.i = be32(p)
    elif t == b'f':
        u32 = be32(p)
        memcpy(&f32, &u32, 4)
        hval_from_double(v, f32)
    elif t == b'd':
        u64 = be64(p)
        memcpy(&f64, &u64, 8)
        hval_from_double(v, f64)
    elif t == b'D':
        v.cls = HC_DECIMAL
        v.i = (<int64_t><uint8_t>p[0] << 32) | be32(p + 1)
    else:       # l L T
        u64 = be64(p)
        if t == b'l' or u64 <= <uint64_t>0x7fffffffffffffff:
            v.cls = HC_INT
        else:
            v.cls = HC_UINT_BIG
        v.i = <int64_t>u64
    return 1 + need


cdef inline bint hval_equal(const HVal *a, const HVal *b) noexcept nogil:
    if a.cls != b.cls:
        return False
    if a.cls >= HC_BYTES:
        return a.n == b.n and memcmp(a.p, b.p, a.n) == 0
    return a.i == b.i


cdef int write_composite(WriteBuffer wb, const char *key, uint32_t klen, const HVal *v) except -1:
    """(key, value) as one byte string: the key of the header pair index."""
    wb.clear()
    wb.reserve(4 + klen + 1 + 8 + v.n)
    memcpy(wb.buf, &klen, 4)
    memcpy(wb.buf + 4, key, klen)
    wb.buf[4 + klen] = <char>v.cls
    wb.len = 5 + klen
    if v.cls >= HC_BYTES:
        memcpy(wb.buf + wb.len, v.p, v.n)
        wb.len += v.n
    elif v.cls != HC_VOID:
        memcpy(wb.buf + wb.len, &v.i, 8)
        wb.len += 8
    return 0


def hval_tuple(value):
    """A Python value (as decoded from an AMQP table) -> (class, int, bytes),
    the form bindings compare message headers in."""
    cdef double d
    cdef int64_t bits
    cdef HVal v
    if value is None:
        return (HC_VOID, 0, b"")
    if isinstance(value, bool):
        return (HC_BOOL, 1 if value else 0, b"")
    if isinstance(value, int):
        if -(1 << 63) <= value < (1 << 63):
            return (HC_INT, value, b"")
        if value < (1 << 64):
            return (HC_UINT_BIG, value - (1 << 64), b"")
        raise PreconditionFailed(f"integer {value} does not fit a header value", 50, 20)
    if isinstance(value, float):
        hval_from_double(&v, value)
        return (v.cls, v.i, b"")
    if isinstance(value, decimal.Decimal):
        sign, digits, exp = value.as_tuple()
        if not isinstance(exp, int) or exp > 0 or -exp > 255:
            raise PreconditionFailed(f"decimal {value} does not fit a header value", 50, 20)
        unscaled = int("".join(map(str, digits)) or "0") * (-1 if sign else 1)
        if not -(1 << 31) <= unscaled < (1 << 31):
            raise PreconditionFailed(f"decimal {value} does not fit a header value", 50, 20)
        return (HC_DECIMAL, ((-exp) << 32) | (unscaled & 0xffffffff), b"")
    if isinstance(value, str):
        return (HC_BYTES, 0, value.encode("utf-8", "surrogateescape"))
    if isinstance(value, (bytes, bytearray)):
        return (HC_BYTES, 0, bytes(value))
    if isinstance(value, dict):
        return (HC_TABLE, 0, encode_table_bytes(value)[4:])
    if isinstance(value, (list, tuple)):
        # the array's body: encoded as the value of an empty key, then cut out
        return (HC_ARRAY, 0, encode_table_bytes({"": list(value)})[10:])
    if isinstance(value, datetime.datetime):
        return (HC_INT, int(value.timestamp()), b"")
    raise PreconditionFailed(f"unsupported header value {value!r}", 50, 20)
