# cython: language_level=3
import os

from lavinmq import store_dirs
from lavinmq.clustering import changes

from libc.stdint cimport uint32_t, uint64_t
from cpython.list cimport PyList_GET_ITEM

from lavinmq._core.segment cimport MessageStore, SP
from lavinmq._core.props cimport record_priority, record_body_len

cdef enum:
    LEVEL_SHIFT = 24
    SEG_MASK = (1 << 24) - 1


cdef class PriorityMessageStore(MessageStore):
    """Higher priority first; within a level, first in first out; requeued
    messages go back to their own level, ahead of what was behind them."""

    def __init__(self, str directory, Py_ssize_t segment_size=8 * 1024 * 1024, log_name=None,
                 int max_priority=255, syncer=None):
        self._dir = directory
        self.segment_size = segment_size
        self.log_name = log_name or directory
        self.error = None
        self.max_priority = max_priority
        self.stores = []
        os.makedirs(directory, exist_ok=True)
        for level in range(max_priority + 1):
            st = MessageStore(os.path.join(directory, "prio.%03d" % level), segment_size,
                              f"{self.log_name} (priority {level})", syncer)
            if st.error is not None and self.error is None:
                self.error = st.error
            self.stores.append(st)
            self.ready += (<MessageStore>st).ready
            self.ready_bytes += (<MessageStore>st).ready_bytes
        self.closed = self.error is not None
        self.top = max_priority

    cdef inline MessageStore level_store(self, SP *sp):
        cdef uint32_t level = sp.seg >> LEVEL_SHIFT
        sp.seg &= SEG_MASK
        return <MessageStore>PyList_GET_ITEM(self.stores, level)

    cdef int append(self, const char *rec, Py_ssize_t n, SP *out) except -1:
        cdef int level = record_priority(rec)
        cdef int rc
        if level > self.max_priority:
            level = self.max_priority
        rc = (<MessageStore>PyList_GET_ITEM(self.stores, level)).append(rec, n, out)
        if rc:
            return rc
        out.seg |= (<uint32_t>level) << LEVEL_SHIFT
        self.ready += 1
        self.ready_bytes += n
        if self.track_body:
            self.ready_body += record_body_len(rec)
        if level > self.top:
            self.top = level
        return 0

    cdef const char *shift(self, SP *out, bint *redelivered) except? NULL:
        cdef MessageStore st
        cdef const char *rec
        while self.top >= 0:
            st = <MessageStore>PyList_GET_ITEM(self.stores, self.top)
            if st.ready:
                rec = st.shift(out, redelivered)
                if rec is not NULL:
                    out.seg |= (<uint32_t>self.top) << LEVEL_SHIFT
                    self.ready -= 1
                    self.ready_bytes -= out.size
                    if self.track_body:
                        self.ready_body -= record_body_len(rec)
                    return rec
            self.top -= 1
        self.top = 0
        return NULL

    cdef const char *peek(self, SP *out) except? NULL:
        cdef MessageStore st
        cdef const char *rec
        cdef int level = self.top
        while level >= 0:
            st = <MessageStore>PyList_GET_ITEM(self.stores, level)
            if st.ready:
                rec = st.peek(out)
                if rec is not NULL:
                    out.seg |= (<uint32_t>level) << LEVEL_SHIFT
                    return rec
            level -= 1
        return NULL

    cdef const char *read(self, SP sp) except NULL:
        return self.level_store(&sp).read(sp)

    cdef int delete(self, SP sp) except -1:
        return self.level_store(&sp).delete(sp)

    cdef int requeue(self, SP sp, uint32_t deliveries=1) except -1:
        cdef int level = sp.seg >> LEVEL_SHIFT
        cdef MessageStore st = self.level_store(&sp)
        st.requeue(sp, deliveries)
        self.ready += 1
        self.ready_bytes += sp.size
        if self.track_body:
            self.ready_body += record_body_len(st.read(sp))
        if level > self.top:
            self.top = level
        return 0

    def redelivery_counts(self):
        """Each level's, with the level in the key's segment id as in an SP."""
        return [(key | (<uint64_t>level << (32 + LEVEL_SHIFT)), n)
                for level, st in enumerate(self.stores) for key, n in st.redelivery_counts()]

    cdef int flush_acks(self) except -1:
        for st in self.stores:
            if (<MessageStore>st).dirty:
                (<MessageStore>st).flush_acks()
        return 0

    # -- Python-facing -------------------------------------------------------

    def purge(self):
        count = 0
        for st in self.stores:
            count += st.purge()
        self.ready = 0
        self.ready_bytes = 0
        self.ready_body = 0
        return count

    def count_body_bytes(self):
        cdef MessageStore st
        cdef uint64_t total = 0
        if self.track_body:
            return
        for x in self.stores:
            st = <MessageStore>x
            st.count_body_bytes()
            total += st.ready_body
            st.track_body = False       # the parent keeps the sum from here
        self.ready_body = total
        self.track_body = True

    def set_syncer(self, syncer):
        # the levels' stores commit their own writes; this one writes none
        for st in self.stores:
            st.set_syncer(syncer)

    @property
    def syncer(self):
        return (<MessageStore>self.stores[0]).syncer if self.stores else None

    def unmap_idle(self):
        for st in self.stores:
            st.unmap_idle()

    def close(self):
        if self.closed and self.error is None:
            return
        for st in self.stores:
            st.close()
        self.closed = True

    def destroy(self):
        self.close()
        store_dirs.remove(self.path())
        changes.removed(self.path())

    def write_segments(self):
        return [x for st in self.stores for x in st.write_segments()]

    @property
    def segment_count(self):
        return sum(st.segment_count for st in self.stores)

    @property
    def mapped_segments(self):
        return sum(st.mapped_segments for st in self.stores)

    def segment_ids(self):
        return [i for st in self.stores for i in st.segment_ids()]
