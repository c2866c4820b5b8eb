# cython: language_level=3
import logging

from libc.stdint cimport uint8_t, uint16_t, uint32_t, uint64_t, int64_t
from libc.stdlib cimport malloc, realloc, free
from libc.stdio cimport snprintf
from libc.string cimport memcmp, memcpy, memmove, memset
from libc.math cimport sin, cos, atan2, sqrt, pow, M_PI
from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_GET_SIZE

from lavinmq._core.buffer cimport WriteBuffer, be32, le16, le32, le64, put_be16, put_be32, put_be64
from lavinmq._core.codec cimport props_convert
from lavinmq._core.segment cimport Segment, SP, SEGMENT_HEADER, record_len, record_parts
from lavinmq._core.queue cimport Queue, ConsumerBase, schedule_queue
from lavinmq._core.channel cimport Channel, ConnState, Consumer
from lavinmq._core.stream_store cimport StreamStore
from lavinmq._core cimport spec

log = logging.getLogger("lavinmq.stream")

cdef enum:
    DELIVERY_BUDGET = 8192      # records one stream may walk per delivery pass
    MIN_SHARE = 256             # ... and each of its consumers at least
    FLUSH_AT = 262144           # bytes of output before a mid-pass flush
    # property flag bits (wire order: bit 15 is content_type)
    P_CONTENT_TYPE = 0x8000
    P_CONTENT_ENCODING = 0x4000
    P_HEADERS = 0x2000

# The header every delivery gets: shortstr key, 'l', signed 64-bit offset
cdef bytes OFFSET_KEY = b"x-stream-offset"
cdef bytes FILTER_VALUE_KEY = b"x-stream-filter-value"
cdef Py_ssize_t OFFSET_ENTRY = 1 + 15 + 1 + 8


cdef Py_ssize_t TIMESTAMP_ENTRY = 1 + 18 + 1 + 8


cdef inline Py_ssize_t write_offset_entry(char *p, uint64_t offset, const char *rec, bint with_ts) noexcept nogil:
    p[0] = 15
    memcpy(p + 1, b"x-stream-offset", 15)
    p[16] = b"l"
    put_be64(p + 17, offset)
    if not with_ts:
        return OFFSET_ENTRY
    # the time the broker stored the message (ms), for consumers that ask
    p += OFFSET_ENTRY
    p[0] = 18
    memcpy(p + 1, b"x-stream-timestamp", 18)
    p[19] = b"l"
    put_be64(p + 20, le64(rec))
    return OFFSET_ENTRY + TIMESTAMP_ENTRY


cdef int write_stream_content(WriteBuffer wb, uint16_t channel, const char *rec, uint32_t frame_max,
                              uint64_t offset, bint with_ts) except -1:
    """Content header and body frames of a record, with x-stream-offset
    (and x-stream-timestamp) added to (or as) its headers table."""
    cdef const char *ex
    cdef const char *rk
    cdef const char *props
    cdef const char *body
    cdef Py_ssize_t exlen, rklen, propslen, hp, ins
    cdef uint64_t bodylen, off = 0, chunk
    cdef uint64_t max_body = frame_max - 8
    cdef char *start
    cdef uint16_t flags
    cdef uint32_t tlen
    cdef Py_ssize_t entries = OFFSET_ENTRY + (TIMESTAMP_ENTRY if with_ts else 0)
    record_parts(rec, &ex, &exlen, &rk, &rklen, &props, &propslen, &body, &bodylen)
    wb.start_frame(spec.FRAME_HEADER, channel)
    wb.write_u16(spec.CLASS_BASIC)
    wb.write_u16(0)
    wb.write_u64(bodylen)
    wb.reserve(propslen + 4 + entries)
    start = wb.buf + wb.len
    props_convert(props, propslen, start, True)     # now in wire order
    flags = (<uint8_t>start[0] << 8) | <uint8_t>start[1]
    hp = 2
    if flags & P_CONTENT_TYPE:
        hp += 1 + <uint8_t>start[hp]
    if flags & P_CONTENT_ENCODING:
        hp += 1 + <uint8_t>start[hp]
    if flags & P_HEADERS:
        # append the entry to the end of the existing table: clients that
        # decode into a map keep the last value of a repeated key
        tlen = be32(start + hp)
        ins = hp + 4 + tlen
        memmove(start + ins + entries, start + ins, propslen - ins)
        write_offset_entry(start + ins, offset, rec, with_ts)
        put_be32(start + hp, tlen + entries)
        wb.len += propslen + entries
    else:
        put_be16(start, flags | P_HEADERS)
        memmove(start + hp + 4 + entries, start + hp, propslen - hp)
        put_be32(start + hp, entries)
        write_offset_entry(start + hp + 4, offset, rec, with_ts)
        wb.len += propslen + 4 + entries
    wb.end_frame()
    while off < bodylen:
        chunk = bodylen - off
        if chunk > max_body:
            chunk = max_body
        wb.start_frame(spec.FRAME_BODY, channel)
        wb.write_raw(body + off, chunk)
        wb.end_frame()
        off += chunk
    return 0


# -- header lookup in a stored record (filters) --------------------------------
# Stored properties are in disk order: little-endian flags and table length,
# the table's body as the publisher sent it (big-endian). Tables were only
# length-checked when published, so every step here is bounds-checked and a
# malformed table simply matches nothing.

cdef Py_ssize_t value_size(char t, const char *p, Py_ssize_t avail) noexcept nogil:
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


cdef const char *headers_table(const char *rec, Py_ssize_t *tlen) noexcept nogil:
    """The headers table body of a record, or NULL when it has none."""
    cdef Py_ssize_t pos = 8
    cdef uint16_t flags
    pos += 1 + <uint8_t>rec[pos]
    pos += 1 + <uint8_t>rec[pos]
    flags = le16(rec + pos)
    if not flags & P_HEADERS:
        return NULL
    pos += 2
    if flags & P_CONTENT_TYPE:
        pos += 1 + <uint8_t>rec[pos]
    if flags & P_CONTENT_ENCODING:
        pos += 1 + <uint8_t>rec[pos]
    tlen[0] = le32(rec + pos)
    return rec + pos + 4


cdef const char *find_header(const char *t, Py_ssize_t tlen, const char *key, Py_ssize_t klen,
                             char *vtype, Py_ssize_t *vsize) noexcept nogil:
    cdef Py_ssize_t pos = 0, kl, n
    cdef const char *k
    cdef char ty
    while pos < tlen:
        kl = <uint8_t>t[pos]
        pos += 1
        if pos + kl + 1 > tlen:
            return NULL
        k = t + pos
        pos += kl
        ty = t[pos]
        pos += 1
        n = value_size(ty, t + pos, tlen - pos)
        if n < 0:
            return NULL
        if kl == klen and memcmp(k, key, klen) == 0:
            vtype[0] = ty
            vsize[0] = n
            return t + pos
        pos += n
    return NULL


cdef bint has_token(const char *s, Py_ssize_t n, const char *tok, Py_ssize_t tn) noexcept nogil:
    """Is tok one of the comma-separated values in s (spaces around them
    ignored)?"""
    cdef Py_ssize_t i = 0, a, b
    while i <= n:
        a = i
        while i < n and s[i] != b",":
            i += 1
        b = i
        while a < b and s[a] == b" ":
            a += 1
        while b > a and s[b - 1] == b" ":
            b -= 1
        if b - a == tn and memcmp(s + a, tok, tn) == 0:
            return True
        i += 1
    return False


cdef bint value_equals(char t, const char *v, Py_ssize_t vsize, const char *want, Py_ssize_t wn) noexcept nogil:
    """A header value compared with the string form of what a consumer asked
    for: strings as they are, integers in decimal, booleans true/false."""
    cdef char buf[32]
    cdef int64_t i
    cdef int k
    if t == b"S" or t == b"x":
        return vsize - 4 == wn and memcmp(v + 4, want, wn) == 0
    if t == b"t":
        if v[0]:
            return wn == 4 and memcmp(want, b"true", 4) == 0
        return wn == 5 and memcmp(want, b"false", 5) == 0
    if t == b"b":
        i = <signed char>v[0]
    elif t == b"B":
        i = <uint8_t>v[0]
    elif t == b"s":
        i = <short>((<uint8_t>v[0] << 8) | <uint8_t>v[1])
    elif t == b"u":
        i = (<uint8_t>v[0] << 8) | <uint8_t>v[1]
    elif t == b"I":
        i = <int>be32(v)
    elif t == b"i":
        i = be32(v)
    elif t == b"l" or t == b"L" or t == b"T":
        i = <int64_t>((<uint64_t>be32(v) << 32) | be32(v + 4))
    else:
        return False
    k = snprintf(buf, 32, "%lld", <long long>i)
    return k == wn and memcmp(buf, want, wn) == 0


# -- GIS filters (LavinMQ's geo-within-radius, geo-bbox, geo-polygon) --------------
# A message's point is its x-geo-lat and x-geo-lon headers, each a signed
# 32/64-bit integer, a float or a decimal ('I', 'l', 'f', 'd', 'D': what
# LavinMQ reads as a number; pika sends Python floats only as decimals); a
# point outside -90..90 / -180..180, or a missing or other-typed value,
# matches no geo filter.

GEO_RADIUS = F_RADIUS
GEO_BBOX = F_BBOX
GEO_POLYGON = F_POLYGON

cdef double EARTH_RADIUS_KM = 6371.0


cdef bint header_number(const char *t, Py_ssize_t tlen, const char *key, Py_ssize_t klen,
                        double *out) noexcept nogil:
    cdef char ty
    cdef Py_ssize_t n
    cdef const char *v = find_header(t, tlen, key, klen, &ty, &n)
    cdef uint64_t bits
    cdef uint32_t b32
    cdef double d
    cdef float f
    if v is NULL:
        return False
    if ty == b"I":
        out[0] = <int>be32(v)
    elif ty == b"l":
        out[0] = <double><int64_t>((<uint64_t>be32(v) << 32) | be32(v + 4))
    elif ty == b"f":
        b32 = be32(v)
        memcpy(&f, &b32, 4)
        out[0] = f
    elif ty == b"d":
        bits = (<uint64_t>be32(v) << 32) | be32(v + 4)
        memcpy(&d, &bits, 8)
        out[0] = d
    elif ty == b"D":
        out[0] = (<int>be32(v + 1)) / pow(10.0, <uint8_t>v[0])
    else:
        return False
    return True


cdef bint message_point(const char *t, Py_ssize_t tlen, double *lat, double *lon) noexcept nogil:
    if not header_number(t, tlen, b"x-geo-lat", 9, lat) or not header_number(t, tlen, b"x-geo-lon", 9, lon):
        return False
    # written so that NaN fails too
    return lat[0] >= -90.0 and lat[0] <= 90.0 and lon[0] >= -180.0 and lon[0] <= 180.0


cdef double haversine_km(double lat1, double lon1, double lat2, double lon2) noexcept nogil:
    cdef double r = M_PI / 180.0
    cdef double dlat = (lat2 - lat1) * r, dlon = (lon2 - lon1) * r
    cdef double sa = sin(dlat / 2), so = sin(dlon / 2)
    cdef double a = sa * sa + cos(lat1 * r) * cos(lat2 * r) * so * so
    return EARTH_RADIUS_KM * 2 * atan2(sqrt(a), sqrt(1 - a))


cdef inline bint in_box(const double *g, double lat, double lon) noexcept nogil:
    return g[0] <= lat <= g[1] and g[2] <= lon <= g[3]


cdef bint in_polygon(const Filter *f, double lat, double lon) noexcept nogil:
    """Even-odd rule: count the polygon's edges that a ray from the point
    crosses, the ray running along the latitude axis as LavinMQ's does."""
    cdef Py_ssize_t i, j = f.n_points - 1
    cdef double ilat, ilon, jlat, jlon
    cdef bint inside = False
    if not in_box(f.g, lat, lon):
        return False
    for i in range(f.n_points):
        ilat = f.points[2 * i]
        ilon = f.points[2 * i + 1]
        jlat = f.points[2 * j]
        jlon = f.points[2 * j + 1]
        # the first test also rules out edges of constant longitude
        if (ilon > lon) != (jlon > lon) and lat < (jlat - ilat) * (lon - ilon) / (jlon - ilon) + ilat:
            inside = not inside
        j = i
    return inside


cdef bint geo_match(const Filter *f, double lat, double lon) noexcept nogil:
    if f.kind == F_RADIUS:
        return haversine_km(f.g[0], f.g[1], lat, lon) <= f.g[2]
    if f.kind == F_BBOX:
        return in_box(f.g, lat, lon)
    return in_polygon(f, lat, lon)


cdef class StreamConsumer(Consumer):
    """A consumer of a stream: its own cursor, its in-flight deliveries (for
    their offsets), requeued messages and filters."""

    def __dealloc__(self):
        free(self.inflight)
        free(self.requeued)
        free(self.filters)

    def seek(self, Segment seg, Py_ssize_t pos, uint64_t offset):
        self.seg = seg
        self.pos = pos
        self.offset = offset

    def set_filters(self, list values, list pairs, bint match_all, bint match_unfiltered, list geo=None):
        """values: [bytes] of x-stream-filter; pairs: [(key bytes, value
        bytes)]; geo: [(GEO_RADIUS, (lat, lon, km)) | (GEO_BBOX, (min_lat,
        max_lat, min_lon, max_lon)) | (GEO_POLYGON, (its box), points)],
        points as packed doubles lat, lon, lat, lon..."""
        cdef Py_ssize_t n = len(values) + len(pairs) + len(geo or ()), i = 0, k
        cdef Filter *f
        self.filter_refs = []
        free(self.filters)
        self.filters = <Filter *>malloc(max(n, 1) * sizeof(Filter))
        if self.filters is NULL:
            raise MemoryError()
        memset(self.filters, 0, max(n, 1) * sizeof(Filter))
        for v in values:
            self.filter_refs.append(v)
            f = &self.filters[i]
            f.kind = F_VALUE
            f.value = PyBytes_AS_STRING(v)
            f.vlen = PyBytes_GET_SIZE(v)
            i += 1
        for k_, v in pairs:
            self.filter_refs.append(k_)
            self.filter_refs.append(v)
            f = &self.filters[i]
            f.kind = F_PAIR
            f.key = PyBytes_AS_STRING(k_)
            f.klen = PyBytes_GET_SIZE(k_)
            f.value = PyBytes_AS_STRING(v)
            f.vlen = PyBytes_GET_SIZE(v)
            i += 1
        self.geo = False
        for entry in geo or ():
            f = &self.filters[i]
            f.kind = <FilterKind><int>entry[0]
            for k in range(4):
                f.g[k] = entry[1][k] if k < len(entry[1]) else 0.0
            if f.kind == F_POLYGON:
                pts = entry[2]
                self.filter_refs.append(pts)
                f.points = <const double *>PyBytes_AS_STRING(pts)
                f.n_points = PyBytes_GET_SIZE(pts) // (2 * sizeof(double))
            self.geo = True
            i += 1
        self.n_filters = n
        self.filtered = n > 0
        self.match_all = match_all
        self.match_unfiltered = match_unfiltered

    cdef bint matches(self, const char *rec):
        cdef Py_ssize_t tlen, vsize, i
        cdef const char *t = headers_table(rec, &tlen)
        cdef const char *fv = NULL
        cdef const char *v
        cdef Py_ssize_t fvsize = 0
        cdef char ftype = 0, vt
        cdef bint hit, has_point = False
        cdef double lat = 0, lon = 0
        cdef Filter *f
        if t is not NULL:
            fv = find_header(t, tlen, b"x-stream-filter-value", 21, &ftype, &fvsize)
            if fv is not NULL and ftype != b"S" and ftype != b"x":
                fv = NULL
        if self.match_unfiltered and fv is NULL:
            return True
        if t is NULL:
            return False
        if self.geo:
            has_point = message_point(t, tlen, &lat, &lon)
        for i in range(self.n_filters):
            f = &self.filters[i]
            if f.kind == F_VALUE:
                hit = fv is not NULL and has_token(fv + 4, fvsize - 4, f.value, f.vlen)
            elif f.kind == F_PAIR:
                v = find_header(t, tlen, f.key, f.klen, &vt, &vsize)
                hit = v is not NULL and value_equals(vt, v, vsize, f.value, f.vlen)
            else:
                hit = has_point and geo_match(f, lat, lon)
            if hit and not self.match_all:
                return True
            if not hit and self.match_all:
                return False
        return self.match_all

    # -- in-flight deliveries ----------------------------------------------------

    cdef int push_inflight(self, SP sp, uint64_t offset) except -1:
        cdef Py_ssize_t live, i, j, lo, hi, mid
        cdef InFlight *n
        if self.if_tail == self.if_cap:
            # compact: drop settled entries (a client that never acks its
            # oldest delivery must not make this grow per message)
            j = 0
            for i in range(self.if_head, self.if_tail):
                if not self.inflight[i].done:
                    self.inflight[j] = self.inflight[i]
                    j += 1
            self.if_head = 0
            self.if_tail = j
            if j > self.if_cap // 2 or self.if_cap == 0:
                self.if_cap = self.if_cap * 2 if self.if_cap else 64
                n = <InFlight *>realloc(self.inflight, self.if_cap * sizeof(InFlight))
                if n is NULL:
                    raise MemoryError()
                self.inflight = n
        # deliveries come in offset order, except redeliveries of requeued ones
        lo = self.if_tail
        if lo > self.if_head and self.inflight[lo - 1].offset > offset:
            lo, hi = self.if_head, self.if_tail
            while lo < hi:
                mid = (lo + hi) >> 1
                if self.inflight[mid].offset < offset:
                    lo = mid + 1
                else:
                    hi = mid
            memmove(self.inflight + lo + 1, self.inflight + lo, (self.if_tail - lo) * sizeof(InFlight))
        self.inflight[lo].sp = sp
        self.inflight[lo].offset = offset
        self.inflight[lo].done = 0
        self.if_tail += 1
        return 0

    cdef Py_ssize_t find_inflight(self, SP sp):
        cdef Py_ssize_t lo = self.if_head, hi = self.if_tail, mid
        cdef InFlight *e
        while lo < hi:
            mid = (lo + hi) >> 1
            e = &self.inflight[mid]
            if e.sp.seg < sp.seg or (e.sp.seg == sp.seg and e.sp.pos < sp.pos):
                lo = mid + 1
            else:
                hi = mid
        # a requeued and redelivered message has a settled twin: skip it
        while lo < self.if_tail and self.inflight[lo].sp.seg == sp.seg and self.inflight[lo].sp.pos == sp.pos:
            if not self.inflight[lo].done:
                return lo
            lo += 1
        return -1

    cdef int add_requeued(self, SP sp, uint64_t offset) except -1:
        cdef Py_ssize_t lo = 0, hi = self.n_requeued, mid
        cdef InFlight *n
        if self.n_requeued == self.cap_requeued:
            self.cap_requeued = self.cap_requeued * 2 if self.cap_requeued else 16
            n = <InFlight *>realloc(self.requeued, self.cap_requeued * sizeof(InFlight))
            if n is NULL:
                raise MemoryError()
            self.requeued = n
        while lo < hi:
            mid = (lo + hi) >> 1
            if self.requeued[mid].offset < offset:
                lo = mid + 1
            else:
                hi = mid
        memmove(self.requeued + lo + 1, self.requeued + lo, (self.n_requeued - lo) * sizeof(InFlight))
        self.requeued[lo].sp = sp
        self.requeued[lo].offset = offset
        self.requeued[lo].done = 0
        self.n_requeued += 1
        return 0

    cdef uint64_t commit_point(self):
        """Where a reconnect should resume: the oldest message not acked yet."""
        cdef uint64_t at = self.offset
        while self.if_head < self.if_tail and self.inflight[self.if_head].done:
            self.if_head += 1
        if self.if_head < self.if_tail and self.inflight[self.if_head].offset < at:
            at = self.inflight[self.if_head].offset
        if self.n_requeued and self.requeued[0].offset < at:
            at = self.requeued[0].offset
        return at

    cdef int deliver_at(self, const char *rec, SP sp, uint64_t offset, bint redelivered) except -1:
        cdef Channel ch = self.channel
        cdef ConnState st = ch.state
        cdef WriteBuffer wb = st.wbuf
        cdef uint64_t tag
        cdef Py_ssize_t exlen
        ch.next_tag += 1
        tag = ch.next_tag
        ch.track(tag, sp, self.queue_idx, self.slot, 0)
        self.unacked += 1
        self.push_inflight(sp, offset)
        self.last_delivered = offset
        ch.deliver_count += 1
        wb.start_method(ch.id, spec.CLASS_BASIC, spec.BASIC_DELIVER)
        wb.write_shortstr(PyBytes_AS_STRING(self.tag_bytes), PyBytes_GET_SIZE(self.tag_bytes))
        wb.write_u64(tag)
        wb.write_u8(1 if redelivered else 0)
        exlen = <uint8_t>rec[8]
        wb.write_shortstr(rec + 9, exlen)
        wb.write_shortstr(rec + 10 + exlen, <uint8_t>rec[9 + exlen])
        wb.end_frame()
        write_stream_content(wb, ch.id, rec, st.frame_max, offset, self.with_timestamp)
        st.mark_dirty()
        if wb.len >= FLUSH_AT:
            st.conn.flush()
        return 0

    @property
    def position(self):
        return (self.seg.id if self.seg is not None else None, self.pos)

    @property
    def in_flight(self):
        cdef Py_ssize_t i, n = 0
        for i in range(self.if_head, self.if_tail):
            if not self.inflight[i].done:
                n += 1
        return n


cdef class StreamQueue(Queue):
    """The delivery loop of a stream: every consumer walks the segments from
    its own cursor; nothing is removed by an ack."""

    def __init__(self, str name, vhost, StreamStore store):
        Queue.__init__(self, name, vhost, store)
        self.sstore = store
        self.per_consumer_acks = True
        self.dirty_offsets = []

    cdef int publish(self, const char *rec, Py_ssize_t n) except -1:
        cdef StreamStore st = self.sstore
        cdef SP sp
        cdef int64_t ts
        cdef int rc = st.append(rec, n, &sp)
        if rc:
            return rc
        # StreamStore.note_append, inline: the message's offset and time. A
        # stream has no "ready" messages in the classic sense, so those
        # counters stay 0 and never throttle publishers.
        ts = <int64_t>le64(rec)
        st.last_offset += 1
        st.count += 1
        st.bytes += n
        st.ready = 0
        st.ready_bytes = 0
        if st.w_first_ts == 0:
            st.w_first_ts = ts
        st.w_last_ts = ts
        self.publish_count += 1
        if self.consumers:
            schedule_queue(self)
        return 0

    cdef const char *advance(self, StreamConsumer c, SP *sp, uint64_t *offset) except? NULL:
        """The record at c's cursor, moving the cursor past it; NULL at the
        end of the stream."""
        cdef StreamStore st = self.sstore
        cdef Segment s = c.seg
        cdef Segment nxt
        cdef Py_ssize_t n
        cdef uint64_t first
        while True:
            if s is None or s.dropped:
                # retention dropped the segment under the cursor: go on
                # from the oldest message that is left
                s, c.pos, first = st.first_position()
                if first > c.offset:
                    c.offset = first
                c.seg = s
            if c.pos >= s.size:
                if s is st.wseg:
                    return NULL
                nxt = st.next_segment(s.id)
                if nxt is None:
                    return NULL
                self.leave_segment(c, s)
                s = c.seg = nxt
                c.pos = SEGMENT_HEADER
                first = st.first_offset_of(s)
                if first > c.offset:
                    c.offset = first
                continue
            if s.base is NULL:
                s.map()
            n = record_len(s.base + c.pos, s.size - c.pos)
            if n <= 0:
                raise OSError(f"{s.path}: corrupt record at byte {c.pos}")
            sp.seg = s.id
            sp.pos = <uint32_t>c.pos
            sp.size = <uint32_t>n
            offset[0] = c.offset
            c.pos += n
            c.offset += 1
            return s.base + sp.pos

    cdef int leave_segment(self, StreamConsumer c, Segment s) except -1:
        # a sealed segment no other cursor is in is unmapped: RSS follows the
        # number of consumers, not the length of the stream
        cdef StreamConsumer other
        if s is self.sstore.wseg or s.base is NULL:
            return 0
        for x in self.consumers:
            other = <StreamConsumer>x
            if other is not c and other.seg is s:
                return 0
        s.unmap()
        return 0

    cdef Py_ssize_t deliver_to(self, StreamConsumer c, Py_ssize_t limit) except -1:
        """Deliver to c while it has credit: -> records walked (delivered or
        filtered out)."""
        cdef Py_ssize_t used = 0
        cdef SP sp
        cdef uint64_t offset
        cdef const char *rec
        cdef Segment s
        cdef InFlight r
        while used < limit and c.has_capacity():
            if c.n_requeued:
                r = c.requeued[0]
                c.n_requeued -= 1
                memmove(c.requeued, c.requeued + 1, c.n_requeued * sizeof(InFlight))
                s = self.sstore.segment(r.sp.seg)
                if s is None or s.dropped:
                    continue        # gone by retention
                if s.base is NULL:
                    s.map()
                used += 1
                self.deliver_count += 1
                self.redeliver_count += 1
                self.unacked_count += 1
                self.unacked_bytes += r.sp.size
                c.deliver_at(s.base + r.sp.pos, r.sp, r.offset, True)
                continue
            rec = self.advance(c, &sp, &offset)
            if rec is NULL:
                break
            used += 1
            if c.filtered and not c.matches(rec):
                continue
            self.deliver_count += 1
            self.unacked_count += 1
            self.unacked_bytes += sp.size
            c.deliver_at(rec, sp, offset, False)
        return used

    cdef int deliver_pending(self) except -1:
        cdef Py_ssize_t n = len(self.consumers), i
        cdef Py_ssize_t share
        cdef bint more = False
        if n:
            share = DELIVERY_BUDGET // n
            if share < MIN_SHARE:
                share = MIN_SHARE
            for i in range(n):
                if self.deliver_to(<StreamConsumer>self.consumers[(self.rr + i) % n], share) >= share:
                    more = True
            self.rr += 1
        if self.dirty_offsets:
            self.save_offsets()
        if more:
            schedule_queue(self)
        return 0

    cdef int consumer_settled(self, ConsumerBase c, SP sp, bint acked, bint requeue) except -1:
        cdef StreamConsumer sc = <StreamConsumer>c
        cdef Py_ssize_t idx
        self.unacked_count -= 1
        self.unacked_bytes -= sp.size
        idx = sc.find_inflight(sp)
        if idx < 0 or self.closed:
            return 0
        sc.inflight[idx].done = 1
        if requeue:
            if not sc.cancelled:
                sc.add_requeued(sp, sc.inflight[idx].offset)
        elif acked:
            self.ack_count += 1
        if sc.track_offset and acked:
            sc.committed = sc.commit_point()
            if not sc.offset_dirty:
                sc.offset_dirty = True
                self.dirty_offsets.append(sc)
        else:
            sc.commit_point()       # pops settled entries off the front
        schedule_queue(self)
        return 0

    def save_offsets(self):
        cdef StreamConsumer c
        entries = []
        for x in self.dirty_offsets:
            c = x
            c.offset_dirty = False
            entries.append((c.tag, c.committed))
        self.dirty_offsets = []
        try:
            self.sstore.save_offsets(entries)
        except OSError as exc:
            log.error("stream %s: could not store consumer offsets: %s", self.name, exc)

    def remove_consumer(self, ConsumerBase c):
        cdef StreamConsumer sc = <StreamConsumer>c
        Queue.remove_consumer(self, c)
        if sc.seg is not None and not sc.seg.dropped:
            self.leave_segment(sc, sc.seg)

    # -- what classic queues do and streams do not ----------------------------

    cdef const char *get(self, SP *sp, bint *redelivered, bint no_ack) except? NULL:
        return NULL

    def take_records(self, Py_ssize_t count, bint requeue):
        return []

    def purge(self):
        if self.closed:
            return 0
        return self.sstore.purge()

    @property
    def message_count(self):
        return self.sstore.count

    # -- reading without a consumer (HTTP API) ---------------------------------

    def read_from(self, Segment s, Py_ssize_t pos, uint64_t offset, Py_ssize_t count):
        """[(offset, record bytes)] of up to count messages from a position
        that StreamStore.locate* returned."""
        cdef StreamStore st = self.sstore
        cdef Py_ssize_t n
        out = []
        while len(out) < count and s is not None and not s.dropped:
            if pos >= s.size:
                if s is st.wseg:
                    break
                s = st.next_segment(s.id)
                if s is None:
                    break
                pos = SEGMENT_HEADER
                offset = st.first_offset_of(s)
                continue
            if s.base is NULL:
                s.map()
            n = record_len(s.base + pos, s.size - pos)
            if n <= 0:
                raise OSError(f"{s.path}: corrupt record at byte {pos}")
            out.append((offset, s.base[pos:pos + n]))
            pos += n
            offset += 1
        return out


def bench_stream_content(bytes rec, int n, uint32_t frame_max=131072):
    """Benchmarks: n deliveries' frames (method, content header with the
    offset header, body), as channel.bench_write_content for classic ones."""
    cdef WriteBuffer wb = WriteBuffer()
    cdef int i
    cdef const char *p = rec
    cdef Py_ssize_t exlen = <uint8_t>p[8]
    for i in range(n):
        wb.start_method(1, spec.CLASS_BASIC, spec.BASIC_DELIVER)
        wb.write_shortstr(b"ctag", 4)
        wb.write_u64(i)
        wb.write_u8(0)
        wb.write_shortstr(p + 9, exlen)
        wb.write_shortstr(p + 10 + exlen, <uint8_t>p[9 + exlen])
        wb.end_frame()
        write_stream_content(wb, 1, p, frame_max, i, False)
        if wb.len > 1 << 20:
            wb.clear()
    return wb.len


def py_stream_content(bytes rec, uint64_t offset, uint32_t frame_max=131072, bint with_ts=False):
    """Tests: the frames a delivery of rec at offset carries after its method frame."""
    cdef WriteBuffer wb = WriteBuffer()
    write_stream_content(wb, 1, rec, frame_max, offset, with_ts)
    return wb.getvalue()


def bench_publish(Queue q, bytes rec, int n):
    """Benchmarks: n publishes of rec into q (a classic queue or a stream),
    as route_record does for one destination."""
    cdef int i
    for i in range(n):
        q.publish(rec, len(rec))
    return n
