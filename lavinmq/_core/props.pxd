# Reading single properties of a stored record in place (disk form: flags
# u16 LE, then the present fields; tables as a LE length and the wire body).
# Records were validated when written, so these walks need no bounds checks.
from libc.stdint cimport uint8_t, uint16_t, int64_t, uint64_t
from lavinmq._core.buffer cimport le16, le32, le64

cdef enum:
    # property index (bit 15 - index of the flags word), as in the spec
    P_CONTENT_TYPE = 0
    P_CONTENT_ENCODING = 1
    P_HEADERS = 2
    P_DELIVERY_MODE = 3
    P_PRIORITY = 4
    P_CORRELATION_ID = 5
    P_REPLY_TO = 6
    P_EXPIRATION = 7
    P_MESSAGE_ID = 8
    P_TIMESTAMP = 9
    P_TYPE = 10
    P_USER_ID = 11
    P_APP_ID = 12
    P_CLUSTER_ID = 13
    PROP_COUNT = 14


cdef inline Py_ssize_t record_props_offset(const char *rec) noexcept nogil:
    # ts u64 | exchange shortstr | routing key shortstr | properties
    cdef Py_ssize_t exlen = <uint8_t>rec[8]
    return 10 + exlen + <uint8_t>rec[9 + exlen]


cdef inline Py_ssize_t prop_field_size(const char *p, int index) noexcept nogil:
    """Size in disk form of the field of property `index` starting at p."""
    if index == P_HEADERS:
        return 4 + <Py_ssize_t>le32(p)
    if index == P_DELIVERY_MODE or index == P_PRIORITY:
        return 1
    if index == P_TIMESTAMP:
        return 8
    return 1 + <uint8_t>p[0]


cdef inline Py_ssize_t prop_offset(const char *props, int index) noexcept nogil:
    """Offset of property `index` within the property list, -1 if absent."""
    cdef uint16_t flags = le16(props)
    cdef Py_ssize_t pos = 2
    cdef int i
    if not (flags & (1 << (15 - index))):
        return -1
    for i in range(index):
        if flags & (1 << (15 - i)):
            pos += prop_field_size(props + pos, i)
    return pos


cdef inline Py_ssize_t prop_offset_insert(const char *props, int index) noexcept nogil:
    """Where property `index` is, or would go if it were added."""
    cdef uint16_t flags = le16(props)
    cdef Py_ssize_t pos = 2
    cdef int i
    for i in range(index):
        if flags & (1 << (15 - i)):
            pos += prop_field_size(props + pos, i)
    return pos


cdef inline bint has_prop(const char *props, int index) noexcept nogil:
    return (le16(props) & (1 << (15 - index))) != 0


cdef inline int record_priority(const char *rec) noexcept nogil:
    """The priority property of a record, 0 when it has none."""
    cdef const char *props = rec + record_props_offset(rec)
    cdef Py_ssize_t off = prop_offset(props, P_PRIORITY)
    return 0 if off < 0 else <uint8_t>props[off]


cdef inline int64_t parse_expiration(const char *p, Py_ssize_t n) noexcept nogil:
    """The expiration property (ms as decimal digits) -> ms, or -1 when it
    is not a non-negative integer (RabbitMQ refuses those at publish; we
    let them live forever rather than lose them)."""
    cdef int64_t v = 0
    cdef Py_ssize_t i
    if n == 0 or n > 18:
        return -1
    for i in range(n):
        if p[i] < 48 or p[i] > 57:
            return -1
        v = v * 10 + (p[i] - 48)
    return v


cdef inline int64_t record_expiration(const char *rec) noexcept nogil:
    """The record's own TTL in ms, -1 when it has none."""
    cdef const char *props = rec + record_props_offset(rec)
    cdef Py_ssize_t off = prop_offset(props, P_EXPIRATION)
    if off < 0:
        return -1
    return parse_expiration(props + off + 1, <uint8_t>props[off])


cdef inline uint64_t record_body_len(const char *rec) noexcept nogil:
    cdef const char *props = rec + record_props_offset(rec)
    cdef uint16_t flags = le16(props)
    cdef Py_ssize_t pos = 2
    cdef int i
    for i in range(PROP_COUNT):
        if flags & (1 << (15 - i)):
            pos += prop_field_size(props + pos, i)
    return le64(props + pos)
