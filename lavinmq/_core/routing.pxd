# Per-message routing without Python: every exchange type keeps its bindings
# in C structures (hash tables, a topic trie, precompiled header matchers, a
# consistent-hash bucket list) and answers "which queues?" into a RouteOut,
# following exchange-to-exchange bindings, CC/BCC routing keys and alternate
# exchanges in Cython. Python only edits the tables (bind, unbind, delete).
from libc.stdint cimport uint8_t, uint32_t, uint64_t, int32_t, int64_t
from cpython.object cimport PyObject
from lavinmq._core.buffer cimport WriteBuffer


cdef class RoutingVersion:
    # bumped on every binding, exchange or queue change in a vhost
    cdef public uint64_t value


# -- a hash map from (tag, bytes) to a pointer ----------------------------------
# Open addressing with linear probing and backward-shift deletion. The tag
# lets one table hold edges of many trie nodes (tag = node id).
cdef enum:
    KM_INLINE = 24          # keys up to this long live in the slot itself

cdef struct KMEntry:        # 64 bytes: one cache line per probe
    uint64_t hash           # 0: empty slot
    uint64_t tag
    void *value
    uint32_t klen
    uint32_t spare
    char *key               # owned copy of a longer key
    char inl[KM_INLINE]

cdef struct KeyMap:
    KMEntry *slots
    size_t mask             # capacity - 1 (capacity is a power of two), 0 when unallocated
    size_t used


# -- a pointer -> index map (destination sets, per-message dedup) ---------------
cdef struct PtrSlot:
    PyObject *ptr           # NULL: empty
    uint32_t idx

cdef struct PtrIndex:
    PtrSlot *slots
    size_t mask
    size_t used


# -- a multiset of destinations: queues and exchanges, counted per binding -----
cdef struct Dest:
    PyObject *obj           # strong reference
    uint32_t count          # bindings that put it here
    uint8_t is_exchange

cdef struct DestSet:
    # A set never moves once it has items: `items` may point at `one`
    # (most binding keys lead to one destination: no second allocation).
    Dest *items
    uint32_t n
    uint32_t cap
    PtrIndex index          # built once the set grows past a few items
    Dest one


# -- a header value in comparable form ------------------------------------------
# Integers of every width, timestamps and integral floats compare by value
# (as RabbitMQ's Erlang term comparison does); strings and byte arrays by
# bytes; nested tables and arrays by their encoded bytes.
cdef enum HClass:
    HC_VOID = 1
    HC_INT = 2
    HC_UINT_BIG = 3         # u64 above INT64_MAX
    HC_FLOAT = 4
    HC_BOOL = 5
    HC_DECIMAL = 6
    HC_BYTES = 7
    HC_TABLE = 8
    HC_ARRAY = 9

cdef struct HVal:
    uint8_t cls
    int64_t i               # INT, BOOL, DECIMAL (scale << 32 | value), FLOAT/UINT_BIG bits
    const char *p           # BYTES, TABLE, ARRAY
    uint32_t n

cdef struct HEntry:
    const char *key
    uint32_t klen
    uint8_t type            # the wire type octet
    HVal val
    uint64_t khash          # set when the message's key index is built


# -- the answer of one route ------------------------------------------------------
cdef struct Frame:
    PyObject *ex
    Py_ssize_t begin
    Py_ssize_t end
    Py_ssize_t next
    uint64_t hits           # out.hits when the exchange was entered

cdef class RouteOut:
    cdef:
        # queues, de-duplicated (borrowed: the exchanges' tables hold them)
        PyObject **queues
        Py_ssize_t nq
        Py_ssize_t capq
        uint64_t hits               # queue matches, duplicates included
        PyObject **seen
        uint32_t *seen_stamp
        size_t seen_mask
        uint32_t stamp
        # exchanges matched and not yet followed, and the traversal stack
        PyObject **xs
        Py_ssize_t nxs
        Py_ssize_t capxs
        Frame *frames
        Py_ssize_t nframes
        Py_ssize_t capframes
        uint64_t visit              # marks the exchanges visited by this route
        # routing keys: the message's, then CC and BCC
        const char **keys
        uint32_t *klens
        Py_ssize_t nkeys
        Py_ssize_t capkeys
        # the message's properties (disk form) and its headers table
        const char *props
        Py_ssize_t plen
        Py_ssize_t htab_off         # offset of the table body in props, -1: no headers
        uint32_t htab_len
        HEntry *hdrs
        Py_ssize_t nhdrs
        Py_ssize_t caphdrs
        bint hdrs_hashed            # the key index below is built
        int32_t *hidx               # key -> first entry, for messages with many headers
        size_t hidx_mask
        Py_ssize_t bcc_off          # BCC entry in the table body, -1: none
        Py_ssize_t bcc_len
        WriteBuffer scratch         # composite keys for lookups
        WriteBuffer stripped        # the record without its BCC header
        # persistent exchanges (x-persist-messages / x-persist-ms) the
        # message passed through: their stores (_core.exchange_store), borrowed
        PyObject **pstores
        Py_ssize_t npstores
        Py_ssize_t cappstores
        WriteBuffer stamped         # the record with its x-offset header, made on first use
        RouteOut next_free

    cdef int begin(self, const char *rk, Py_ssize_t rklen, const char *props, Py_ssize_t plen) except -1
    cdef int parse_headers(self) except -1
    cdef int add_cc_keys(self, HEntry *e) except -1
    cdef HEntry *find_header(self, const char *key, uint32_t klen)
    cdef HEntry *find_header_slow(self, const char *key, uint32_t klen)
    cdef int grow_seen(self) except -1
    cdef int add_key(self, const char *k, uint32_t n) except -1
    cdef int add_queue(self, PyObject *q) except -1
    cdef int add_exchange(self, PyObject *x) except -1
    cdef int add_dests(self, DestSet *s) except -1
    cdef int add_dest(self, PyObject *o, bint is_exchange) except -1
    cdef int add_pstore(self, PyObject *store) except -1
    cdef int push_frame(self, PyObject *ex, Py_ssize_t begin, Py_ssize_t end) except -1
    cdef const char *strip_bcc(self, const char *rec, Py_ssize_t n, Py_ssize_t props_off,
                               Py_ssize_t *out_n) except NULL


cdef RouteOut acquire_route_out()
cdef void release_route_out(RouteOut out)


# -- matchers: one per exchange type ------------------------------------------------
cdef class Matcher:
    cdef:
        # fanout, headers and hash-on-header: the routing key plays no part,
        # so CC/BCC keys add nothing
        bint key_independent
    cdef int match(self, RouteOut out, const char *rk, Py_ssize_t rklen) except -1
    cdef void clear_all(self) noexcept


cdef class Exchange:
    cdef:
        # per-message extensions, None on an exchange that has none: a
        # plain exchange pays one pointer test for each of them per message
        # (channel.pyx; `persist` in visit_one)
        public object dedup             # _core.dedup.Deduper (x-message-deduplication)
        public object delay_queue       # _core.delayed.DelayQueue (x-delayed-message)
        public object persist           # _core.exchange_store.ExchangeStore (x-persist-messages/-ms)
        public str name
        public bytes name_bytes
        public object vhost
        public bint internal
        public bint deleted
        public RoutingVersion version
        public Matcher matcher
        public uint64_t publish_in_count
        public uint64_t publish_out_count
        public uint64_t unroutable_count
        uint64_t visit
        # alternate exchange: the declare argument wins over a policy
        object ae_argument
        object ae_policy
        Exchange ae_cached
        uint64_t ae_version         # routing version ae_cached was resolved at, 0: never

    cdef int route(self, RouteOut out, const char *rk, Py_ssize_t rklen,
                   const char *props, Py_ssize_t plen) except -1
    cdef int traverse(self, RouteOut out) except -1
    cdef int visit_one(self, RouteOut out) except -1
    cdef Exchange alternate(self)
