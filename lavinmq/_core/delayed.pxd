# Delayed messages (LavinMQ's x-delayed-message exchanges): a message with
# an x-delay header waits in its exchange's delay queue, a store of its own
# ordered by due time in a binary heap of 16-byte entries, and is routed by
# the exchange when its time comes.
from libc.stdint cimport uint32_t, uint64_t, int64_t
from lavinmq._core.queue cimport Queue
from lavinmq._core.routing cimport Exchange


cdef struct Due:
    uint64_t at         # ms
    uint32_t seg
    uint32_t pos

cdef class DelayQueue(Queue):
    cdef:
        Due *heap
        Py_ssize_t n
        Py_ssize_t cap
        public Exchange exchange        # routes the messages when they are due
        public uint64_t armed_at        # ms of the armed timer, 0: none
        public object timer
        public uint64_t delivered_count

    cdef int push(self, uint64_t at, uint32_t seg, uint32_t pos) except -1
    cdef void pop(self)
    cdef int route_due(self, uint64_t now) except -1


# The x-delay header of a record in ms, 0 when it has none (or not > 0).
cdef int64_t delay_of(const char *rec) except -1
