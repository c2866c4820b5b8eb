# cython: language_level=3
# Persistent exchanges, the per-message half: keep_routed appends what a
# route passed through into each persistent exchange's store, in Cython,
# with no Python object per message. The store drops whole segments
# (StreamStore retention), so it may hold a few messages more than
# x-persist-messages / x-persist-ms allow: window_start() says where what
# the exchange holds begins, and only that is counted and replayed.
from libc.stdint cimport uint16_t, uint32_t, uint64_t, int64_t

from libc.string cimport memcpy

from lavinmq._core.buffer cimport WriteBuffer, le16, le32, put_le16, put_le32, put_be64
from lavinmq._core.clock cimport now_ms
from lavinmq._core.deadletter cimport build_with_int_header, find_header, table_ok
from lavinmq._core.props cimport record_props_offset, prop_offset_insert, P_HEADERS
from lavinmq._core.routing cimport Exchange, RouteOut
from lavinmq._core.segment cimport SP, Segment, SEGMENT_HEADER, APPEND_NO_SPACE
from lavinmq._core.stream_store cimport StreamStore

cdef enum:
    # the stamped copy's buffer gives memory back above this after a big message
    STAMP_KEEP = 1024 * 1024
    # the x-offset table entry: key length, "x-offset", 'l', a big-endian i64
    ENTRY_LEN = 1 + 8 + 1 + 8
    HEADERS_FLAG = 1 << (15 - P_HEADERS)


cdef Py_ssize_t stamp_offset(WriteBuffer out, const char *rec, Py_ssize_t n, uint64_t offset) except -1:
    """rec with an x-offset header into out: -> its length. The usual
    message (no headers, or headers without x-offset) in three copies; a
    table that does not parse or already has an x-offset (a message that
    came back) takes deadletter's general rewrite."""
    cdef Py_ssize_t po = record_props_offset(rec)
    cdef const char *props = rec + po
    cdef uint16_t flags = le16(props)
    cdef Py_ssize_t at = po + prop_offset_insert(props, P_HEADERS)     # where the table is, or goes
    cdef Py_ssize_t head, tlen = 0
    cdef const char *val
    cdef Py_ssize_t vlen
    cdef char *p
    if flags & HEADERS_FLAG:
        tlen = le32(rec + at)
        if not table_ok(rec + at + 4, tlen) or find_header(rec, b"x-offset", 8, &val, &vlen):
            return build_with_int_header(out, rec, b"x-offset", 8, <long long>offset)
        head = at + 4 + tlen            # the entry goes at the end of the table
    else:
        head = at
    out.clear()
    out.reserve(n + 4 + ENTRY_LEN)
    p = out.buf
    memcpy(p, rec, head)
    put_le16(p + po, flags | HEADERS_FLAG)
    if flags & HEADERS_FLAG:
        put_le32(p + at, <uint32_t>(tlen + ENTRY_LEN))
        p += head
    else:
        put_le32(p + at, ENTRY_LEN)
        p += head + 4
    p[0] = 8
    memcpy(p + 1, b"x-offset", 8)
    p[9] = b"l"
    put_be64(p + 10, offset)
    memcpy(p + ENTRY_LEN, rec + head, n - head)
    out.len = (p + ENTRY_LEN - out.buf) + (n - head)
    return out.len


cdef class ExchangeStore:
    """An exchange's kept messages: its StreamStore and the limits."""

    def __init__(self, StreamStore store, uint64_t keep_messages=0, int64_t keep_ms=0):
        self.store = store
        self.keep_messages = keep_messages
        self.keep_ms = keep_ms
        # the segments go only once the window has left them
        store.max_length = keep_messages
        store.max_age_ms = keep_ms

    cdef uint64_t window_start(self, int64_t now) except? 0:
        """The offset of the oldest message the exchange holds (last + 1 when
        it holds none): the newest keep_messages, no older than keep_ms."""
        cdef StreamStore st = self.store
        cdef uint64_t lo = st.first_offset
        cdef uint64_t hi = st.last_offset
        cdef uint64_t at
        if self.keep_messages and hi >= self.keep_messages and hi - self.keep_messages + 1 > lo:
            lo = hi - self.keep_messages + 1
        if self.keep_ms:
            at = st.locate_time(now - self.keep_ms)[2]
            if at > lo:
                lo = at
        return lo

    def window(self, int64_t now=0):
        """-> (first, last) offsets of what the exchange holds; first > last
        when it holds nothing."""
        if now == 0:
            now = <int64_t>now_ms()
        return self.window_start(now), self.store.last_offset

    def stats(self, int64_t now=0):
        """-> (messages, bytes, first offset, last offset) of what the
        exchange holds (the management API; cached for up to a second
        while nothing is published)."""
        cdef StreamStore st = self.store
        cdef uint64_t lo, hi
        cdef Segment s
        cdef Segment at_seg
        cdef Py_ssize_t pos
        if now == 0:
            now = <int64_t>now_ms()
        if (self.cached is not None and self.cached_last == st.last_offset
                and self.cached_first == st.first_offset and (self.keep_ms == 0 or now - self.cached_at < 1000)):
            return self.cached
        hi = st.last_offset
        if st.closed:
            return 0, 0, hi + 1, hi
        lo = self.window_start(now)
        size = 0
        if lo <= hi:
            at_seg, pos, _ = st.locate(lo)
            size = at_seg.size - pos
            for x in st.segs:
                if x is not None and (<Segment>x).id > at_seg.id:
                    s = x
                    size += s.size - SEGMENT_HEADER
        self.cached = (hi + 1 - lo if lo <= hi else 0, size, lo, hi)
        self.cached_last = st.last_offset
        self.cached_first = st.first_offset
        self.cached_at = now
        return self.cached


cdef const char *keep_routed(RouteOut out, const char *rec, Py_ssize_t *n, int *refused) except NULL:
    cdef WriteBuffer wb = out.stamped
    cdef ExchangeStore xs
    cdef StreamStore st
    cdef Py_ssize_t i, m
    cdef SP sp
    cdef bint first_kept = False
    if wb is None:
        wb = WriteBuffer()
        out.stamped = wb
    elif wb.cap > STAMP_KEEP:
        wb.shrink(STAMP_KEEP)
    # the first exchange on the message's way last, so that its copy is the
    # one left in the buffer for the queues
    for i in range(out.npstores - 1, -1, -1):
        xs = <ExchangeStore><object>out.pstores[i]
        st = xs.store
        if st.closed:
            continue
        m = stamp_offset(wb, rec, n[0], st.last_offset + 1)
        if st.append(wb.buf, m, &sp) == APPEND_NO_SPACE:
            xs.refused_count += 1
            refused[0] |= APPEND_NO_SPACE
            continue
        st.note_append(wb.buf, m)
        if i == 0:
            first_kept = True
    if not first_kept:
        return rec          # no offset to give: the queues get it as it came
    n[0] = wb.len
    return wb.buf


def route_and_keep(Exchange ex, bytes rec):
    """One message into an exchange, from Python (the management API's
    publish): -> (queues, the record to give them, stored). Routes as a
    publish does (statistics included) and keeps the message in the
    persistent exchanges on its way."""
    cdef RouteOut out = RouteOut()
    cdef const char *r = rec
    cdef Py_ssize_t n = len(rec)
    cdef Py_ssize_t exlen = <unsigned char>r[8]
    cdef Py_ssize_t rklen = <unsigned char>r[9 + exlen]
    cdef Py_ssize_t po = 10 + exlen + rklen
    cdef int refused = 0
    ex.route(out, r + 10 + exlen, rklen, r + po, n - po)
    queues = out.queues_list
    if out.npstores:
        r = keep_routed(out, r, &n, &refused)
        if r != <const char *>rec:
            rec = r[:n]
    return queues, rec, refused == 0
