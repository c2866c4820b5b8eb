# The C tables the matchers are built from: a seeded byte hash, KeyMap
# ((tag, bytes) -> pointer), PtrIndex (object pointer -> index) and DestSet
# (a counted set of destinations). Included by routing.pyx.

cdef extern from *:
    """
    #include <string.h>
    /* 64x64 -> 128 bit multiply, folded: the mixing step of the hash */
    static inline uint64_t lq_mum(uint64_t a, uint64_t b) {
        __uint128_t r = (__uint128_t)a * b;
        return (uint64_t)r ^ (uint64_t)(r >> 64);
    }
    /* Short keys (routing key words, queue names) are the common case:
       read them in at most four fixed-size loads, no loop, no memcpy call. */
    static inline uint64_t lq_hash(const char *p, size_t n, uint64_t seed) {
        const uint64_t k0 = 0xa0761d6478bd642fULL, k1 = 0xe7037ed1a0b428dbULL;
        uint64_t h = seed ^ k0 ^ ((uint64_t)n * k1);
        uint64_t a, b;
        if (n <= 16) {
            if (n >= 4) {
                uint32_t x, y, z, w;
                size_t mid = (n >> 3) << 2;
                memcpy(&x, p, 4);
                memcpy(&y, p + mid, 4);
                memcpy(&z, p + n - 4, 4);
                memcpy(&w, p + n - 4 - mid, 4);
                a = ((uint64_t)x << 32) | y;
                b = ((uint64_t)z << 32) | w;
            } else if (n > 0) {
                a = ((uint64_t)(uint8_t)p[0] << 16) | ((uint64_t)(uint8_t)p[n >> 1] << 8) | (uint8_t)p[n - 1];
                b = 0;
            } else {
                a = b = 0;
            }
        } else {
            size_t i = n;
            while (i > 16) {
                uint64_t x, y;
                memcpy(&x, p, 8);
                memcpy(&y, p + 8, 8);
                h = lq_mum(x ^ k1, y ^ h);
                p += 16;
                i -= 16;
            }
            memcpy(&a, p + i - 16, 8);
            memcpy(&b, p + i - 8, 8);
        }
        h = lq_mum(k1 ^ (uint64_t)n, lq_mum(a ^ k1, b ^ h));
        return h ? h : 1;     /* 0 marks an empty slot */
    }
    static inline uint64_t lq_hash_tag(uint64_t h, uint64_t tag) {
        uint64_t r = lq_mum(h ^ tag, 0x4b33a62ed433d4a3ULL);
        return r ? r : 1;
    }
    static inline size_t lq_ptr_hash(const void *p) {
        uint64_t x = (uint64_t)(uintptr_t)p;
        return (size_t)lq_mum(x, 0x9e3779b97f4a7c15ULL);
    }
    """
    uint64_t lq_hash(const char *p, size_t n, uint64_t seed) noexcept nogil
    void *aligned_alloc(size_t alignment, size_t size) noexcept nogil
    uint64_t lq_hash_tag(uint64_t h, uint64_t tag) noexcept nogil
    size_t lq_ptr_hash(const void *p) noexcept nogil

# Per process, so that nobody can choose keys that collide in our tables.
# (The consistent-hash exchange does not use it: its placement must survive
# a restart.) PYTHONHASHSEED set to a number fixes it, as it fixes Python's
# own str hashes: the regression gate counts instructions, and a table's
# probe lengths must not change from run to run there.
cdef uint64_t _seed():
    fixed = os.environ.get("PYTHONHASHSEED", "random")
    if fixed.isdigit():
        return (int(fixed) * 0x9E3779B97F4A7C15 + 1) & 0xFFFFFFFFFFFFFFFF
    return int.from_bytes(os.urandom(8), "little")


cdef uint64_t HASH_SEED = _seed()


cdef inline uint64_t hash_bytes(const char *p, size_t n) noexcept nogil:
    return lq_hash(p, n, HASH_SEED)


# -- KeyMap ----------------------------------------------------------------------

cdef int km_grow(KeyMap *m) except -1:
    cdef size_t old_cap = m.mask + 1 if m.slots is not NULL else 0
    cdef size_t cap = old_cap * 2 if old_cap else 16
    cdef KMEntry *old = m.slots
    # slots on cache-line boundaries: a probe reads one line
    cdef KMEntry *slots = <KMEntry *>aligned_alloc(64, cap * sizeof(KMEntry))
    cdef size_t i, j
    if slots is NULL:
        raise MemoryError()
    memset(slots, 0, cap * sizeof(KMEntry))
    for i in range(old_cap):
        if old[i].hash:
            j = old[i].hash & (cap - 1)
            while slots[j].hash:
                j = (j + 1) & (cap - 1)
            slots[j] = old[i]
    free(old)
    m.slots = slots
    m.mask = cap - 1
    return 0


cdef inline const char *km_key(const KMEntry *e) noexcept nogil:
    if e.klen <= KM_INLINE:
        return &e.inl[0]
    return e.key


cdef inline KMEntry *km_find(KeyMap *m, uint64_t h, uint64_t tag, const char *k, size_t n) noexcept nogil:
    cdef size_t i
    cdef KMEntry *e
    if m.used == 0:
        return NULL
    i = h & m.mask
    while True:
        e = &m.slots[i]
        if e.hash == 0:
            return NULL
        if e.hash == h and e.tag == tag and e.klen == n and memcmp(km_key(e), k, n) == 0:
            return e
        i = (i + 1) & m.mask


cdef KMEntry *km_insert(KeyMap *m, uint64_t h, uint64_t tag, const char *k, size_t n,
                        void *value) except NULL:
    """A new entry (the caller has checked the key is absent)."""
    cdef size_t i
    cdef char *copy = NULL
    if m.slots is NULL or (m.used + 1) * 2 > m.mask + 1:
        km_grow(m)
    if n > KM_INLINE:
        copy = <char *>malloc(n)
        if copy is NULL:
            raise MemoryError()
        memcpy(copy, k, n)
    i = h & m.mask
    while m.slots[i].hash:
        i = (i + 1) & m.mask
    m.slots[i].hash = h
    m.slots[i].tag = tag
    m.slots[i].key = copy
    if copy is NULL:
        memcpy(m.slots[i].inl, k, n)
    m.slots[i].klen = <uint32_t>n
    m.slots[i].value = value
    m.used += 1
    return &m.slots[i]


cdef void km_remove(KeyMap *m, KMEntry *e) noexcept:
    """Remove e, shifting later entries of its probe run back so that no
    tombstones are needed."""
    cdef size_t i = e - m.slots
    cdef size_t j = i, home
    free(e.key)         # NULL for an inline key
    while True:
        j = (j + 1) & m.mask
        if m.slots[j].hash == 0:
            break
        home = m.slots[j].hash & m.mask
        # move j into the hole at i unless its home lies cyclically in (i, j]
        if (j > i and (home <= i or home > j)) or (j < i and (home <= i and home > j)):
            m.slots[i] = m.slots[j]
            i = j
    m.slots[i].hash = 0
    m.slots[i].key = NULL
    m.slots[i].value = NULL
    m.used -= 1


cdef void km_free(KeyMap *m) noexcept:
    """Free the keys and the table (the caller frees the values first)."""
    cdef size_t i
    if m.slots is not NULL:
        for i in range(m.mask + 1):
            if m.slots[i].hash:
                free(m.slots[i].key)
        free(m.slots)
    m.slots = NULL
    m.mask = 0
    m.used = 0


# -- PtrIndex -----------------------------------------------------------------------

cdef int pi_grow(PtrIndex *t) except -1:
    cdef size_t old_cap = t.mask + 1 if t.slots is not NULL else 0
    cdef size_t cap = old_cap * 2 if old_cap else 64
    cdef PtrSlot *old = t.slots
    cdef PtrSlot *slots = <PtrSlot *>calloc(cap, sizeof(PtrSlot))
    cdef size_t i, j
    if slots is NULL:
        raise MemoryError()
    for i in range(old_cap):
        if old[i].ptr is not NULL:
            j = lq_ptr_hash(old[i].ptr) & (cap - 1)
            while slots[j].ptr is not NULL:
                j = (j + 1) & (cap - 1)
            slots[j] = old[i]
    free(old)
    t.slots = slots
    t.mask = cap - 1
    return 0


cdef inline PtrSlot *pi_find(PtrIndex *t, PyObject *p) noexcept nogil:
    cdef size_t i
    if t.slots is NULL:
        return NULL
    i = lq_ptr_hash(p) & t.mask
    while t.slots[i].ptr is not NULL:
        if t.slots[i].ptr == p:
            return &t.slots[i]
        i = (i + 1) & t.mask
    return NULL


cdef int pi_set(PtrIndex *t, PyObject *p, uint32_t idx) except -1:
    cdef size_t i
    cdef PtrSlot *s = pi_find(t, p)
    if s is not NULL:
        s.idx = idx
        return 0
    if t.slots is NULL or (t.used + 1) * 2 > t.mask + 1:
        pi_grow(t)
    i = lq_ptr_hash(p) & t.mask
    while t.slots[i].ptr is not NULL:
        i = (i + 1) & t.mask
    t.slots[i].ptr = p
    t.slots[i].idx = idx
    t.used += 1
    return 0


cdef void pi_remove(PtrIndex *t, PtrSlot *s) noexcept:
    cdef size_t i = s - t.slots
    cdef size_t j = i, home
    while True:
        j = (j + 1) & t.mask
        if t.slots[j].ptr is NULL:
            break
        home = lq_ptr_hash(t.slots[j].ptr) & t.mask
        if (j > i and (home <= i or home > j)) or (j < i and (home <= i and home > j)):
            t.slots[i] = t.slots[j]
            i = j
    t.slots[i].ptr = NULL
    t.used -= 1


cdef void pi_free(PtrIndex *t) noexcept:
    free(t.slots)
    t.slots = NULL
    t.mask = 0
    t.used = 0


# -- DestSet --------------------------------------------------------------------------

cdef enum:
    DS_INDEX_AT = 16        # sets larger than this keep a PtrIndex


cdef inline Py_ssize_t ds_find(DestSet *s, PyObject *o) noexcept:
    cdef uint32_t i
    cdef PtrSlot *slot
    if s.index.slots is not NULL:
        slot = pi_find(&s.index, o)
        return slot.idx if slot is not NULL else -1
    for i in range(s.n):
        if s.items[i].obj == o:
            return i
    return -1


cdef int ds_add(DestSet *s, object o, bint is_exchange) except -1:
    """Count one more binding to o. -> 1 if o is new in the set."""
    cdef PyObject *p = <PyObject *>o
    cdef Py_ssize_t i = ds_find(s, p)
    cdef Dest *items
    cdef uint32_t k
    if i >= 0:
        s.items[i].count += 1
        return 0
    if s.cap == 0:
        s.items = &s.one
        s.cap = 1
    elif s.n == s.cap:
        if s.items == &s.one:
            items = <Dest *>malloc(4 * sizeof(Dest))
            if items is not NULL:
                items[0] = s.one
        else:
            items = <Dest *>realloc(s.items, s.cap * 2 * sizeof(Dest))
        if items is NULL:
            raise MemoryError()
        s.items = items
        s.cap = 4 if s.cap == 1 else s.cap * 2
    incref(p)
    s.items[s.n].obj = p
    s.items[s.n].count = 1
    s.items[s.n].is_exchange = is_exchange
    if s.index.slots is not NULL:
        pi_set(&s.index, p, s.n)
    elif s.n + 1 > DS_INDEX_AT:
        for k in range(s.n + 1):
            pi_set(&s.index, s.items[k].obj, k)
    s.n += 1
    return 1


cdef int ds_remove(DestSet *s, object o) except -1:
    """Count one binding to o less. -> 1 if it left the set, 0 if it stays,
    -2 if it was not there."""
    cdef PyObject *p = <PyObject *>o
    cdef Py_ssize_t i = ds_find(s, p)
    cdef PyObject *gone
    if i < 0:
        return -2
    s.items[i].count -= 1
    if s.items[i].count:
        return 0
    gone = s.items[i].obj
    if s.index.slots is not NULL:
        pi_remove(&s.index, pi_find(&s.index, gone))
    s.n -= 1
    if i != s.n:
        s.items[i] = s.items[s.n]
        if s.index.slots is not NULL:
            pi_set(&s.index, s.items[i].obj, <uint32_t>i)
    decref(gone)
    return 1


cdef void ds_clear(DestSet *s) noexcept:
    cdef uint32_t i
    cdef Dest *items = s.items
    cdef uint32_t n = s.n
    cdef bint own = items != &s.one
    s.items = NULL
    s.n = s.cap = 0
    pi_free(&s.index)
    for i in range(n):
        decref(items[i].obj)
    if own:
        free(items)

