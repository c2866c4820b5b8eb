# The headers exchange. Each binding is compiled once into (key, value)
# pairs; bindings are indexed by one pair (x-match all) or by every pair
# (x-match any), so a message with H headers costs H table lookups plus a
# check of the bindings those lookups found, not a scan of every binding.
# Included by routing.pyx.

cdef struct HPair:
    char *key               # owned
    uint32_t klen
    HVal val                # val.p owned for byte values

cdef struct IdList:
    uint32_t *ids
    uint32_t n
    uint32_t cap

cdef struct HBind:
    PyObject *dest          # strong reference, NULL: free slot
    uint8_t is_exchange
    uint8_t any
    uint32_t npairs
    HPair *pairs
    uint64_t stamp


cdef int idl_add(IdList *l, uint32_t id) except -1:
    cdef uint32_t *ids
    if l.n == l.cap:
        ids = <uint32_t *>realloc(l.ids, (l.cap * 2 if l.cap else 4) * sizeof(uint32_t))
        if ids is NULL:
            raise MemoryError()
        l.ids = ids
        l.cap = l.cap * 2 if l.cap else 4
    l.ids[l.n] = id
    l.n += 1
    return 0


cdef void idl_remove(IdList *l, uint32_t id) noexcept:
    cdef uint32_t i
    for i in range(l.n):
        if l.ids[i] == id:
            l.n -= 1
            l.ids[i] = l.ids[l.n]
            return


X_MATCH_MODES = {"all": (False, False), "any": (True, False),
                 "all-with-x": (False, True), "any-with-x": (True, True)}


def parse_x_match(arguments):
    """-> (any, with_x) for a binding's arguments, or raise ValueError."""
    mode = (arguments or {}).get("x-match", "all")
    if isinstance(mode, bytes):
        mode = mode.decode("utf-8", "replace")
    try:
        return X_MATCH_MODES[mode]
    except (KeyError, TypeError):
        raise ValueError(f"Invalid x-match field value {mode!r}; expected all, any, all-with-x or any-with-x") \
            from None


cdef class HeadersMatcher(Matcher):
    cdef HBind *binds
    cdef uint32_t nbinds
    cdef uint32_t capbinds
    cdef IdList free_ids
    cdef IdList always          # x-match all without pairs: every message
    cdef KeyMap pair_index      # composite (key, value) -> IdList*
    cdef KeyMap key_index       # key -> IdList*, for pairs that only ask for presence
    cdef dict slot_of           # binding key (Python) -> slot
    cdef uint64_t stamp
    cdef WriteBuffer wb

    def __cinit__(self):
        self.key_independent = True
        self.slot_of = {}
        self.wb = WriteBuffer()

    def __dealloc__(self):
        self.clear_all()
        free(self.binds)
        free(self.free_ids.ids)
        free(self.always.ids)

    cdef void clear_all(self) noexcept:
        cdef uint32_t i
        for i in range(self.nbinds):
            if self.binds[i].dest is not NULL:
                self.free_bind(i)
        self.nbinds = 0
        self.free_ids.n = 0
        self.always.n = 0
        free_idl_map(&self.pair_index)
        free_idl_map(&self.key_index)
        if self.slot_of is not None:
            self.slot_of.clear()

    cdef void free_bind(self, uint32_t i) noexcept:
        cdef HBind *b = &self.binds[i]
        cdef uint32_t k
        cdef PyObject *d = b.dest
        for k in range(b.npairs):
            free(b.pairs[k].key)
            free(<void *>b.pairs[k].val.p)
        free(b.pairs)
        b.pairs = NULL
        b.npairs = 0
        b.dest = NULL
        decref(d)

    cdef int index(self, uint32_t id, bint adding) except -1:
        """Put binding id into (or take it out of) the indexes."""
        cdef HBind *b = &self.binds[id]
        cdef uint32_t k
        cdef bint indexed = False
        if b.npairs == 0:
            if not b.any:
                if adding:
                    idl_add(&self.always, id)
                else:
                    idl_remove(&self.always, id)
            return 0
        for k in range(b.npairs):
            if b.pairs[k].val.cls != HC_VOID:
                self.index_in(&self.pair_index, id, b.pairs[k].key, b.pairs[k].klen, &b.pairs[k].val, adding)
                indexed = True
                if not b.any:
                    return 0
        for k in range(b.npairs):
            if b.pairs[k].val.cls == HC_VOID:
                self.index_in(&self.key_index, id, b.pairs[k].key, b.pairs[k].klen, NULL, adding)
                if not b.any and not indexed:
                    return 0
        return 0

    cdef int index_in(self, KeyMap *m, uint32_t id, const char *key, uint32_t klen, const HVal *val,
                      bint adding) except -1:
        cdef const char *k = key
        cdef size_t n = klen
        cdef uint64_t h
        cdef KMEntry *e
        cdef IdList *l
        if val is not NULL:
            write_composite(self.wb, key, klen, val)
            k = self.wb.buf
            n = self.wb.len
        h = hash_bytes(k, n)
        e = km_find(m, h, 0, k, n)
        if not adding:
            if e is not NULL:
                l = <IdList *>e.value
                idl_remove(l, id)
                if l.n == 0:
                    free(l.ids)
                    free(l)
                    km_remove(m, e)
            return 0
        if e is NULL:
            l = <IdList *>calloc(1, sizeof(IdList))
            if l is NULL:
                raise MemoryError()
            try:
                km_insert(m, h, 0, k, n, l)
            except BaseException:
                free(l)
                raise
        else:
            l = <IdList *>e.value
        return idl_add(l, id)

    def add(self, key, arguments, dest, bint is_exchange):
        """Bind dest with these arguments; key: the binding's identity."""
        cdef uint32_t id
        cdef HBind *b
        cdef HBind *nb
        cdef Py_ssize_t k = 0
        cdef bytes kb, vb
        if key in self.slot_of:
            return False
        any_mode, with_x = parse_x_match(arguments)
        pairs = []
        for name, value in (arguments or {}).items():
            if name == "x-match" or (not with_x and name.startswith("x-")):
                continue
            cls, ival, data = hval_tuple(value)
            pairs.append((name.encode("utf-8", "surrogateescape"), cls, ival, data))
        if self.free_ids.n:
            self.free_ids.n -= 1
            id = self.free_ids.ids[self.free_ids.n]
        else:
            if self.nbinds == self.capbinds:
                nb = <HBind *>realloc(self.binds, (self.capbinds * 2 if self.capbinds else 8) * sizeof(HBind))
                if nb is NULL:
                    raise MemoryError()
                self.binds = nb
                self.capbinds = self.capbinds * 2 if self.capbinds else 8
            id = self.nbinds
            self.nbinds += 1
        b = &self.binds[id]
        memset(b, 0, sizeof(HBind))
        b.pairs = <HPair *>calloc(len(pairs) or 1, sizeof(HPair))
        if b.pairs is NULL:
            idl_add(&self.free_ids, id)
            raise MemoryError()
        b.any = any_mode
        b.is_exchange = is_exchange
        incref(<PyObject *>dest)
        b.dest = <PyObject *>dest
        for kb, cls, ival, vb in pairs:
            b.pairs[k].key = <char *>malloc(len(kb) or 1)
            b.pairs[k].val.p = <char *>malloc(len(vb) or 1)
            b.npairs = k + 1
            if b.pairs[k].key is NULL or b.pairs[k].val.p is NULL:
                self.free_bind(id)
                idl_add(&self.free_ids, id)
                raise MemoryError()
            memcpy(b.pairs[k].key, <const char *>kb, len(kb))
            b.pairs[k].klen = len(kb)
            memcpy(<void *>b.pairs[k].val.p, <const char *>vb, len(vb))
            b.pairs[k].val.n = len(vb)
            b.pairs[k].val.cls = cls
            b.pairs[k].val.i = ival
            k += 1
        self.index(id, True)
        self.slot_of[key] = id
        return True

    def remove(self, key):
        cdef uint32_t id
        slot = self.slot_of.pop(key, None)
        if slot is None:
            return False
        id = slot
        self.index(id, False)
        self.free_bind(id)
        idl_add(&self.free_ids, id)
        return True

    @property
    def binding_count(self):
        return len(self.slot_of)

    cdef inline int emit(self, RouteOut out, uint32_t id) except -1:
        cdef HBind *b = &self.binds[id]
        cdef uint32_t k
        cdef HEntry *e
        if b.stamp == self.stamp:
            return 0
        b.stamp = self.stamp
        if not b.any:
            for k in range(b.npairs):
                e = out.find_header(b.pairs[k].key, b.pairs[k].klen)
                if e is NULL:
                    return 0
                if b.pairs[k].val.cls != HC_VOID and not hval_equal(&e.val, &b.pairs[k].val):
                    return 0
        return out.add_dest(b.dest, b.is_exchange)

    cdef int match(self, RouteOut out, const char *rk, Py_ssize_t rklen) except -1:
        cdef uint32_t i, k
        cdef Py_ssize_t j
        cdef HEntry *e
        cdef KMEntry *hit
        cdef IdList *l
        cdef WriteBuffer wb = self.wb
        self.stamp += 1
        for i in range(self.always.n):
            self.emit(out, self.always.ids[i])
        if out.nhdrs == 0:
            return 0
        for j in range(out.nhdrs):
            e = &out.hdrs[j]
            if self.pair_index.used:
                write_composite(wb, e.key, e.klen, &e.val)
                hit = km_find(&self.pair_index, hash_bytes(wb.buf, wb.len), 0, wb.buf, wb.len)
                if hit is not NULL:
                    l = <IdList *>hit.value
                    for k in range(l.n):
                        self.emit(out, l.ids[k])
            if self.key_index.used:
                hit = km_find(&self.key_index, hash_bytes(e.key, e.klen), 0, e.key, e.klen)
                if hit is not NULL:
                    l = <IdList *>hit.value
                    for k in range(l.n):
                        self.emit(out, l.ids[k])
        return 0


cdef void free_idl_map(KeyMap *m) noexcept:
    cdef size_t i
    cdef IdList *l
    if m.slots is not NULL:
        for i in range(m.mask + 1):
            if m.slots[i].hash:
                l = <IdList *>m.slots[i].value
                free(l.ids)
                free(l)
    km_free(m)
