# cython: language_level=3
# A new binding to a persistent exchange asked for stored messages (x-head,
# x-tail, x-from): a cursor over the exchange's StreamStore copies the
# selected messages that the binding matches into its queue, then what was
# published since the binding was made, in batches that the control half
# (lavinmq/exchange/persistent.py) spreads over the event loop. The record
# is copied as stored (it carries its x-offset), with the time of the copy
# as its timestamp: the queue's TTL counts from when the message reached it.
from libc.stdint cimport uint8_t, uint64_t
from cpython.object cimport PyObject

from lavinmq._core.buffer cimport WriteBuffer, put_le64
from lavinmq._core.clock cimport now_ms
from lavinmq._core.exchange_store cimport ExchangeStore
from lavinmq._core.queue cimport Queue
from lavinmq._core.routing cimport Matcher, RouteOut, acquire_route_out, release_route_out
from lavinmq._core.segment cimport Segment, SEGMENT_HEADER, record_len
from lavinmq._core.stream_store cimport StreamStore

cdef enum:
    COPY_KEEP = 1024 * 1024


cdef class Replay:
    cdef:
        ExchangeStore xs
        StreamStore st
        Matcher matcher             # the new binding alone (consistent hash: with the others)
        readonly Queue dest
        Segment seg                 # the cursor: segment, byte position,
        Py_ssize_t pos
        readonly uint64_t offset    # and the offset of the record there
        readonly uint64_t sel_last  # the selection ends here ...
        readonly uint64_t tail_from # ... and what came after the bind starts here
        readonly uint64_t copied
        readonly uint64_t examined
        WriteBuffer copy

    def __init__(self, ExchangeStore xs, Matcher matcher, Queue dest, uint64_t first, uint64_t last,
                 uint64_t tail_from):
        """Copy offsets first..last (none when first > last), then from
        tail_from (the store's end at the bind) to wherever the end is when
        the cursor gets there."""
        self.xs = xs
        self.st = xs.store
        self.matcher = matcher
        self.dest = dest
        self.sel_last = last
        self.tail_from = tail_from
        self.copy = WriteBuffer()
        self.seek(first if first <= last else tail_from)

    def seek(self, uint64_t target):
        s, pos, off = self.st.locate(target)
        self.seg = s
        self.pos = pos
        self.offset = off

    def run(self, Py_ssize_t max_messages, Py_ssize_t max_bytes):
        """Copy up to max_messages / max_bytes. -> True when the cursor is
        at the store's end (or the queue or the store closed): the binding
        can route from here on."""
        cdef RouteOut out = acquire_route_out()
        try:
            return self.step(out, max_messages, max_bytes) == 1
        finally:
            release_route_out(out)

    cdef int step(self, RouteOut out, Py_ssize_t max_messages, Py_ssize_t max_bytes) except -1:
        cdef StreamStore st = self.st
        cdef Segment s
        cdef Segment nxt
        cdef const char *rec
        cdef Py_ssize_t n
        cdef uint64_t now = now_ms()
        if self.copy.cap > COPY_KEEP:
            self.copy.shrink(COPY_KEEP)
        while True:
            if self.dest.closed or st.closed:
                return 1
            if self.offset > self.sel_last and self.offset < self.tail_from:
                self.seek(self.tail_from)           # what the selection leaves out
                continue
            s = self.seg
            if s.dropped:
                # retention dropped the segment under the cursor: go on from
                # the oldest message left
                s, self.pos, first = st.first_position()
                self.seg = s
                if first > self.offset:
                    self.offset = first
                continue
            if self.pos >= s.size:
                if s is st.wseg:
                    return 1
                nxt = st.next_segment(s.id)
                if nxt is None:
                    return 1
                if s.base is not NULL:
                    s.unmap()               # RSS stays flat over a long replay
                self.seg = nxt
                self.pos = SEGMENT_HEADER
                continue
            if max_messages <= 0 or max_bytes <= 0:
                return 0
            if s.base is NULL:
                s.map()
            rec = s.base + self.pos
            n = record_len(rec, s.size - self.pos)
            if n <= 0:
                raise OSError(f"{st.log_name}: corrupt record in segment {s.id} at byte {self.pos}")
            self.pos += n
            self.offset += 1
            self.examined += 1
            max_messages -= 1
            max_bytes -= n
            if self.matches(out, rec, n):
                # a copy: publishing may route back into this exchange
                # (dead-lettering) and move or drop the segment under rec
                self.copy.clear()
                self.copy.write_raw(rec, n)
                put_le64(self.copy.buf, now)
                if self.dest.publish(self.copy.buf, n) == 0:
                    self.copied += 1

    cdef bint matches(self, RouteOut out, const char *rec, Py_ssize_t n) except -1:
        cdef Py_ssize_t exlen = <uint8_t>rec[8]
        cdef Py_ssize_t rklen = <uint8_t>rec[9 + exlen]
        cdef Py_ssize_t po = 10 + exlen + rklen
        cdef Matcher m = self.matcher
        cdef Py_ssize_t k
        cdef PyObject *want = <PyObject *>self.dest
        out.begin(rec + 10 + exlen, rklen, rec + po, n - po)
        if m.key_independent:
            m.match(out, out.keys[0], out.klens[0])
        else:
            for k in range(out.nkeys):
                m.match(out, out.keys[k], out.klens[k])
        for k in range(out.nq):
            if out.queues[k] == want:
                return True
        return False
