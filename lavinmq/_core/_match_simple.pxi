# Direct, fanout and default exchange matchers. Included by routing.pyx.


cdef class DirectMatcher(Matcher):
    """Binding key -> destination set, in one hash table."""
    cdef KeyMap table
    cdef readonly Py_ssize_t binding_count

    def __dealloc__(self):
        self.clear_all()

    cdef void clear_all(self) noexcept:
        cdef size_t i
        cdef DestSet *s
        if self.table.slots is not NULL:
            for i in range(self.table.mask + 1):
                if self.table.slots[i].hash:
                    s = <DestSet *>self.table.slots[i].value
                    ds_clear(s)
                    free(s)
        km_free(&self.table)
        self.binding_count = 0

    cdef int match(self, RouteOut out, const char *rk, Py_ssize_t rklen) except -1:
        cdef KMEntry *e = km_find(&self.table, hash_bytes(rk, rklen), 0, rk, rklen)
        if e is not NULL:
            out.add_dests(<DestSet *>e.value)
        return 0

    def add(self, bytes key, dest, bint is_exchange):
        cdef uint64_t h = hash_bytes(key, len(key))
        cdef KMEntry *e = km_find(&self.table, h, 0, key, len(key))
        cdef DestSet *s
        if e is NULL:
            s = <DestSet *>calloc(1, sizeof(DestSet))
            if s is NULL:
                raise MemoryError()
            try:
                km_insert(&self.table, h, 0, key, len(key), s)
            except BaseException:
                free(s)
                raise
        else:
            s = <DestSet *>e.value
        ds_add(s, dest, is_exchange)
        self.binding_count += 1

    def remove(self, bytes key, dest):
        cdef KMEntry *e = km_find(&self.table, hash_bytes(key, len(key)), 0, key, len(key))
        cdef DestSet *s
        if e is NULL:
            return False
        s = <DestSet *>e.value
        if ds_remove(s, dest) == -2:
            return False
        self.binding_count -= 1
        if s.n == 0:
            ds_clear(s)
            free(s)
            km_remove(&self.table, e)
        return True

    @property
    def key_count(self):
        return self.table.used


cdef class FanoutMatcher(Matcher):
    cdef DestSet dests

    def __cinit__(self):
        self.key_independent = True

    def __dealloc__(self):
        ds_clear(&self.dests)

    cdef void clear_all(self) noexcept:
        ds_clear(&self.dests)

    cdef int match(self, RouteOut out, const char *rk, Py_ssize_t rklen) except -1:
        return out.add_dests(&self.dests)

    def add(self, dest, bint is_exchange):
        ds_add(&self.dests, dest, is_exchange)

    def remove(self, dest):
        return ds_remove(&self.dests, dest) != -2


cdef class DefaultMatcher(Matcher):
    """The nameless exchange: routing key = queue name, over a table of every
    queue in the vhost (kept by the vhost as queues come and go)."""
    cdef KeyMap table

    def __dealloc__(self):
        self.clear_all()

    cdef void clear_all(self) noexcept:
        cdef size_t i
        if self.table.slots is not NULL:
            for i in range(self.table.mask + 1):
                if self.table.slots[i].hash:
                    decref(<PyObject *>self.table.slots[i].value)
        km_free(&self.table)

    cdef int match(self, RouteOut out, const char *rk, Py_ssize_t rklen) except -1:
        cdef KMEntry *e = km_find(&self.table, hash_bytes(rk, rklen), 0, rk, rklen)
        if e is not NULL:
            out.add_queue(<PyObject *>e.value)
        return 0

    def add(self, bytes name, queue):
        cdef uint64_t h = hash_bytes(name, len(name))
        cdef KMEntry *e = km_find(&self.table, h, 0, name, len(name))
        cdef PyObject *old
        incref(<PyObject *>queue)
        if e is not NULL:
            old = <PyObject *>e.value
            e.value = <PyObject *>queue
            decref(old)
            return
        try:
            km_insert(&self.table, h, 0, name, len(name), <PyObject *>queue)
        except BaseException:
            decref(<PyObject *>queue)
            raise

    def remove(self, bytes name, queue):
        cdef KMEntry *e = km_find(&self.table, hash_bytes(name, len(name)), 0, name, len(name))
        cdef PyObject *old
        if e is NULL or e.value != <PyObject *>queue:
            return False
        old = <PyObject *>e.value
        km_remove(&self.table, e)
        decref(old)
        return True
