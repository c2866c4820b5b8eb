# cython: language_level=3
# Routing: an exchange answers "which queues?" for one message into a
# RouteOut, in Cython, for every exchange type (the matchers in _match_*.pxi),
# following exchange-to-exchange bindings (each exchange at most once per
# message), CC/BCC routing keys, and alternate exchanges for what nothing
# else takes. No Python object is made per message.
import datetime
import decimal
import os

from libc.stdint cimport uint8_t, uint16_t, uint32_t, uint64_t, int8_t, int16_t, int32_t, int64_t, uintptr_t
from libc.stdlib cimport calloc, malloc, realloc, free, qsort
from libc.string cimport memcmp, memcpy, memset, memchr
from cpython.object cimport PyObject

from lavinmq._core.buffer cimport WriteBuffer, le16, le32, be16, be32, be64, put_le32

from lavinmq._core.codec import encode_table_bytes, encode_properties
from lavinmq.errors import PreconditionFailed

cdef extern from "Python.h":
    void incref "Py_INCREF"(PyObject *o)
    void decref "Py_DECREF"(PyObject *o)

include "_tables.pxi"
include "_headers.pxi"
include "_match_simple.pxi"
include "_match_topic.pxi"
include "_match_headers.pxi"
include "_match_chash.pxi"

cdef enum:
    HIDX_AT = 8             # messages with more headers get a key index

# distinct per route: marks the exchanges one message has visited
cdef uint64_t _visit_counter = 0


cdef class RoutingVersion:
    def bump(self):
        self.value += 1


# -- RouteOut --------------------------------------------------------------------------

cdef int grow_ptrs(PyObject ***arr, Py_ssize_t *cap, Py_ssize_t need) except -1:
    cdef Py_ssize_t c = cap[0] if cap[0] else 8
    cdef PyObject **a
    while c < need:
        c *= 2
    a = <PyObject **>realloc(arr[0], c * sizeof(PyObject *))
    if a is NULL:
        raise MemoryError()
    arr[0] = a
    cap[0] = c
    return 0


cdef class RouteOut:
    """Where one route puts its answer: the queues (unique), plus the
    message's parsed headers and routing keys. Reused from message to
    message (acquire_route_out), so nothing is allocated per message."""

    def __cinit__(self):
        self.scratch = WriteBuffer()
        self.stripped = WriteBuffer()
        self.seen_mask = 63
        self.seen = <PyObject **>calloc(64, sizeof(PyObject *))
        self.seen_stamp = <uint32_t *>calloc(64, sizeof(uint32_t))
        if self.seen is NULL or self.seen_stamp is NULL:
            raise MemoryError()
        self.htab_off = -1
        self.bcc_off = -1

    def __dealloc__(self):
        free(self.queues)
        free(self.seen)
        free(self.seen_stamp)
        free(self.xs)
        free(self.frames)
        free(self.keys)
        free(self.klens)
        free(self.hdrs)
        free(self.hidx)
        free(self.pstores)

    cdef int begin(self, const char *rk, Py_ssize_t rklen, const char *props, Py_ssize_t plen) except -1:
        global _visit_counter
        cdef Py_ssize_t off, n
        self.nq = 0
        self.hits = 0
        self.nxs = 0
        self.nframes = 0
        self.nkeys = 0
        self.npstores = 0
        self.stamp += 1
        if self.stamp == 0:
            memset(self.seen_stamp, 0, (self.seen_mask + 1) * sizeof(uint32_t))
            self.stamp = 1
        _visit_counter += 1
        self.visit = _visit_counter
        self.props = props
        self.plen = plen
        self.nhdrs = 0
        self.hdrs_hashed = False
        self.htab_off = -1
        self.bcc_off = -1
        self.add_key(rk, <uint32_t>rklen)
        # the one check every message pays: is there a headers table at all?
        if props is not NULL and plen >= 2 and le16(props) & PROP_HEADERS_FLAG:
            off = find_property(props, plen, 2, &n)
            if off >= 0 and n > 0:
                self.htab_off = off
                self.htab_len = <uint32_t>n
                self.parse_headers()
        return 0

    cdef int parse_headers(self) except -1:
        """The headers table's entries into self.hdrs; CC and BCC arrays
        into self.keys. A malformed table ends the parse where it breaks."""
        cdef const char *tab = self.props + self.htab_off
        cdef Py_ssize_t n = self.htab_len, pos = 0, start, used
        cdef uint32_t klen
        cdef HEntry *e
        cdef HEntry *grown
        while pos < n:
            start = pos
            klen = <uint8_t>tab[pos]
            if pos + 1 + klen > n:
                break
            if self.nhdrs == self.caphdrs:
                grown = <HEntry *>realloc(self.hdrs, (self.caphdrs * 2 if self.caphdrs else 8) * sizeof(HEntry))
                if grown is NULL:
                    raise MemoryError()
                self.hdrs = grown
                self.caphdrs = self.caphdrs * 2 if self.caphdrs else 8
            e = &self.hdrs[self.nhdrs]
            e.key = tab + pos + 1
            e.klen = klen
            pos += 1 + klen
            used = read_field(tab + pos, n - pos, &e.type, &e.val)
            if used < 0:
                break
            pos += used
            self.nhdrs += 1
            if (klen == 2 and e.key[0] == b'C' and e.key[1] == b'C') or \
                    (klen == 3 and memcmp(e.key, b"BCC", 3) == 0):
                self.add_cc_keys(e)
                if klen == 3:
                    self.bcc_off = start
                    self.bcc_len = pos - start
        return 0

    cdef int add_cc_keys(self, HEntry *e) except -1:
        """Sender-selected distribution (RabbitMQ): the strings of a CC or BCC
        array are more routing keys for the message; other elements are
        skipped. Anything but an array is refused, as RabbitMQ does."""
        cdef Py_ssize_t pos = 0, used
        cdef uint8_t t
        cdef HVal v
        if e.type != b'A':
            name = "CC" if e.klen == 2 else "BCC"
            raise PreconditionFailed(f"{name} header not a string array", 60, 40)
        while pos < e.val.n:
            used = read_field(e.val.p + pos, e.val.n - pos, &t, &v)
            if used < 0:
                break
            if t == b'S':
                self.add_key(v.p, v.n)
            pos += used
        return 0

    cdef HEntry *find_header(self, const char *key, uint32_t klen):
        """The first entry with this key, or NULL."""
        cdef Py_ssize_t i
        cdef size_t j, cap
        cdef int32_t *idx
        cdef HEntry *e
        if self.nhdrs <= HIDX_AT:
            for i in range(self.nhdrs):
                e = &self.hdrs[i]
                if e.klen == klen and memcmp(e.key, key, klen) == 0:
                    return e
            return NULL
        if not self.hdrs_hashed:
            # many headers: index their keys once for this message
            cap = 16
            while cap < <size_t>self.nhdrs * 2:
                cap *= 2
            if cap > self.hidx_mask + 1 or self.hidx is NULL:
                free(self.hidx)
                self.hidx = <int32_t *>malloc(cap * sizeof(int32_t))
                if self.hidx is NULL:
                    self.hidx_mask = 0
                    return self.find_header_slow(key, klen)
                self.hidx_mask = cap - 1
            memset(self.hidx, 0xff, (self.hidx_mask + 1) * sizeof(int32_t))
            for i in range(self.nhdrs):
                e = &self.hdrs[i]
                e.khash = hash_bytes(e.key, e.klen)
                j = e.khash & self.hidx_mask
                while self.hidx[j] >= 0:
                    if self.hdrs[self.hidx[j]].klen == e.klen and \
                            memcmp(self.hdrs[self.hidx[j]].key, e.key, e.klen) == 0:
                        break
                    j = (j + 1) & self.hidx_mask
                if self.hidx[j] < 0:
                    self.hidx[j] = <int32_t>i
            self.hdrs_hashed = True
        j = hash_bytes(key, klen) & self.hidx_mask
        while self.hidx[j] >= 0:
            e = &self.hdrs[self.hidx[j]]
            if e.klen == klen and memcmp(e.key, key, klen) == 0:
                return e
            j = (j + 1) & self.hidx_mask
        return NULL

    cdef HEntry *find_header_slow(self, const char *key, uint32_t klen):
        cdef Py_ssize_t i
        for i in range(self.nhdrs):
            if self.hdrs[i].klen == klen and memcmp(self.hdrs[i].key, key, klen) == 0:
                return &self.hdrs[i]
        return NULL

    cdef int add_key(self, const char *k, uint32_t n) except -1:
        cdef const char **keys
        cdef uint32_t *klens
        cdef Py_ssize_t cap
        if self.nkeys == self.capkeys:
            cap = self.capkeys * 2 if self.capkeys else 4
            keys = <const char **>realloc(self.keys, cap * sizeof(char *))
            if keys is NULL:
                raise MemoryError()
            self.keys = keys
            klens = <uint32_t *>realloc(self.klens, cap * sizeof(uint32_t))
            if klens is NULL:
                raise MemoryError()
            self.klens = klens
            self.capkeys = cap
        self.keys[self.nkeys] = k
        self.klens[self.nkeys] = n
        self.nkeys += 1
        return 0

    cdef int grow_seen(self) except -1:
        cdef size_t cap = (self.seen_mask + 1) * 2, j
        cdef Py_ssize_t i
        cdef PyObject **seen = <PyObject **>calloc(cap, sizeof(PyObject *))
        cdef uint32_t *stamps = <uint32_t *>calloc(cap, sizeof(uint32_t))
        if seen is NULL or stamps is NULL:
            free(seen)
            free(stamps)
            raise MemoryError()
        free(self.seen)
        free(self.seen_stamp)
        self.seen = seen
        self.seen_stamp = stamps
        self.seen_mask = cap - 1
        for i in range(self.nq):
            j = lq_ptr_hash(self.queues[i]) & self.seen_mask
            while self.seen_stamp[j] == self.stamp:
                j = (j + 1) & self.seen_mask
            self.seen[j] = self.queues[i]
            self.seen_stamp[j] = self.stamp
        return 0

    cdef int add_queue(self, PyObject *q) except -1:
        cdef size_t j = lq_ptr_hash(q) & self.seen_mask
        self.hits += 1
        while self.seen_stamp[j] == self.stamp:
            if self.seen[j] == q:
                return 0
            j = (j + 1) & self.seen_mask
        if <size_t>(self.nq + 1) * 2 > self.seen_mask + 1:
            self.grow_seen()
            j = lq_ptr_hash(q) & self.seen_mask
            while self.seen_stamp[j] == self.stamp:
                j = (j + 1) & self.seen_mask
        self.seen[j] = q
        self.seen_stamp[j] = self.stamp
        if self.nq == self.capq:
            grow_ptrs(&self.queues, &self.capq, self.nq + 1)
        self.queues[self.nq] = q
        self.nq += 1
        return 0

    cdef int add_exchange(self, PyObject *x) except -1:
        if (<Exchange>x).visit == self.visit:
            return 0
        if self.nxs == self.capxs:
            grow_ptrs(&self.xs, &self.capxs, self.nxs + 1)
        self.xs[self.nxs] = x
        self.nxs += 1
        return 0

    cdef inline int add_dest(self, PyObject *o, bint is_exchange) except -1:
        if is_exchange:
            return self.add_exchange(o)
        return self.add_queue(o)

    cdef int add_pstore(self, PyObject *store) except -1:
        # each exchange is visited once per message: no duplicates here
        if self.npstores == self.cappstores:
            grow_ptrs(&self.pstores, &self.cappstores, self.npstores + 1)
        self.pstores[self.npstores] = store
        self.npstores += 1
        return 0

    cdef int add_dests(self, DestSet *s) except -1:
        cdef uint32_t i
        for i in range(s.n):
            if s.items[i].is_exchange:
                self.add_exchange(s.items[i].obj)
            else:
                self.add_queue(s.items[i].obj)
        return 0

    cdef int push_frame(self, PyObject *ex, Py_ssize_t begin, Py_ssize_t end) except -1:
        cdef Frame *f
        cdef Py_ssize_t cap
        if self.nframes == self.capframes:
            cap = self.capframes * 2 if self.capframes else 8
            f = <Frame *>realloc(self.frames, cap * sizeof(Frame))
            if f is NULL:
                raise MemoryError()
            self.frames = f
            self.capframes = cap
        f = &self.frames[self.nframes]
        f.ex = ex
        f.begin = begin
        f.end = end
        f.next = begin
        f.hits = self.hits
        self.nframes += 1
        return 0

    cdef const char *strip_bcc(self, const char *rec, Py_ssize_t n, Py_ssize_t props_off,
                               Py_ssize_t *out_n) except NULL:
        """rec without its BCC header (RabbitMQ removes it before the message
        is stored): the bytes before the entry, the table length patched,
        the bytes after it."""
        cdef WriteBuffer wb = self.stripped
        cdef Py_ssize_t tab = props_off + self.htab_off      # first byte of the table body
        cdef Py_ssize_t cut = tab + self.bcc_off
        wb.clear()
        wb.reserve(n)
        memcpy(wb.buf, rec, cut)
        memcpy(wb.buf + cut, rec + cut + self.bcc_len, n - cut - self.bcc_len)
        put_le32(wb.buf + tab - 4, <uint32_t>(self.htab_len - self.bcc_len))
        wb.len = n - self.bcc_len
        out_n[0] = wb.len
        return wb.buf

    # -- Python-facing (tests, the management API) ------------------------------------

    @property
    def queues_list(self):
        return [<object>self.queues[i] for i in range(self.nq)]

    @property
    def routing_keys(self):
        return [self.keys[i][:self.klens[i]] for i in range(self.nkeys)]

    @property
    def has_bcc(self):
        return self.bcc_off >= 0


cdef RouteOut _free_outs = None


cdef RouteOut acquire_route_out():
    """A RouteOut for one route. Routing may nest (a queue that dead-letters
    while a publish is being stored), so each user takes its own."""
    global _free_outs
    cdef RouteOut out = _free_outs
    if out is None:
        return RouteOut()
    _free_outs = out.next_free
    out.next_free = None
    return out


cdef void release_route_out(RouteOut out):
    global _free_outs
    out.next_free = _free_outs
    _free_outs = out


# -- exchanges ------------------------------------------------------------------------------

cdef class Matcher:
    """The bindings of one exchange type (subclasses above)."""

    cdef int match(self, RouteOut out, const char *rk, Py_ssize_t rklen) except -1:
        return 0

    cdef void clear_all(self) noexcept:
        pass

    def lookup(self, bytes routing_key, bytes props_le=None):
        """-> the destinations this matcher alone gives for a message (tests)."""
        cdef RouteOut out = RouteOut()
        cdef const char *p = NULL
        cdef Py_ssize_t plen = 0
        if props_le is not None:
            p = props_le
            plen = len(props_le)
        out.begin(routing_key, len(routing_key), p, plen)
        self.match(out, routing_key, len(routing_key))
        return [<object>out.queues[i] for i in range(out.nq)] + [<object>out.xs[i] for i in range(out.nxs)]

    def clear(self):
        self.clear_all()


cdef class Exchange:

    def __cinit__(self, *args, **kwargs):
        self.matcher = Matcher()

    cdef int route(self, RouteOut out, const char *rk, Py_ssize_t rklen,
                   const char *props, Py_ssize_t plen) except -1:
        """The de-duplicated queues for this message, into out.queues."""
        self.publish_in_count += 1
        out.begin(rk, rklen, props, plen)
        self.traverse(out)
        if out.nq == 0:
            self.unroutable_count += 1
        return 0

    cdef int visit_one(self, RouteOut out) except -1:
        cdef Matcher m = self.matcher
        cdef Py_ssize_t begin = out.nxs, k
        cdef uint64_t hits = out.hits
        self.visit = out.visit
        if self.persist is not None:
            # kept whether or not a binding takes it (exchange_store.pyx)
            out.add_pstore(<PyObject *>self.persist)
        if m.key_independent:
            m.match(out, out.keys[0], out.klens[0])
        else:
            for k in range(out.nkeys):
                m.match(out, out.keys[k], out.klens[k])
        out.push_frame(<PyObject *>self, begin, out.nxs)
        out.frames[out.nframes - 1].hits = hits
        return 0

    cdef int traverse(self, RouteOut out) except -1:
        """Depth first through exchange-to-exchange bindings, each exchange
        once per message. An exchange that leads the message to no queue,
        neither itself nor through the exchanges bound to it, hands it to its
        alternate exchange (recursively, each exchange still at most once).
        So an exchange's alternate sees what that exchange could not route,
        as in RabbitMQ, and also what the exchanges behind it dropped, as in
        LavinMQ."""
        cdef Frame *f
        cdef Exchange x
        cdef Exchange ae
        self.visit_one(out)
        while out.nframes:
            f = &out.frames[out.nframes - 1]
            if f.next < f.end:
                x = <Exchange><object>out.xs[f.next]
                f.next += 1
                if x.visit != out.visit and not x.deleted:
                    x.visit_one(out)
                continue
            x = <Exchange><object>f.ex
            out.nxs = f.begin
            out.nframes -= 1
            if out.hits == f.hits:
                ae = x.alternate()
                if ae is not None and ae.visit != out.visit and not ae.deleted:
                    ae.visit_one(out)
        return 0

    cdef Exchange alternate(self):
        """The alternate exchange, looked up by name only after the vhost's
        bindings or exchanges changed."""
        cdef object name = self.ae_argument if self.ae_argument is not None else self.ae_policy
        cdef uint64_t now
        if name is None:
            return None
        now = self.version.value + 1 if self.version is not None else 0
        if now == 0 or self.ae_version != now or (self.ae_cached is not None and self.ae_cached.deleted):
            found = None
            if self.vhost is not None:
                found = self.vhost.exchanges.get(name)
            self.ae_cached = found if isinstance(found, Exchange) and not (<Exchange>found).deleted else None
            self.ae_version = now
        return self.ae_cached

    # -- Python-facing -----------------------------------------------------------------

    @property
    def alternate_exchange(self):
        """The effective alternate exchange name (argument, else policy), or None."""
        return self.ae_argument if self.ae_argument is not None else self.ae_policy

    def set_alternate_argument(self, name):
        self.ae_argument = name
        self.ae_version = 0

    def set_alternate_policy(self, name):
        """The policy engine's `alternate-exchange` key (None clears it). An
        `alternate-exchange` argument given at declare wins, as in RabbitMQ."""
        self.ae_policy = name
        self.ae_version = 0

    def route_message(self, bytes routing_key, bytes props_le=None, bint count=False):
        """-> (list of queues, routing keys used, BCC present) for a message;
        count: update the publish statistics as a publish would."""
        cdef RouteOut out = acquire_route_out()
        cdef const char *p = NULL
        cdef Py_ssize_t plen = 0
        if props_le is not None:
            p = props_le
            plen = len(props_le)
        try:
            if count:
                self.route(out, routing_key, len(routing_key), p, plen)
            else:
                out.begin(routing_key, len(routing_key), p, plen)
                self.traverse(out)
            return out.queues_list, out.routing_keys, out.has_bcc
        finally:
            release_route_out(out)

    def py_route(self, bytes routing_key, bytes props_le=None):
        return tuple(self.route_message(routing_key, props_le)[0])

    def resolve(self, str routing_key, headers):
        """-> (tuple of unique queues, True): the management API's publish."""
        props = encode_properties({"headers": headers}, True) if headers else None
        queues = self.route_message(routing_key.encode("utf-8", "surrogateescape"), props)[0]
        return tuple(queues), True


def bench_route(Exchange ex, bytes routing_key, int n, bytes props_le=None):
    """Benchmarks: route the same message n times. -> the last answer."""
    cdef int i
    cdef const char *p = NULL
    cdef Py_ssize_t plen = 0
    cdef RouteOut out = acquire_route_out()
    if props_le is not None:
        p = props_le
        plen = len(props_le)
    try:
        for i in range(n):
            ex.route(out, routing_key, len(routing_key), p, plen)
        return tuple(out.queues_list)
    finally:
        release_route_out(out)


def bench_route_many(Exchange ex, list keys, int n, list props=None):
    """Benchmarks: route n messages cycling over keys (and props, disk form,
    in step with the keys). -> messages that found at least one queue."""
    cdef int i, k = len(keys), routed = 0
    cdef bytes key
    cdef bytes pr
    cdef RouteOut out = acquire_route_out()
    try:
        for i in range(n):
            key = <bytes>keys[i % k]
            if props is not None:
                pr = <bytes>props[i % len(props)]
                ex.route(out, key, len(key), pr, len(pr))
            else:
                ex.route(out, key, len(key), NULL, 0)
            if out.nq:
                routed += 1
        return routed
    finally:
        release_route_out(out)
