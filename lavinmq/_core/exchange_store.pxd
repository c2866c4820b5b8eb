# The store of a persistent exchange (AvalancheMQ's x-persist-messages and
# x-persist-ms): what enters the exchange is appended to a StreamStore
# (segments, dense offsets from 1, retention by count and age), stamped with
# an x-offset header that holds its offset, whether a binding takes the
# message or not. A plain exchange has no ExchangeStore and pays one pointer
# test per message (routing.pyx, Exchange.visit_one).
from libc.stdint cimport uint64_t, int64_t
from lavinmq._core.routing cimport RouteOut
from lavinmq._core.stream_store cimport StreamStore


cdef class ExchangeStore:
    cdef:
        public StreamStore store
        public uint64_t keep_messages   # x-persist-messages, 0: no limit by count
        public int64_t keep_ms          # x-persist-ms, 0: no limit by age
        public uint64_t refused_count   # messages the disk had no room for
        # the window's statistics, kept until a message comes or a second passes
        uint64_t cached_last
        uint64_t cached_first
        int64_t cached_at
        object cached

    cdef uint64_t window_start(self, int64_t now) except? 0


# After a route that passed persistent exchanges (out.npstores > 0): the
# message appended to each one's store with its own x-offset. -> the record
# the queues get (stamped with the offset in the first of those exchanges on
# its way), its length in n; refused gets PUBLISH_NO_SPACE (1) when a store
# had no room.
cdef const char *keep_routed(RouteOut out, const char *rec, Py_ssize_t *n, int *refused) except NULL
