# The consistent-hash exchange (x-consistent-hash), as LavinMQ: the binding
# key is the destination's weight; the message's routing key (or a header,
# or a property) picks one destination. LavinMQ's two algorithms, over CRC32
# so that placement survives a restart, kept to give the same destination
# for the same key as LavinMQ does (tests/fixtures/lavinmq-consistent-hash-
# vectors.json were made by LavinMQ's own hashers):
#   ring (LavinMQ's default): points CRC32("name.t"), t < weight, in a map
#     that keeps insertion order; a key goes to the first point at or after
#     its CRC32, and past the last point to the oldest point still there.
#     A point two destinations share belongs to the later one, and removing
#     a weight removes its points whoever holds them (as LavinMQ).
#   jump: each add appends `weight` buckets; Lamping and Veach's jump
#     consistent hash over CRC32(key) << 32 | CRC32(key + "_salt") picks one.
# Only bindings change these tables: the per-message step is a CRC and a
# binary search (ring) or a few multiplications (jump).
# Included by routing.pyx.

cdef enum:
    HASH_ON_KEY = 0
    HASH_ON_HEADER = 1
    HASH_ON_PROPERTY = 2
    ALGO_JUMP = 0
    ALGO_RING = 1
    MAX_BUCKETS = 1 << 24       # all weights of one exchange together
    # the ring is rebuilt at each binding change, on the event loop: one
    # binding of weight 10^6 took 1.25 s when its points were made in
    # Python (issue 25); they are made in C now, and bounded
    MAX_RING_POINTS = 100000


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


cdef list ring_points(bytes name, uint32_t weight):
    """CRC32("name.t") for t < weight, in that order (LavinMQ's points),
    made in C: name's CRC once, then t's decimal digits."""
    cdef uint32_t base = crc32_update(crc32_update(0, name, len(name)), b".", 1)
    cdef uint32_t t, v
    cdef char digits[16]
    cdef int nd
    cdef list out = []
    for t in range(weight):
        nd = 0
        v = t
        while True:
            digits[15 - nd] = <char>(48 + v % 10)
            nd += 1
            v //= 10
            if v == 0:
                break
        out.append(crc32_update(base, digits + 16 - nd, nd))
    return out


def crc32(bytes data):
    return crc32_update(0, data, len(data))


def jump_bucket(bytes key, int32_t buckets):
    """The bucket a key lands in among `buckets` (for tests)."""
    cdef uint32_t hi = crc32_update(0, key, len(key))
    cdef uint32_t lo = crc32_update(hi, b"_salt", 5)
    return jump_hash((<uint64_t>hi << 32) | lo, buckets)


cdef class ConsistentHashMatcher(Matcher):
    # the hasher as LavinMQ's: jump's entries [name, weight, dest, is_x] in
    # add order; ring's {CRC32 point: (dest, is_x)} in insertion order
    cdef list entries
    cdef dict ring
    # C tables rebuilt from them when a binding changes
    cdef list refs              # the destinations `targets` points to
    cdef PyObject **targets
    cdef uint8_t *target_is_x
    cdef uint32_t *buckets      # jump: bucket -> target
    cdef uint32_t nbuckets
    cdef uint32_t *points       # ring: sorted points and their target
    cdef uint32_t *point_target
    cdef uint32_t npoints
    cdef uint32_t first_target  # ring: the oldest point's target (past the last point)
    cdef int hash_on
    cdef bytes hash_name        # header name
    cdef int property_index
    cdef readonly int algorithm

    def __cinit__(self):
        self.entries = []
        self.ring = {}
        self.refs = []

    def __init__(self, algorithm="ring", hash_header=None, hash_property=None):
        self.algorithm = ALGO_JUMP if algorithm == "jump" else ALGO_RING
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
        free(self.point_target)
        self.targets = NULL
        self.target_is_x = NULL
        self.buckets = NULL
        self.points = NULL
        self.point_target = NULL
        self.nbuckets = self.npoints = 0

    cdef void clear_all(self) noexcept:
        self.free_tables()
        if self.entries is not None:
            self.entries.clear()
        if self.ring is not None:
            self.ring.clear()
        if self.refs is not None:
            self.refs.clear()

    def add(self, dest, bytes name, uint32_t weight, bint is_exchange):
        """A new binding of dest (named name) with this weight."""
        cdef uint64_t total = weight
        if self.algorithm == ALGO_JUMP:
            total += sum(e[1] for e in self.entries)
            if total > MAX_BUCKETS:
                raise ValueError(f"the weights of exchange bindings add up to more than {MAX_BUCKETS}")
            self.entries.append((name, weight, dest, is_exchange))
        else:
            total += len(self.ring)
            if total > MAX_RING_POINTS:
                raise ValueError(f"the weights of exchange bindings add up to more than {MAX_RING_POINTS} "
                                 f"(x-algorithm ring)")
            owner = (dest, is_exchange)
            for p in ring_points(name, weight):
                self.ring[p] = owner
        self.rebuild()

    def remove(self, bytes name, uint32_t weight):
        """LavinMQ's remove(name, weight): by name, whoever the destination."""
        if self.algorithm == ALGO_JUMP:
            self.entries = [e for e in self.entries if not (e[0] == name and e[1] == weight)]
        else:
            for p in ring_points(name, min(weight, MAX_RING_POINTS)):
                self.ring.pop(p, None)
        self.rebuild()

    cdef uint32_t target_index(self, dict index, dest, bint is_x) except? 0xffffffff:
        i = index.get(id(dest))
        if i is None:
            i = index[id(dest)] = len(self.refs)
            self.refs.append(dest)
            self.target_is_x[i] = is_x
            self.targets[i] = <PyObject *>dest
        return i

    def rebuild(self):
        """The C tables from the hasher's state (bindings are rare)."""
        cdef uint32_t k = 0, i
        cdef Py_ssize_t n = len(self.entries) + len(self.ring)
        cdef dict index = {}
        self.free_tables()
        self.refs = []
        if n == 0:
            return
        self.targets = <PyObject **>malloc(n * sizeof(PyObject *))
        self.target_is_x = <uint8_t *>malloc(n)
        if self.targets is NULL or self.target_is_x is NULL:
            self.free_tables()
            raise MemoryError()
        if self.algorithm == ALGO_JUMP:
            total = sum(e[1] for e in self.entries)
            self.buckets = <uint32_t *>malloc((total or 1) * sizeof(uint32_t))
            if self.buckets is NULL:
                self.free_tables()
                raise MemoryError()
            for name, weight, dest, is_x in self.entries:
                i = self.target_index(index, dest, is_x)
                for _ in range(<uint32_t>weight):
                    self.buckets[k] = i
                    k += 1
            self.nbuckets = k
            return
        self.points = <uint32_t *>malloc(n * sizeof(uint32_t))
        self.point_target = <uint32_t *>malloc(n * sizeof(uint32_t))
        if self.points is NULL or self.point_target is NULL:
            self.free_tables()
            raise MemoryError()
        first = True
        for p, (dest, is_x) in self.ring.items():
            if first:
                self.first_target = self.target_index(index, dest, is_x)
                first = False
        for p in sorted(self.ring):
            dest, is_x = self.ring[p]
            self.points[k] = p
            self.point_target[k] = self.target_index(index, dest, is_x)
            k += 1
        self.npoints = k

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
            # the first point at or after the key's hash; none: the oldest point
            lo = 0
            hi = self.npoints
            while lo < hi:
                mid = (lo + hi) >> 1
                if self.points[mid] < crc:
                    lo = mid + 1
                else:
                    hi = mid
            idx = self.point_target[lo] if lo < self.npoints else self.first_target
        return out.add_dest(self.targets[idx], self.target_is_x[idx])
