# cython: language_level=3
# Field tables are walked as bytes (the wire's big-endian body, as stored).
# A message's headers were not validated when it was published, so every
# walk is bounds-checked: a table that does not parse is treated as absent
# (the dead-lettered copy then carries only the x-death headers).
from libc.stdint cimport uint8_t, uint16_t, uint32_t, uint64_t, int64_t, int32_t
from libc.string cimport memcmp
from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_GET_SIZE

from lavinmq._core.buffer cimport WriteBuffer, le16, le32, le64, be32, be64, put_le16, put_le32, put_le64, put_be32
from lavinmq._core.props cimport (
    record_props_offset, prop_field_size, P_HEADERS, P_EXPIRATION, PROP_COUNT,
)

cdef const char *REASONS[4]
REASONS[0] = b"rejected"
REASONS[1] = b"expired"
REASONS[2] = b"maxlen"
REASONS[3] = b"delivery_limit"
cdef Py_ssize_t REASON_LEN[4]
REASON_LEN[:] = [8, 7, 6, 14]


cdef struct Field:
    const char *key
    Py_ssize_t klen
    const char *val         # type byte, then the value
    Py_ssize_t vlen


cdef Py_ssize_t value_size(const char *p, Py_ssize_t avail) noexcept:
    """Bytes of the field value at p (type byte included), -1 if malformed."""
    cdef uint8_t t
    cdef Py_ssize_t n
    if avail < 1:
        return -1
    t = <uint8_t>p[0]
    if t == b"t" or t == b"b" or t == b"B":
        n = 2
    elif t == b"s" or t == b"u":
        n = 3
    elif t == b"I" or t == b"i" or t == b"f":
        n = 5
    elif t == b"l" or t == b"L" or t == b"d" or t == b"T":
        n = 9
    elif t == b"D":
        n = 6
    elif t == b"V":
        n = 1
    elif t == b"S" or t == b"x" or t == b"A" or t == b"F":
        if avail < 5:
            return -1
        n = 5 + <Py_ssize_t>be32(p + 1)
    else:
        return -1
    return n if n <= avail else -1


cdef int next_field(const char *body, Py_ssize_t blen, Py_ssize_t *pos, Field *f) noexcept:
    """Table entry at *pos: 1 and advances, 0 at the end, -1 malformed."""
    cdef Py_ssize_t p = pos[0]
    cdef Py_ssize_t n
    if p >= blen:
        return 0
    f.klen = <uint8_t>body[p]
    f.key = body + p + 1
    p += 1 + f.klen
    if p > blen:
        return -1
    n = value_size(body + p, blen - p)
    if n < 0:
        return -1
    f.val = body + p
    f.vlen = n
    pos[0] = p + n
    return 1


cdef bint table_ok(const char *body, Py_ssize_t blen) noexcept:
    cdef Py_ssize_t pos = 0
    cdef Field f
    cdef int r
    while True:
        r = next_field(body, blen, &pos, &f)
        if r <= 0:
            return r == 0


cdef inline bint key_is(Field *f, const char *k, Py_ssize_t n) noexcept:
    return f.klen == n and memcmp(f.key, k, n) == 0


cdef inline bint longstr_is(Field *f, const char *s, Py_ssize_t n) noexcept:
    # an 'S' (or 'x') value equal to s
    return (f.vlen == 5 + n and (f.val[0] == b"S" or f.val[0] == b"x")
            and memcmp(f.val + 5, s, n) == 0)


cdef int64_t int_value(Field *f) noexcept:
    cdef uint8_t t = <uint8_t>f.val[0]
    if t == b"l" or t == b"L" or t == b"T":
        return <int64_t>be64(f.val + 1)
    if t == b"I":
        return <int32_t>be32(f.val + 1)
    if t == b"i":
        return be32(f.val + 1)
    if t == b"b":
        return <signed char>f.val[1]
    if t == b"B":
        return <uint8_t>f.val[1]
    if t == b"s":
        return <short>((<uint8_t>f.val[1] << 8) | <uint8_t>f.val[2])
    if t == b"u":
        return (<uint8_t>f.val[1] << 8) | <uint8_t>f.val[2]
    return 0



# -- writing table entries (wire order) -----------------------------------------

cdef inline int put_key(WriteBuffer wb, const char *k, Py_ssize_t n) except -1:
    return wb.write_shortstr(k, n)


cdef int put_str(WriteBuffer wb, const char *k, Py_ssize_t kn, const char *v, Py_ssize_t vn) except -1:
    put_key(wb, k, kn)
    wb.write_u8(b"S")
    wb.write_u32(<uint32_t>vn)
    wb.write_raw(v, vn)
    return 0


cdef inline Py_ssize_t open_len(WriteBuffer wb) except -1:
    cdef Py_ssize_t at = wb.len
    wb.write_u32(0)
    return at


cdef inline void close_len(WriteBuffer wb, Py_ssize_t at) noexcept:
    put_be32(wb.buf + at, <uint32_t>(wb.len - at - 4))


cdef int write_new_death(WriteBuffer wb, const char *ex, Py_ssize_t exlen, const char *rk, Py_ssize_t rklen,
                         Field *cc, const char *expiration, Py_ssize_t explen,
                         const char *queue, Py_ssize_t qlen, int reason, uint64_t now_ms) except -1:
    """A first x-death entry for this queue and reason, fields sorted by key
    as RabbitMQ writes them."""
    cdef Py_ssize_t at, arr, pos, n
    wb.write_u8(b"F")
    at = open_len(wb)
    put_key(wb, b"count", 5)
    wb.write_u8(b"l")
    wb.write_u64(1)
    put_str(wb, b"exchange", 8, ex, exlen)
    if expiration is not NULL:
        put_str(wb, b"original-expiration", 19, expiration, explen)
    put_str(wb, b"queue", 5, queue, qlen)
    put_str(wb, b"reason", 6, REASONS[reason], REASON_LEN[reason])
    put_key(wb, b"routing-keys", 12)
    wb.write_u8(b"A")
    arr = open_len(wb)
    wb.write_u8(b"S")
    wb.write_u32(<uint32_t>rklen)
    wb.write_raw(rk, rklen)
    if cc is not NULL and cc.val[0] == b"A":
        # the CC header's strings are routing keys the message was sent with
        pos = 5
        while pos < cc.vlen:
            n = value_size(cc.val + pos, cc.vlen - pos)
            if n < 0:
                break
            if cc.val[pos] == b"S":
                wb.write_raw(cc.val + pos, n)
            pos += n
    close_len(wb, arr)
    put_key(wb, b"time", 4)
    wb.write_u8(b"T")
    wb.write_u64(now_ms // 1000)
    close_len(wb, at)
    return 0


cdef int write_counted_death(WriteBuffer wb, Field *entry) except -1:
    """An existing x-death entry (a table value) with its count one up."""
    cdef const char *body = entry.val + 5
    cdef Py_ssize_t blen = entry.vlen - 5
    cdef Py_ssize_t pos = 0, at
    cdef Field f
    cdef bint counted = False
    wb.write_u8(b"F")
    at = open_len(wb)
    while next_field(body, blen, &pos, &f) == 1:
        if key_is(&f, b"count", 5):
            put_key(wb, b"count", 5)
            wb.write_u8(b"l")
            wb.write_u64(<uint64_t>(int_value(&f) + 1))
            counted = True
        else:
            wb.write_raw(f.key - 1, 1 + f.klen + f.vlen)
    if not counted:
        put_key(wb, b"count", 5)
        wb.write_u8(b"l")
        wb.write_u64(2)
    close_len(wb, at)
    return 0


cdef bint death_matches(Field *entry, const char *queue, Py_ssize_t qlen, int reason) noexcept:
    """Is this x-death entry (an 'F' value) the one for queue and reason?"""
    cdef Py_ssize_t pos = 0
    cdef Field f
    cdef bint q_ok = False, r_ok = False
    if entry.val[0] != b"F":
        return False
    while next_field(entry.val + 5, entry.vlen - 5, &pos, &f) == 1:
        if key_is(&f, b"queue", 5):
            q_ok = longstr_is(&f, queue, qlen)
        elif key_is(&f, b"reason", 6):
            r_ok = longstr_is(&f, REASONS[reason], REASON_LEN[reason])
    return q_ok and r_ok


cdef int write_headers(WriteBuffer wb, const char *hbody, Py_ssize_t hlen, const char *ex, Py_ssize_t exlen,
                       const char *rk, Py_ssize_t rklen, const char *expiration, Py_ssize_t explen,
                       const char *queue, Py_ssize_t qlen, int reason, bint drop_cc,
                       uint64_t now_ms) except -1:
    """The headers property of the dead-lettered copy, in disk form (LE
    length, wire body)."""
    cdef Py_ssize_t at, arr, pos
    cdef Field f, xdeath, cc, item
    cdef bint has_xdeath = False, has_cc = False, has_first = False, matched = False
    xdeath.val = NULL    # read only when has_xdeath; set so that gcc sees it is never used unset
    xdeath.vlen = 0
    if hbody is not NULL and not table_ok(hbody, hlen):
        hbody = NULL
    at = wb.len
    wb.reserve(4)
    wb.len += 4
    if hbody is not NULL:
        pos = 0
        while next_field(hbody, hlen, &pos, &f) == 1:
            if key_is(&f, b"x-death", 7):
                xdeath = f
                has_xdeath = f.val[0] == b"A"
                continue
            if key_is(&f, b"CC", 2):
                cc = f
                has_cc = True
                if drop_cc:
                    continue
            elif key_is(&f, b"BCC", 3):
                continue
            elif key_is(&f, b"x-first-death-reason", 20):
                has_first = True
            wb.write_raw(f.key - 1, 1 + f.klen + f.vlen)
    put_key(wb, b"x-death", 7)
    wb.write_u8(b"A")
    arr = open_len(wb)
    # the entry for this queue and reason goes first: counted up if the
    # message died here for this reason before, new otherwise
    if has_xdeath:
        pos = 5
        while pos < xdeath.vlen:
            item.val = xdeath.val + pos
            item.vlen = value_size(item.val, xdeath.vlen - pos)
            if item.vlen < 0:
                break
            if death_matches(&item, queue, qlen, reason):
                write_counted_death(wb, &item)
                matched = True
                break
            pos += item.vlen
    if not matched:
        write_new_death(wb, ex, exlen, rk, rklen, &cc if has_cc else NULL, expiration, explen,
                        queue, qlen, reason, now_ms)
    if has_xdeath:
        pos = 5
        while pos < xdeath.vlen:
            item.val = xdeath.val + pos
            item.vlen = value_size(item.val, xdeath.vlen - pos)
            if item.vlen < 0:
                break
            if not (matched and death_matches(&item, queue, qlen, reason)):
                wb.write_raw(item.val, item.vlen)
            pos += item.vlen
    close_len(wb, arr)
    if not has_first:
        put_str(wb, b"x-first-death-exchange", 22, ex, exlen)
        put_str(wb, b"x-first-death-queue", 19, queue, qlen)
        put_str(wb, b"x-first-death-reason", 20, REASONS[reason], REASON_LEN[reason])
    put_le32(wb.buf + at, <uint32_t>(wb.len - at - 4))
    return 0


cdef Py_ssize_t build_dead_letter(WriteBuffer out, const char *rec, int reason, bytes queue,
                                  bytes dlx, bytes dlrk, unsigned long long now_ms) except -1:
    """Write the dead-lettered copy of rec into out (cleared first): the
    dead-letter exchange, the dead-letter routing key (or the message's
    own), properties without expiration and with x-death, the same body.
    -> its length."""
    cdef Py_ssize_t exlen = <uint8_t>rec[8]
    cdef const char *ex = rec + 9
    cdef Py_ssize_t rklen = <uint8_t>rec[9 + exlen]
    cdef const char *rk = rec + 10 + exlen
    cdef Py_ssize_t po = record_props_offset(rec)
    cdef const char *props = rec + po
    cdef uint16_t flags = le16(props)
    cdef Py_ssize_t pos = 2, n, flags_at
    cdef const char *fields[14]
    cdef Py_ssize_t sizes[14]
    cdef const char *hbody = NULL
    cdef Py_ssize_t hlen = 0
    cdef const char *expiration = NULL
    cdef Py_ssize_t explen = 0
    cdef uint64_t bodylen
    cdef int i
    for i in range(PROP_COUNT):
        if flags & (1 << (15 - i)):
            fields[i] = props + pos
            sizes[i] = prop_field_size(props + pos, i)
            pos += sizes[i]
    bodylen = le64(props + pos)
    if flags & (1 << (15 - P_HEADERS)):
        hlen = le32(fields[P_HEADERS])
        hbody = fields[P_HEADERS] + 4
    if flags & (1 << (15 - P_EXPIRATION)):
        expiration = fields[P_EXPIRATION] + 1
        explen = sizes[P_EXPIRATION] - 1
    out.clear()
    out.reserve(8)
    put_le64(out.buf, now_ms)
    out.len = 8
    out.write_shortstr(PyBytes_AS_STRING(dlx), PyBytes_GET_SIZE(dlx))
    if dlrk is None:
        out.write_shortstr(rk, rklen)
    else:
        out.write_shortstr(PyBytes_AS_STRING(dlrk), PyBytes_GET_SIZE(dlrk))
    flags_at = out.len
    out.reserve(2)
    out.len += 2
    put_le16(out.buf + flags_at, (flags | (1 << (15 - P_HEADERS))) & ~(1 << (15 - P_EXPIRATION)))
    for i in range(PROP_COUNT):
        if i == P_HEADERS:
            write_headers(out, hbody, hlen, ex, exlen, rk, rklen, expiration, explen,
                          PyBytes_AS_STRING(queue), PyBytes_GET_SIZE(queue), reason,
                          dlrk is not None, now_ms)
        elif i != P_EXPIRATION and flags & (1 << (15 - i)):
            out.write_raw(fields[i], sizes[i])
    out.reserve(8)
    put_le64(out.buf + out.len, bodylen)
    out.len += 8
    out.write_raw(props + pos + 8, <Py_ssize_t>bodylen)
    return out.len


cdef bint is_cycle(const char *rec, bytes queue) except -1:
    """RabbitMQ's rule: follow x-death from the newest death back to the
    last time the message died in `queue`; if none of those deaths was a
    rejection, delivering it there again would loop forever."""
    cdef Py_ssize_t po = record_props_offset(rec)
    cdef const char *props = rec + po
    cdef uint16_t flags = le16(props)
    cdef Py_ssize_t pos = 2, p2
    cdef const char *hdr
    cdef Py_ssize_t hlen
    cdef Field f, item, g
    cdef int i
    cdef bint rejected, in_queue
    cdef const char *q = PyBytes_AS_STRING(queue)
    cdef Py_ssize_t qlen = PyBytes_GET_SIZE(queue)
    if not flags & (1 << (15 - P_HEADERS)):
        return False
    for i in range(P_HEADERS):
        if flags & (1 << (15 - i)):
            pos += prop_field_size(props + pos, i)
    hlen = le32(props + pos)
    hdr = props + pos + 4
    pos = 0
    while next_field(hdr, hlen, &pos, &f) == 1:
        if not key_is(&f, b"x-death", 7) or f.val[0] != b"A":
            continue
        p2 = 5
        while p2 < f.vlen:
            item.val = f.val + p2
            item.vlen = value_size(item.val, f.vlen - p2)
            if item.vlen < 0:
                return False
            if item.val[0] == b"F":
                rejected = in_queue = False
                pos = 0
                while next_field(item.val + 5, item.vlen - 5, &pos, &g) == 1:
                    if key_is(&g, b"reason", 6):
                        rejected = longstr_is(&g, REASONS[0], REASON_LEN[0])
                    elif key_is(&g, b"queue", 5):
                        in_queue = longstr_is(&g, q, qlen)
                if rejected:
                    return False
                if in_queue:
                    return True
            p2 += item.vlen
        return False
    return False


def py_build_dead_letter(bytes rec, int reason, bytes queue, bytes dlx, bytes dlrk, unsigned long long now_ms):
    """Tests: the dead-lettered record of rec."""
    cdef WriteBuffer wb = WriteBuffer()
    build_dead_letter(wb, rec, reason, queue, dlx, dlrk, now_ms)
    return wb.take()


def py_is_cycle(bytes rec, bytes queue):
    return is_cycle(rec, queue)


cdef Py_ssize_t build_with_int_header(WriteBuffer out, const char *rec, const char *key, Py_ssize_t klen,
                                      long long value) except -1:
    cdef Py_ssize_t po = record_props_offset(rec)
    cdef const char *props = rec + po
    cdef uint16_t flags = le16(props)
    cdef Py_ssize_t pos = 2, at
    cdef const char *fields[14]
    cdef Py_ssize_t sizes[14]
    cdef const char *hbody = NULL
    cdef Py_ssize_t hlen = 0, hp = 0
    cdef Field f
    cdef uint64_t bodylen
    cdef int i
    for i in range(PROP_COUNT):
        if flags & (1 << (15 - i)):
            fields[i] = props + pos
            sizes[i] = prop_field_size(props + pos, i)
            pos += sizes[i]
    bodylen = le64(props + pos)
    if flags & (1 << (15 - P_HEADERS)):
        hlen = le32(fields[P_HEADERS])
        hbody = fields[P_HEADERS] + 4
        if not table_ok(hbody, hlen):
            hbody = NULL
    out.clear()
    out.write_raw(rec, po)                  # timestamp, exchange, routing key as they are
    at = out.len
    out.reserve(2)
    out.len += 2
    put_le16(out.buf + at, flags | (1 << (15 - P_HEADERS)))
    for i in range(PROP_COUNT):
        if i == P_HEADERS:
            at = out.len
            out.reserve(4)
            out.len += 4
            if hbody is not NULL:
                while next_field(hbody, hlen, &hp, &f) == 1:
                    if not key_is(&f, key, klen):
                        out.write_raw(f.key - 1, 1 + f.klen + f.vlen)
            put_key(out, key, klen)
            out.write_u8(b"l")
            out.write_u64(<uint64_t>value)
            put_le32(out.buf + at, <uint32_t>(out.len - at - 4))
        elif flags & (1 << (15 - i)):
            out.write_raw(fields[i], sizes[i])
    out.reserve(8)
    put_le64(out.buf + out.len, bodylen)
    out.len += 8
    out.write_raw(props + pos + 8, <Py_ssize_t>bodylen)
    return out.len


cdef int find_header(const char *rec, const char *key, Py_ssize_t klen, const char **val,
                     Py_ssize_t *vlen) except -1:
    cdef const char *props = rec + record_props_offset(rec)
    cdef uint16_t flags = le16(props)
    cdef Py_ssize_t pos = 2, hlen
    cdef const char *hdr
    cdef Field f
    cdef int i
    if not flags & (1 << (15 - P_HEADERS)):
        return 0
    for i in range(P_HEADERS):
        if flags & (1 << (15 - i)):
            pos += prop_field_size(props + pos, i)
    hlen = le32(props + pos)
    hdr = props + pos + 4
    pos = 0
    while next_field(hdr, hlen, &pos, &f) == 1:
        if key_is(&f, key, klen):
            val[0] = f.val
            vlen[0] = f.vlen
            return 1
    return 0
