# cython: language_level=3
from libc.stdint cimport uint8_t, uint64_t
from libc.stdlib cimport calloc, free
from libc.string cimport memcmp
from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_GET_SIZE
from cpython.list cimport PyList_GET_ITEM

from lavinmq._core.codec import decode_properties

cdef enum:
    CACHE_SLOTS = 256


cdef inline uint64_t fnv1a(const char *p, Py_ssize_t n) noexcept nogil:
    cdef uint64_t h = 14695981039346656037ULL
    cdef Py_ssize_t i
    for i in range(n):
        h ^= <uint8_t>p[i]
        h *= 1099511628211ULL
    return h


cdef class RoutingVersion:
    def bump(self):
        self.value += 1


cdef class Exchange:

    def __cinit__(self, *args, **kwargs):
        self.cacheable = True

    cdef int alloc_cache(self) except -1:
        # on first publish only: most exchanges in a big setup never route
        self.c_hash = <uint64_t *>calloc(CACHE_SLOTS, sizeof(uint64_t))
        self.c_version = <uint64_t *>calloc(CACHE_SLOTS, sizeof(uint64_t))
        if self.c_hash is NULL or self.c_version is NULL:
            raise MemoryError()
        self.c_keys = [None] * CACHE_SLOTS
        self.c_vals = [None] * CACHE_SLOTS
        self.c_mask = CACHE_SLOTS - 1
        return 0

    def __dealloc__(self):
        free(self.c_hash)
        free(self.c_version)

    cdef tuple route(self, const char *rk, Py_ssize_t rklen, const char *props_le, Py_ssize_t props_len):
        """The de-duplicated queues this message goes to."""
        cdef uint64_t h = 0
        cdef Py_ssize_t slot = 0
        cdef object key
        cdef uint64_t ver = self.version.value + 1   # 0 marks an empty slot
        self.publish_in_count += 1
        if self.cacheable:
            if self.c_hash is NULL:
                self.alloc_cache()
            h = fnv1a(rk, rklen)
            slot = h & self.c_mask
            if self.c_hash[slot] == h and self.c_version[slot] == ver:
                key = <object>PyList_GET_ITEM(self.c_keys, slot)
                if PyBytes_GET_SIZE(key) == rklen and memcmp(PyBytes_AS_STRING(key), rk, rklen) == 0:
                    return <tuple>PyList_GET_ITEM(self.c_vals, slot)
        key = rk[:rklen]
        skey = key.decode("utf-8", "surrogateescape")
        cacheable = False
        if self.cacheable:
            queues, cacheable = self.resolve(skey, None)
        if not cacheable:
            # a headers exchange on the way: route again with the message's headers
            headers = {}
            if props_le is not NULL:
                headers = decode_properties(props_le[:props_len], True).get("headers") or {}
            queues, _ = self.resolve(skey, headers)
        if cacheable:
            self.c_hash[slot] = h
            self.c_version[slot] = ver
            self.c_keys[slot] = key
            self.c_vals[slot] = queues
        return queues

    def resolve(self, str routing_key, headers):
        """-> (tuple of unique queues, cacheable). Follows exchange-to-exchange
        bindings; implemented in lavinmq.exchange."""
        raise NotImplementedError

    def py_route(self, bytes routing_key, bytes props_le=None):
        if props_le is None:
            return self.route(routing_key, len(routing_key), NULL, 0)
        return self.route(routing_key, len(routing_key), props_le, len(props_le))


def bench_route(Exchange ex, bytes routing_key, int n):
    """Benchmarks: route the same key n times (the cached path)."""
    cdef int i
    cdef tuple out = None
    for i in range(n):
        out = ex.route(routing_key, len(routing_key), NULL, 0)
    return out
