# cython: language_level=3
from libc.stdint cimport uint8_t, uint64_t, int64_t
from libc.stdlib cimport calloc, free
from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_GET_SIZE

from lavinmq._core.buffer cimport be32, be64
from lavinmq._core.clock cimport now_ms
from lavinmq._core.deadletter cimport find_header

DEFAULT_HEADER = b"x-deduplication-header"


cdef inline uint64_t fnv1a(const char *p, Py_ssize_t n) noexcept nogil:
    cdef uint64_t h = 14695981039346656037ULL
    cdef Py_ssize_t i
    for i in range(n):
        h ^= <uint8_t>p[i]
        h *= 1099511628211ULL
    return h | 1        # never 0: 0 marks an empty slot


cdef int64_t int_field(const char *v, Py_ssize_t n) noexcept:
    """An integer header value (x-cache-ttl), -1 if it is not one."""
    cdef uint8_t t = <uint8_t>v[0]
    if (t == b"I" or t == b"i") and n == 5:
        return <int>be32(v + 1) if t == b"I" else be32(v + 1)
    if (t == b"l" or t == b"L") and n == 9:
        return <int64_t>be64(v + 1)
    if (t == b"s" or t == b"u") and n == 3:
        return (<uint8_t>v[1] << 8) | <uint8_t>v[2]
    if (t == b"b" or t == b"B") and n == 2:
        return <uint8_t>v[1]
    return -1


cdef class Deduper:

    def __cinit__(self, header=None, Py_ssize_t size=128, default_ttl=None):
        self.header = (header or "x-deduplication-header").encode() if not isinstance(header, bytes) else header
        self.size = size if size > 0 else 128
        self.default_ttl = default_ttl or 0
        self.cap = 16
        while self.cap < self.size * 2:
            self.cap *= 2
        self.keys = <uint64_t *>calloc(self.cap, sizeof(uint64_t))
        self.expires = <uint64_t *>calloc(self.cap, sizeof(uint64_t))
        self.ring = <uint64_t *>calloc(self.size, sizeof(uint64_t))
        if self.keys is NULL or self.expires is NULL or self.ring is NULL:
            raise MemoryError()

    def __dealloc__(self):
        free(self.keys)
        free(self.expires)
        free(self.ring)

    cdef Py_ssize_t find(self, uint64_t key) noexcept:
        cdef Py_ssize_t i = <Py_ssize_t>(key >> 7) & (self.cap - 1)
        while self.keys[i] and self.keys[i] != key:
            i = (i + 1) & (self.cap - 1)
        return i

    cdef void remove(self, uint64_t key) noexcept:
        cdef Py_ssize_t i = self.find(key), j, k
        if not self.keys[i]:
            return
        j = i
        while True:         # backward-shift deletion keeps probing chains whole
            j = (j + 1) & (self.cap - 1)
            if not self.keys[j]:
                break
            k = <Py_ssize_t>(self.keys[j] >> 7) & (self.cap - 1)
            if (i <= j and (i < k <= j)) or (i > j and (k <= j or k > i)):
                continue
            self.keys[i] = self.keys[j]
            self.expires[i] = self.expires[j]
            i = j
        self.keys[i] = 0
        self.expires[i] = 0
        self.count -= 1

    cdef bint seen(self, const char *rec) except -1:
        """True for a duplicate (not stored again); otherwise it is
        remembered. A message without the header is never a duplicate."""
        cdef const char *v
        cdef Py_ssize_t vn, i
        cdef uint64_t key, now = 0, ttl = self.default_ttl
        cdef int64_t own
        if not find_header(rec, PyBytes_AS_STRING(self.header), PyBytes_GET_SIZE(self.header), &v, &vn):
            return False
        key = fnv1a(v, vn)
        i = self.find(key)
        if self.keys[i]:
            if self.expires[i] == 0 or self.expires[i] > now_ms():
                self.duplicates += 1
                return True
            self.remove(key)            # its TTL passed: a new message
        if find_header(rec, b"x-cache-ttl", 11, &v, &vn):
            own = int_field(v, vn)
            if own >= 0:
                ttl = <uint64_t>own
        if self.count >= self.size:
            self.remove(self.ring[self.ring_head])     # the oldest goes
        if ttl:
            now = now_ms()
        i = self.find(key)
        self.keys[i] = key
        self.expires[i] = now + ttl if ttl else 0
        self.count += 1
        self.ring[self.ring_head] = key
        self.ring_head = (self.ring_head + 1) % self.size
        return False

    def py_seen(self, bytes rec):
        return self.seen(rec)
