# cython: language_level=3
from libc.stdint cimport uint8_t, uint16_t, uint64_t
from lavinmq._core.buffer cimport le16, le32
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


cdef inline uint64_t fnv1a_more(uint64_t h, const char *p, Py_ssize_t n) noexcept nogil:
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
        free(self.h_hash)
        free(self.h_version)

    cdef int alloc_headers_cache(self) except -1:
        self.h_hash = <uint64_t *>calloc(CACHE_SLOTS, sizeof(uint64_t))
        self.h_version = <uint64_t *>calloc(CACHE_SLOTS, sizeof(uint64_t))
        if self.h_hash is NULL or self.h_version is NULL:
            raise MemoryError()
        self.h_keys = [None] * CACHE_SLOTS
        self.h_vals = [None] * CACHE_SLOTS
        return 0

    cdef tuple route(self, const char *rk, Py_ssize_t rklen, const char *props_le, Py_ssize_t props_len):
        """The de-duplicated queues this message goes to."""
        cdef uint64_t h = 0
        cdef Py_ssize_t slot = 0
        cdef object key, val
        cdef uint64_t ver = self.version.value + 1   # 0 marks an empty slot
        self.publish_in_count += 1
        if not self.cacheable:
            return self.route_by_headers(rk, rklen, props_le, props_len)
        if self.c_hash is NULL:
            self.alloc_cache()
        h = fnv1a(rk, rklen)
        slot = h & self.c_mask
        if self.c_hash[slot] == h and self.c_version[slot] == ver:
            key = <object>PyList_GET_ITEM(self.c_keys, slot)
            if PyBytes_GET_SIZE(key) == rklen and memcmp(PyBytes_AS_STRING(key), rk, rklen) == 0:
                val = <object>PyList_GET_ITEM(self.c_vals, slot)
                if val is not None:
                    return <tuple>val
                # None: a headers exchange is downstream of this key
                return self.route_by_headers(rk, rklen, props_le, props_len)
        key = rk[:rklen]
        queues, cacheable = self.resolve(key.decode("utf-8", "surrogateescape"), None)
        self.c_hash[slot] = h
        self.c_version[slot] = ver
        self.c_keys[slot] = key
        self.c_vals[slot] = queues if cacheable else None
        if cacheable:
            return queues
        return self.route_by_headers(rk, rklen, props_le, props_len)

    cdef tuple route_by_headers(self, const char *rk, Py_ssize_t rklen, const char *props_le, Py_ssize_t props_len):
        cdef const char *hp = NULL
        cdef Py_ssize_t hl = 0, pos = 2
        cdef uint16_t flags = 0
        cdef uint64_t h
        cdef Py_ssize_t slot
        cdef object key
        cdef const char *k
        cdef uint64_t ver = self.version.value + 1
        if props_le is not NULL and props_len >= 2:
            # headers are the third property: skip content-type and -encoding
            flags = le16(props_le)
            if flags & 0x2000:
                if flags & 0x8000:
                    pos += 1 + <uint8_t>props_le[pos]
                if flags & 0x4000:
                    pos += 1 + <uint8_t>props_le[pos]
                hl = le32(props_le + pos)
                hp = props_le + pos + 4
        if self.h_hash is NULL:
            self.alloc_headers_cache()
        h = fnv1a_more(fnv1a(rk, rklen) ^ <uint64_t>rklen, hp, hl)
        slot = h & (CACHE_SLOTS - 1)
        if self.h_hash[slot] == h and self.h_version[slot] == ver:
            key = <object>PyList_GET_ITEM(self.h_keys, slot)
            k = PyBytes_AS_STRING(key)
            if (PyBytes_GET_SIZE(key) == 1 + rklen + hl and <uint8_t>k[0] == rklen
                    and memcmp(k + 1, rk, rklen) == 0 and memcmp(k + 1 + rklen, hp, hl) == 0):
                return <tuple>PyList_GET_ITEM(self.h_vals, slot)
        headers = {}
        if hp is not NULL:
            headers = decode_properties(props_le[:props_len], True).get("headers") or {}
        queues, _ = self.resolve(rk[:rklen].decode("utf-8", "surrogateescape"), headers)
        self.h_hash[slot] = h
        self.h_version[slot] = ver
        self.h_keys[slot] = bytes([rklen]) + rk[:rklen] + (hp[:hl] if hp is not NULL else b"")
        self.h_vals[slot] = queues
        return queues

    def resolve(self, str routing_key, headers):
        """-> (tuple of unique queues, cacheable). Follows exchange-to-exchange
        bindings; implemented in lavinmq.exchange."""
        raise NotImplementedError

    def py_route(self, bytes routing_key, bytes props_le=None):
        if props_le is None:
            return self.route(routing_key, len(routing_key), NULL, 0)
        return self.route(routing_key, len(routing_key), props_le, len(props_le))


def bench_route(Exchange ex, bytes routing_key, int n, bytes props_le=None):
    """Benchmarks: route the same message n times (props_le: its properties
    in disk form, for exchanges that look at headers)."""
    cdef int i
    cdef tuple out = None
    cdef const char *p = NULL
    cdef Py_ssize_t plen = 0
    if props_le is not None:
        p = props_le
        plen = len(props_le)
    for i in range(n):
        out = ex.route(routing_key, len(routing_key), p, plen)
    return out
