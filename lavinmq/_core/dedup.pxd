# LavinMQ's message deduplication: the value of a header identifies a
# message; a value seen within the cache's reach (the last cache_size values,
# each for its TTL) marks a duplicate. Values are kept as 64-bit hashes in an
# open-addressing table with a ring for eviction: no object per message.
from libc.stdint cimport uint64_t


cdef class Deduper:
    cdef:
        bytes header
        readonly Py_ssize_t size            # cache_size
        uint64_t default_ttl                # ms, 0: none
        uint64_t *keys                      # hash table, 0 = empty
        uint64_t *expires                   # ms, 0 = never
        Py_ssize_t cap
        uint64_t *ring                      # keys in order of insertion, for eviction
        Py_ssize_t ring_head
        readonly Py_ssize_t count
        public unsigned long long duplicates

    cdef Py_ssize_t find(self, uint64_t key) noexcept
    cdef void remove(self, uint64_t key) noexcept
    cdef bint seen(self, const char *rec) except -1
