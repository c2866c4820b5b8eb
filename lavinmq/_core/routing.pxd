# Per-message routing: an exchange answers "which queues?" for a routing key
# from a cache of tuples, so the hot path does one hash and one memcmp.
# On a miss the Python subclass's match() computes the answer.
from libc.stdint cimport uint64_t


cdef class RoutingVersion:
    # bumped on every binding, exchange or queue change in a vhost: cached
    # routes from before are stale
    cdef public uint64_t value


cdef class Exchange:
    cdef:
        public str name
        public bytes name_bytes
        public object vhost
        public bint internal
        public bint deleted
        public bint cacheable        # False for types that look at headers
        public RoutingVersion version
        uint64_t *c_hash
        uint64_t *c_version
        list c_keys
        list c_vals
        Py_ssize_t c_mask
        # second cache for routes that depend on headers: keyed on the routing
        # key plus the raw headers table, which repeats in most workloads
        uint64_t *h_hash
        uint64_t *h_version
        list h_keys
        list h_vals
        public uint64_t publish_in_count
        public uint64_t publish_out_count

    cdef int alloc_cache(self) except -1
    cdef int alloc_headers_cache(self) except -1
    cdef tuple route_by_headers(self, const char *rk, Py_ssize_t rklen, const char *props_le, Py_ssize_t props_len)
    cdef tuple route(self, const char *rk, Py_ssize_t rklen, const char *props_le, Py_ssize_t props_len)
