# Included by segment.pyx: a map from a message's position to a count.
# A queue with a delivery limit keeps how often each message was delivered
# (x-delivery-count); a store keeps what its requeued.N files say of the
# messages requeued and not yet acked (redelivered, their deliveries).

cdef class CountMap:
    """Linear probing with backward-shift deletion; key 0 is never a
    position (records start after the segment header)."""

    def __cinit__(self):
        self.cap = 64
        self.keys = <uint64_t *>calloc(self.cap, sizeof(uint64_t))
        self.vals = <uint32_t *>calloc(self.cap, sizeof(uint32_t))
        if self.keys is NULL or self.vals is NULL:
            raise MemoryError()

    def __dealloc__(self):
        free(self.keys)
        free(self.vals)

    cdef Py_ssize_t slot(self, uint64_t key) noexcept:
        return <Py_ssize_t>((key * 11400714819323198485ULL) >> 40) & (self.cap - 1)

    cdef uint32_t get(self, uint64_t key):
        cdef Py_ssize_t i = self.slot(key)
        while self.keys[i]:
            if self.keys[i] == key:
                return self.vals[i]
            i = (i + 1) & (self.cap - 1)
        return 0

    cdef int put(self, uint64_t key, uint32_t val) except -1:
        cdef Py_ssize_t i
        cdef uint64_t *old_keys
        cdef uint32_t *old_vals
        cdef Py_ssize_t old_cap, j
        if (self.size + 1) * 4 > self.cap * 3:
            old_keys, old_vals, old_cap = self.keys, self.vals, self.cap
            self.cap *= 2
            self.keys = <uint64_t *>calloc(self.cap, sizeof(uint64_t))
            self.vals = <uint32_t *>calloc(self.cap, sizeof(uint32_t))
            if self.keys is NULL or self.vals is NULL:
                raise MemoryError()
            self.size = 0
            for j in range(old_cap):
                if old_keys[j]:
                    self.put(old_keys[j], old_vals[j])
            free(old_keys)
            free(old_vals)
        i = self.slot(key)
        while self.keys[i] and self.keys[i] != key:
            i = (i + 1) & (self.cap - 1)
        if not self.keys[i]:
            self.size += 1
            self.keys[i] = key
        self.vals[i] = val
        return 0

    cdef void remove(self, uint64_t key):
        cdef Py_ssize_t i = self.slot(key), j, k
        while self.keys[i] != key:
            if not self.keys[i]:
                return
            i = (i + 1) & (self.cap - 1)
        self.size -= 1
        j = i
        while True:
            j = (j + 1) & (self.cap - 1)
            if not self.keys[j]:
                break
            k = self.slot(self.keys[j])
            # move j back to i unless its home lies cyclically in (i, j]
            if (i <= j and (i < k <= j)) or (i > j and (k <= j or k > i)):
                continue
            self.keys[i] = self.keys[j]
            self.vals[i] = self.vals[j]
            i = j
        self.keys[i] = 0
        self.vals[i] = 0

    def py_put(self, uint64_t key, uint32_t val):
        self.put(key, val)

    def py_get(self, uint64_t key):
        return self.get(key)

    def py_remove(self, uint64_t key):
        self.remove(key)
