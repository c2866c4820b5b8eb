# cython: language_level=3
import asyncio
import logging

from libc.stdint cimport uint8_t, uint32_t, uint64_t, int64_t
from libc.stdlib cimport realloc, free
from cpython.object cimport PyObject

from lavinmq._core.buffer cimport be32, be64, le64
from lavinmq._core.clock cimport now_ms
from lavinmq._core.deadletter cimport find_header
from lavinmq._core.exchange_store cimport keep_routed
from lavinmq._core.props cimport record_props_offset
from lavinmq._core.queue cimport Queue, PUBLISH_NO_SPACE
from lavinmq._core.routing cimport Exchange, RouteOut, acquire_route_out, release_route_out
from lavinmq._core.segment cimport MessageStore, SP, record_len

log = logging.getLogger("lavinmq.delayed")

cdef enum:
    # due messages routed per timer callback before yielding to the loop
    ROUTE_BUDGET = 16384


cdef int64_t delay_of(const char *rec) except -1:
    cdef const char *v
    cdef Py_ssize_t vn
    cdef uint8_t t
    cdef int64_t d = 0
    if not find_header(rec, b"x-delay", 7, &v, &vn):
        return 0
    t = <uint8_t>v[0]
    if (t == b"I" or t == b"i") and vn == 5:
        d = <int>be32(v + 1) if t == b"I" else be32(v + 1)
    elif (t == b"l" or t == b"L") and vn == 9:
        d = <int64_t>be64(v + 1)
    elif (t == b"s" or t == b"u") and vn == 3:
        d = <short>((<uint8_t>v[1] << 8) | <uint8_t>v[2]) if t == b"s" else ((<uint8_t>v[1] << 8) | <uint8_t>v[2])
    elif (t == b"b" or t == b"B") and vn == 2:
        d = <signed char>v[1] if t == b"b" else <uint8_t>v[1]
    return d if d > 0 else 0


cdef inline bint earlier(Due *a, Due *b) noexcept:
    # by due time, then by position: FIFO among equal times (positions grow)
    if a.at != b.at:
        return a.at < b.at
    if a.seg != b.seg:
        return a.seg < b.seg
    return a.pos < b.pos


cdef class DelayQueue(Queue):
    """Holds an exchange's delayed messages. Nothing consumes it: the timer
    routes each message through the exchange when it is due."""

    def __dealloc__(self):
        free(self.heap)

    cdef int push(self, uint64_t at, uint32_t seg, uint32_t pos) except -1:
        cdef Py_ssize_t i, parent
        cdef Due *nh
        cdef Due tmp
        if self.n == self.cap:
            self.cap = self.cap * 2 if self.cap else 1024
            nh = <Due *>realloc(self.heap, self.cap * sizeof(Due))
            if nh is NULL:
                raise MemoryError()
            self.heap = nh
        i = self.n
        self.n += 1
        self.heap[i].at = at
        self.heap[i].seg = seg
        self.heap[i].pos = pos
        while i > 0:
            parent = (i - 1) >> 1
            if not earlier(&self.heap[i], &self.heap[parent]):
                break
            tmp = self.heap[i]
            self.heap[i] = self.heap[parent]
            self.heap[parent] = tmp
            i = parent
        return 0

    cdef void pop(self):
        cdef Py_ssize_t i = 0, l, r, m
        cdef Due tmp
        self.n -= 1
        if self.n == 0:
            return
        self.heap[0] = self.heap[self.n]
        while True:
            l = 2 * i + 1
            r = l + 1
            m = i
            if l < self.n and earlier(&self.heap[l], &self.heap[m]):
                m = l
            if r < self.n and earlier(&self.heap[r], &self.heap[m]):
                m = r
            if m == i:
                break
            tmp = self.heap[i]
            self.heap[i] = self.heap[m]
            self.heap[m] = tmp
            i = m

    cdef int publish(self, const char *rec, Py_ssize_t n) except -1:
        """Stored (with the group commit of durable stores, as any publish),
        then kept in the heap by due time."""
        cdef SP sp, taken
        cdef bint redelivered
        cdef uint64_t at = le64(rec) + <uint64_t>delay_of(rec)
        if self.store.append(rec, n, &sp):
            return PUBLISH_NO_SPACE
        # the store's read cursor follows its writes: what it holds is
        # found through the heap, never through shift()
        self.store.shift(&taken, &redelivered)
        self.push(at, sp.seg, sp.pos)
        self.publish_count += 1
        if self.armed_at == 0 or at < self.armed_at:
            self.arm(at)
        return 0

    def arm(self, uint64_t at):
        cdef uint64_t now = now_ms()
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None
        self.armed_at = at
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            self.armed_at = 0
            return
        self.timer = loop.call_later(max(0.0, (<int64_t>at - <int64_t>now) / 1000.0), self.on_timer)

    def on_timer(self):
        self.timer = None
        self.armed_at = 0
        if self.closed:
            return
        try:
            self.route_due(now_ms())
        except Exception:
            log.exception("routing delayed messages of %s failed", self.name)
        if self.n:
            self.arm(self.heap[0].at)

    cdef int route_due(self, uint64_t now) except -1:
        cdef SP sp
        cdef const char *rec
        cdef Py_ssize_t n, exlen, po, i
        cdef RouteOut out
        cdef Queue q
        cdef Exchange ex = self.exchange
        cdef int budget = ROUTE_BUDGET
        cdef int kept_rc = 0            # a full disk: as for the queues below, nothing to tell
        while self.n and self.heap[0].at <= now and budget > 0:
            sp.seg = self.heap[0].seg
            sp.pos = self.heap[0].pos
            self.pop()
            budget -= 1
            rec = self.store.read(sp)
            n = record_len(rec, 1 << 30)
            sp.size = <uint32_t>n
            if ex is not None and not ex.deleted:
                exlen = <uint8_t>rec[8]
                po = record_props_offset(rec)
                out = acquire_route_out()
                try:
                    ex.route(out, rec + 10 + exlen, <uint8_t>rec[9 + exlen], rec + po, n - po)
                    if out.npstores:
                        rec = keep_routed(out, rec, &n, &kept_rc)
                    if out.nq:
                        ex.publish_out_count += 1
                    for i in range(out.nq):
                        q = <Queue><object>out.queues[i]
                        if not q.closed:
                            q.publish(rec, n)
                finally:
                    release_route_out(out)
            self.delivered_count += 1
            self.store.delete(sp)
        self.store.flush_acks()
        return 0

    def load(self):
        """At start: every stored message back into the heap."""
        cdef SP sp
        cdef bint redelivered
        cdef const char *rec
        while True:
            rec = self.store.shift(&sp, &redelivered)
            if rec is NULL:
                break
            self.push(le64(rec) + <uint64_t>delay_of(rec), sp.seg, sp.pos)
        if self.n:
            self.arm(self.heap[0].at)

    def stop_timer(self):
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None
        self.armed_at = 0

    @property
    def message_count(self):
        return self.n

    @property
    def next_due(self):
        """ms of the next message's time, None when empty."""
        return self.heap[0].at if self.n else None


def bench_delay(DelayQueue q, bytes rec, int n):
    """Benchmarks: schedule n copies of rec (an x-delay message)."""
    cdef int i
    for i in range(n):
        q.publish(rec, len(rec))


def bench_route_due(DelayQueue q, uint64_t now):
    return q.route_due(now)
