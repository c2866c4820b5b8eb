# The consistent-hash exchange (x-consistent-hash), as LavinMQ: the binding
# key is the destination's weight; the message's routing key (or a header,
# or a property) picks one destination. Two algorithms, both over CRC32 so
# that placement survives a restart:
#   jump (default): each destination owns `weight` buckets, in binding order;
#     Lamping and Veach's jump consistent hash picks a bucket. Adding a
#     binding appends buckets, so only the new binding's share of keys moves.
#   ring: LavinMQ's ring of CRC32("name.t") points, t < weight.
# Included by routing.pyx.

cdef enum:
    HASH_ON_KEY = 0
    HASH_ON_HEADER = 1
    HASH_ON_PROPERTY = 2
    ALGO_JUMP = 0
    ALGO_RING = 1
    MAX_BUCKETS = 1 << 24       # all weights of one exchange together
    # the ring is rebuilt (hashed and sorted) at each binding change, on the
    # event loop: one binding of weight 10^6 took 1.25 s when it was built
    # in Python. In C, 100,000 points take ~15 ms.
    MAX_RING_POINTS = 100000


cdef struct RingPoint:
    uint32_t crc
    uint32_t seq        # the order points were made in: of equal points the last one wins
    uint32_t entry


cdef int ring_point_cmp(const void *a, const void *b) noexcept nogil:
    cdef const RingPoint *x = <const RingPoint *>a
    cdef const RingPoint *y = <const RingPoint *>b
    if x.crc != y.crc:
        return -1 if x.crc < y.crc else 1
    return -1 if x.seq < y.seq else (1 if x.seq > y.seq else 0)


cdef uint32_t CRC_TABLE[256]

cdef void init_crc_table() noexcept:
    cdef uint32_t c, i, k
    for i in range(256):
        c = i
        for k in range(8):
            c = (c >> 1) ^ (0xEDB88320 if c & 1 else 0)
        CRC_TABLE[i] = c

init_crc_table()


cdef inline uint32_t crc32_update(uint32_t crc, const char *p, Py_ssize_t n) noexcept nogil:
    """zlib's CRC-32; crc32_update(crc32(a), b) == crc32(a + b)."""
    cdef Py_ssize_t i
    crc = ~crc
    for i in range(n):
        crc = CRC_TABLE[(crc ^ <uint8_t>p[i]) & 0xff] ^ (crc >> 8)
    return ~crc


cdef inline int32_t jump_hash(uint64_t key, int32_t buckets) noexcept nogil:
    cdef int64_t b = -1, j = 0
    while j < buckets:
        b = j
        key = key * 2862933555777941757ULL + 1
        j = <int64_t>((b + 1) * (<double>(1LL << 31) / <double>((key >> 33) + 1)))
    return <int32_t>b


def crc32(bytes data):
    return crc32_update(0, data, len(data))


def jump_bucket(bytes key, int32_t buckets):
    """The bucket a key lands in among `buckets` (for tests)."""
    cdef uint32_t hi = crc32_update(0, key, len(key))
    cdef uint32_t lo = crc32_update(hi, b"_salt", 5)
    return jump_hash((<uint64_t>hi << 32) | lo, buckets)


cdef class ConsistentHashMatcher(Matcher):
    cdef list entries           # [dest, name bytes, weight, is_exchange, count], in binding order
    cdef PyObject **targets     # entry index -> destination (borrowed from entries)
    cdef uint8_t *target_is_x
    cdef uint32_t *buckets      # jump: bucket -> entry index
    cdef uint32_t nbuckets
    cdef uint32_t *points       # ring: sorted points and their entry index
    cdef uint32_t *point_entry
    cdef uint32_t npoints
    cdef int hash_on
    cdef bytes hash_name        # header name
    cdef int property_index
    cdef readonly int algorithm

    def __cinit__(self):
        self.entries = []

    def __init__(self, algorithm="jump", hash_header=None, hash_property=None):
        self.algorithm = ALGO_RING if algorithm == "ring" else ALGO_JUMP
        if hash_header is not None:
            self.hash_on = HASH_ON_HEADER
            self.hash_name = hash_header.encode("utf-8", "surrogateescape")
        elif hash_property is not None:
            self.hash_on = HASH_ON_PROPERTY
            self.property_index = PROPERTY_INDEX[hash_property]
        self.key_independent = self.hash_on != HASH_ON_KEY

    def __dealloc__(self):
        self.free_tables()

    cdef void free_tables(self) noexcept:
        free(self.targets)
        free(self.target_is_x)
        free(self.buckets)
        free(self.points)
        free(self.point_entry)
        self.targets = NULL
        self.target_is_x = NULL
        self.buckets = NULL
        self.points = NULL
        self.point_entry = NULL
        self.nbuckets = self.npoints = 0

    cdef void clear_all(self) noexcept:
        self.free_tables()
        if self.entries is not None:
            self.entries.clear()

    def add(self, dest, bytes name, uint32_t weight, bint is_exchange):
        for e in self.entries:
            if e[0] is dest and e[2] == weight:
                e[4] += 1
                return
        limit = MAX_RING_POINTS if self.algorithm == ALGO_RING else MAX_BUCKETS
        if sum(e[2] for e in self.entries) + weight > limit:
            raise ValueError(f"the weights of exchange bindings add up to more than {limit}"
                             + (" (x-algorithm ring)" if self.algorithm == ALGO_RING else ""))
        self.entries.append([dest, name, weight, is_exchange, 1])
        self.rebuild()

    def remove(self, dest, uint32_t weight):
        for i, e in enumerate(self.entries):
            if e[0] is dest and e[2] == weight:
                e[4] -= 1
                if e[4] == 0:
                    del self.entries[i]
                    self.rebuild()
                return True
        return False

    def rebuild(self):
        """Tables from the entries (bindings are rare: rebuilding is simple
        and gives the same placement as a restart would)."""
        cdef uint32_t i, t, k = 0
        cdef uint32_t total = sum(e[2] for e in self.entries)
        cdef Py_ssize_t n = len(self.entries)
        self.free_tables()
        if n == 0:
            return
        self.targets = <PyObject **>malloc(n * sizeof(PyObject *))
        self.target_is_x = <uint8_t *>malloc(n)
        if self.targets is NULL or self.target_is_x is NULL:
            self.free_tables()
            raise MemoryError()
        for i in range(n):
            self.targets[i] = <PyObject *>self.entries[i][0]
            self.target_is_x[i] = self.entries[i][3]
        if self.algorithm == ALGO_JUMP:
            self.buckets = <uint32_t *>malloc((total or 1) * sizeof(uint32_t))
            if self.buckets is NULL:
                self.free_tables()
                raise MemoryError()
            for i in range(n):
                for t in range(<uint32_t>self.entries[i][2]):
                    self.buckets[k] = i
                    k += 1
            self.nbuckets = total
            return
        self.build_ring(total)

    cdef int build_ring(self, uint32_t total) except -1:
        """LavinMQ's ring: CRC32("name.t") for t < weight of each binding,
        sorted; of equal points the one made last wins."""
        cdef RingPoint *pts = <RingPoint *>malloc((total or 1) * sizeof(RingPoint))
        cdef uint32_t i, t, k = 0, seq = 0, base, v
        cdef char digits[16]
        cdef int nd, j
        cdef bytes name
        if pts is NULL:
            self.free_tables()
            raise MemoryError()
        try:
            for i in range(<uint32_t>len(self.entries)):
                name = self.entries[i][1]
                base = crc32_update(0, name, len(name))
                base = crc32_update(base, b".", 1)
                for t in range(<uint32_t>self.entries[i][2]):
                    nd = 0
                    v = t
                    while True:         # t in decimal, as str(t)
                        digits[15 - nd] = <char>(48 + v % 10)
                        nd += 1
                        v //= 10
                        if v == 0:
                            break
                    pts[seq].crc = crc32_update(base, digits + 16 - nd, nd)
                    pts[seq].seq = seq
                    pts[seq].entry = i
                    seq += 1
            qsort(pts, seq, sizeof(RingPoint), ring_point_cmp)
            self.points = <uint32_t *>malloc((seq or 1) * sizeof(uint32_t))
            self.point_entry = <uint32_t *>malloc((seq or 1) * sizeof(uint32_t))
            if self.points is NULL or self.point_entry is NULL:
                self.free_tables()
                raise MemoryError()
            for j in range(<int>seq):
                if j + 1 < <int>seq and pts[j + 1].crc == pts[j].crc:
                    continue        # a later point of the same value wins
                self.points[k] = pts[j].crc
                self.point_entry[k] = pts[j].entry
                k += 1
            self.npoints = k
        finally:
            free(pts)
        return 0

    cdef int match(self, RouteOut out, const char *rk, Py_ssize_t rklen) except -1:
        cdef const char *key = rk
        cdef Py_ssize_t klen = rklen, off
        cdef HEntry *h
        cdef uint32_t crc, lo, hi, mid, idx
        if self.nbuckets == 0 and self.npoints == 0:
            return 0
        if self.hash_on == HASH_ON_HEADER:
            h = out.find_header(self.hash_name, len(self.hash_name))
            if h is NULL:
                klen = 0
            elif h.val.cls == HC_BYTES:
                key = h.val.p
                klen = h.val.n
            else:
                raise PreconditionFailed("Routing header must be string", 60, 40)
        elif self.hash_on == HASH_ON_PROPERTY:
            off = find_property(out.props, out.plen, self.property_index, &klen)
            if off < 0:
                klen = 0
            else:
                key = out.props + off
        crc = crc32_update(0, key, klen)
        if self.algorithm == ALGO_JUMP:
            idx = self.buckets[jump_hash((<uint64_t>crc << 32) | crc32_update(crc, b"_salt", 5),
                                         <int32_t>self.nbuckets)]
        else:
            # the first point at or after the key's hash, wrapping round
            lo = 0
            hi = self.npoints
            while lo < hi:
                mid = (lo + hi) >> 1
                if self.points[mid] < crc:
                    lo = mid + 1
                else:
                    hi = mid
            idx = self.point_entry[lo if lo < self.npoints else 0]
        return out.add_dest(self.targets[idx], self.target_is_x[idx])
