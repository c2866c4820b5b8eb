# Included by segment.pyx: one segment file (msgs.N), its ack file
# (acks.N) and its requeued file (requeued.N): the record layout, the
# mapping, disk reservations ahead of the writer, and the deleted and
# requeued positions waiting to be written.


cdef Py_ssize_t record_len(const char *p, Py_ssize_t avail) except -2:
    """Length of the record at p, 0 for the end-of-data mark (zero
    timestamp), -1 for a record that does not fit in avail (torn), or
    RECORD_MALFORMED for bytes that no writer produced."""
    cdef Py_ssize_t pos = 8
    cdef Py_ssize_t plen
    cdef uint64_t body
    cdef uint64_t ts
    if avail < 8:
        return 0 if avail == 0 else -1
    ts = le64(p)
    if ts == 0:
        return 0
    if ts >= MAX_TIMESTAMP:
        return RECORD_MALFORMED
    if pos + 1 > avail:
        return -1
    pos += 1 + <uint8_t>p[pos]
    if pos + 1 > avail:
        return -1
    pos += 1 + <uint8_t>p[pos]
    if pos > avail:
        return -1
    if pos + 2 <= avail and p[pos] & 0x03:
        return RECORD_MALFORMED     # property flags no encoder sets (see codec.props_convert)
    try:
        plen = props_convert(p + pos, avail - pos, NULL, True)
    except Exception:
        return -1
    pos += plen
    if pos + 8 > avail:
        return -1
    body = le64(p + pos)
    pos += 8
    if body > <uint64_t>(avail - pos):
        return -1
    return pos + <Py_ssize_t>body


cdef int record_parts(const char *rec, const char **ex, Py_ssize_t *exlen,
                      const char **rk, Py_ssize_t *rklen,
                      const char **props, Py_ssize_t *propslen,
                      const char **body, uint64_t *bodylen) except -1:
    cdef Py_ssize_t pos = 8
    exlen[0] = <uint8_t>rec[pos]
    ex[0] = rec + pos + 1
    pos += 1 + exlen[0]
    rklen[0] = <uint8_t>rec[pos]
    rk[0] = rec + pos + 1
    pos += 1 + rklen[0]
    props[0] = rec + pos
    # records were validated when written: the bound only guards the walk
    propslen[0] = props_convert(rec + pos, 1 << 30, NULL, True)
    pos += propslen[0]
    bodylen[0] = le64(rec + pos)
    body[0] = rec + pos + 8
    return 0


cdef enum:
    RECORD_MALFORMED = -3

# Timestamps are ms since 1970 (and negative ones would be stored as
# huge unsigned values): anything past year 2248 is not one we wrote.
cdef uint64_t MAX_TIMESTAMP = 1 << 43


# the kernel allocates blocks for a whole page on a write fault, so
# reservations end on page boundaries (4 KiB here, 16/64 KiB on some arm64)
cdef Py_ssize_t PAGE_SIZE = max(4096, os.sysconf("SC_PAGE_SIZE"))


cdef inline Py_ssize_t _alloc_step(Py_ssize_t cur, Py_ssize_t need, Py_ssize_t cap):
    """Where the next reservation of a segment of capacity cap should end,
    reserved now up to cur and needing at least need."""
    cdef Py_ssize_t step = cur
    cdef Py_ssize_t upto
    if step < ALLOC_MIN:
        step = ALLOC_MIN
    elif step > ALLOC_MAX:
        step = ALLOC_MAX
    upto = cur + step
    if upto < need:
        upto = need
    upto = (upto + PAGE_SIZE - 1) // PAGE_SIZE * PAGE_SIZE
    return upto if upto < cap else cap


cdef bint all_zero(const char *p, Py_ssize_t n):
    cdef Py_ssize_t i
    for i in range(n):
        if p[i] != 0:
            return False
    return True


cdef Py_ssize_t zero_tail(char *base, Py_ssize_t pos, Py_ssize_t end):
    """Zero [pos, end) of a writable map, touching only pages that are not
    zero already (after a power cut, pages past the committed data may hold
    anything; a preallocated tail is mostly holes). -> pages cleared."""
    cdef Py_ssize_t stop, cleared = 0
    while pos < end:
        stop = min((pos // 4096 + 1) * 4096, end)
        if not all_zero(base + pos, stop - pos):
            memset(base + pos, 0, stop - pos)
            cleared += 1
        pos = stop
    return cleared


def fsync_dir(path):
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


cdef int cmp_u32(const void *a, const void *b) noexcept nogil:
    cdef uint32_t x = (<const uint32_t *>a)[0]
    cdef uint32_t y = (<const uint32_t *>b)[0]
    return (x > y) - (x < y)


cdef inline Py_ssize_t _prefill_stretch(Py_ssize_t written):
    """Zeros ahead by as much as is written already (16 KiB to 256 KiB): a
    queue that gets few messages does not pay for zeros it will not use."""
    if written < 16384:
        return 16384
    return written if written < PREFILL_CHUNK else PREFILL_CHUNK


cdef inline Py_ssize_t _prefill_end(Py_ssize_t upto, Py_ssize_t ahead, Py_ssize_t cap):
    cdef Py_ssize_t end = upto + ahead
    end -= end % 4096
    return end if end < cap else cap


cdef inline Py_ssize_t _settle(Py_ssize_t reached, Py_ssize_t wanted, Py_ssize_t cap):
    """prepared after zeros reached `reached`: short of what was wanted, the
    writes failed (a full disk), and the faults do the rest."""
    return reached if reached >= wanted else cap


cdef class Segment:

    def __cinit__(self, uint32_t seg_id, str directory):
        self.id = seg_id
        self.path = os.path.join(directory, "msgs.%010d" % seg_id)
        self.ack_path = os.path.join(directory, "acks.%010d" % seg_id)
        self.fd = -1
        self.ack_fd = -1
        self.rq_fd = -1
        self.base = NULL
        self.zero_step = PREFILL_CHUNK

    def __dealloc__(self):
        self.take_prefill()
        self.unmap()
        if self.fd >= 0:
            c_close(self.fd)
        if self.ack_fd >= 0:
            c_close(self.ack_fd)
        if self.rq_fd >= 0:
            c_close(self.rq_fd)
        free(self.pending)
        free(self.deleted)
        free(self.rq_pending)
        free(self.redeliv)

    @property
    def requeued_path(self):
        """requeued.N beside msgs.N: made only for a segment with a requeued message."""
        return os.path.join(os.path.dirname(self.path), "requeued.%010d" % self.id)

    cdef int map(self) except -1:
        """Map the segment read-only (sealed) or read-write (write segment)."""
        cdef int fd
        cdef void *m
        cdef Py_ssize_t length
        if self.base is not NULL:
            return 0
        length = self.capacity if self.writable else self.size
        if length == 0:
            length = SEGMENT_HEADER
        fd = self.fd
        if fd < 0:
            fd = c_open(self.path.encode(), O_RDWR if self.writable else O_RDONLY)
            if fd < 0:
                PyErr_SetFromErrno(OSError)
                return -1
        m = mmap(NULL, length, PROT_READ | (PROT_WRITE if self.writable else 0), MAP_SHARED, fd, 0)
        if m == MAP_FAILED and errno == ENOMEM and _map_pressure is not None:
            # out of mappings (vm.max_map_count) or address space: let go
            # of every idle map in the broker, then try once more
            _map_pressure()
            m = mmap(NULL, length, PROT_READ | (PROT_WRITE if self.writable else 0), MAP_SHARED, fd, 0)
        if fd != self.fd:
            c_close(fd)
        if m == MAP_FAILED:
            PyErr_SetFromErrno(OSError)
            return -1
        self.base = <char *>m
        self.mapped_len = length
        return 0

    cdef int prefill(self, Py_ssize_t upto) except -1:
        """Write zeros (with pwrite) over the next stretch of the sparse
        file before records are copied into the map there. On ext4 a write
        *fault* on a hole costs a journalled inode update; with one queue
        they are rare, but with 1,000 queues written in turn nearly every
        fault pays it (~0.2 ms each here: 40 us per message). pwrite
        allocates a whole stretch in one call. Best effort: if it fails, the
        faults do the work as before.

        The writer calls this when it gets to prefill_at: the next stretch
        goes to the prefill thread (_prefill.pxi) once half of the last one
        is used, and the writer takes it (waiting, if it must) when it
        needs its bytes. Only what nothing prepared in time is written here."""
        cdef PrefillJob *job = <PrefillJob *>self.prefill_job
        cdef Py_ssize_t ahead, end
        cdef int fd
        if job is not NULL and (upto > self.prepared or prefill_done(job)):
            self.take_prefill()
        if upto > self.prepared:
            self.prefill_now(upto)
        self.prefill_at = self.capacity
        if self.prefill_job is not NULL:
            self.prefill_at = self.prepared
        elif self.prepared < self.capacity:
            ahead = _prefill_stretch(self.prepared)
            if self.prepared - upto > ahead // 2:
                self.prefill_at = self.prepared - ahead // 2
                return 0
            end = _prefill_end(self.prepared, ahead, self.capacity)
            fd = c_open(self.path.encode(), O_WRONLY)
            if fd < 0:
                self.prepared = self.prefill_at = self.capacity
                return 0
            self.prefill_job = prefill_submit(fd, self.prepared, end, self.zero_step)
            if self.prefill_job is NULL:        # no thread: now, as before
                self.prepared = _settle(write_zeros(fd, self.prepared, end, self.zero_step), end, self.capacity)
                c_close(fd)
            self.prefill_at = self.prepared
        return 0

    cdef int prefill_now(self, Py_ssize_t upto) except -1:
        """Zeros over [prepared, upto + a stretch), on the loop."""
        cdef Py_ssize_t end = _prefill_end(upto, _prefill_stretch(upto), self.capacity)
        cdef int fd
        if end <= self.prepared:
            return 0
        fd = c_open(self.path.encode(), O_WRONLY)
        if fd < 0:
            self.prepared = self.capacity
            return 0
        self.prepared = _settle(write_zeros(fd, self.prepared, end, self.zero_step), upto, self.capacity)
        c_close(fd)
        return 0

    cdef void take_prefill(self):
        """The stretch on its way is the writer's now: written by the thread
        (waited for if it is writing it), or taken back if it had not
        started (prepared stays; whoever needs the bytes writes them)."""
        cdef PrefillJob *job = <PrefillJob *>self.prefill_job
        cdef bint done
        if job is NULL:
            return
        self.prefill_job = NULL
        with nogil:
            done = prefill_finish(job)
        if done:
            self.prepared = _settle(job.reached, job.end, self.capacity)
            free(job)

    cdef void unmap(self):
        if self.base is not NULL:
            munmap(self.base, self.mapped_len)
            self.base = NULL
            self.mapped_len = 0

    cdef int add_pending(self, uint32_t pos) except -1:
        cdef uint32_t *n
        if self.n_pending == self.cap_pending:
            self.cap_pending = self.cap_pending * 2 if self.cap_pending else 64
            n = <uint32_t *>realloc(self.pending, self.cap_pending * sizeof(uint32_t))
            if n is NULL:
                raise MemoryError()
            self.pending = n
        self.pending[self.n_pending] = pos
        self.n_pending += 1
        return 0

    cdef int flush_pending(self) except -1:
        """Append the pending positions to acks.N. -> 0, or 1 when the disk
        is full: what was not written stays pending for the next flush."""
        cdef Py_ssize_t n = self.n_pending * sizeof(uint32_t)
        cdef Py_ssize_t done = 0
        cdef Py_ssize_t w, torn
        cdef int err
        if self.n_pending == 0:
            return 0
        if self.ack_fd < 0:
            self.ack_fd = c_open(self.ack_path.encode(), O_WRONLY | O_CREAT | O_APPEND, 0o644)
            if self.ack_fd < 0:
                if errno == ENOSPC or errno == EDQUOT:
                    return 1
                PyErr_SetFromErrno(OSError)
                return -1
        while done < n:
            w = c_write(self.ack_fd, (<char *>self.pending) + done, n - done)
            if w < 0:
                err = errno
                if err != ENOSPC and err != EDQUOT:
                    PyErr_SetFromErrno(OSError)
                    return -1
                # keep whole entries only: a torn u32 would shift every
                # position appended after it
                torn = done % sizeof(uint32_t)
                if torn:
                    size = os.fstat(self.ack_fd).st_size
                    os.ftruncate(self.ack_fd, size - torn)
                    done -= torn
                self.n_pending -= done // sizeof(uint32_t)
                memmove(self.pending, self.pending + done // sizeof(uint32_t),
                        self.n_pending * sizeof(uint32_t))
                return 1
            done += w
        self.n_pending = 0
        return 0

    cdef bint is_deleted_at_boot(self, uint32_t pos):
        cdef Py_ssize_t lo = 0, hi = self.n_deleted, mid
        while lo < hi:
            mid = (lo + hi) >> 1
            if self.deleted[mid] < pos:
                lo = mid + 1
            else:
                hi = mid
        return lo < self.n_deleted and self.deleted[lo] == pos

    cdef int add_requeue(self, uint32_t pos, uint32_t deliveries) except -1:
        cdef uint32_t *n
        if self.n_rq_pending == self.cap_rq_pending:
            self.cap_rq_pending = self.cap_rq_pending * 2 if self.cap_rq_pending else 16
            n = <uint32_t *>realloc(self.rq_pending, self.cap_rq_pending * 2 * sizeof(uint32_t))
            if n is NULL:
                raise MemoryError()
            self.rq_pending = n
        self.rq_pending[2 * self.n_rq_pending] = pos
        self.rq_pending[2 * self.n_rq_pending + 1] = deliveries
        self.n_rq_pending += 1
        return 0

    cdef int flush_requeues(self) except -1:
        """Append the pending (position, deliveries) pairs to requeued.N.
        -> 0, or 1 when the disk is full: they stay pending. A torn pair is
        cut, as a torn ack entry is, so pairs never shift."""
        cdef Py_ssize_t n = self.n_rq_pending * 2 * sizeof(uint32_t)
        cdef Py_ssize_t w
        cdef int err
        if self.n_rq_pending == 0:
            return 0
        if self.rq_fd < 0:
            self.rq_fd = c_open(self.requeued_path.encode(), O_WRONLY | O_CREAT | O_APPEND, 0o644)
            if self.rq_fd < 0:
                if errno == ENOSPC or errno == EDQUOT:
                    return 1
                PyErr_SetFromErrno(OSError)
                return -1
            self.rq_file = True
        size = os.fstat(self.rq_fd).st_size
        w = c_write(self.rq_fd, <char *>self.rq_pending, n)
        if w != n:
            err = errno
            os.ftruncate(self.rq_fd, size)      # all or nothing: a few pairs a flush
            if w < 0 and err != ENOSPC and err != EDQUOT:
                PyErr_SetFromErrno(OSError)
                return -1
            return 1
        self.n_rq_pending = 0
        return 0

    cdef bint redelivered_at_boot(self, uint32_t pos):
        """Was the message at pos (the reader's next, positions rising) requeued
        before the restart? The reader walks the pairs once."""
        while self.redeliv_at < self.n_redeliv and self.redeliv[2 * self.redeliv_at] < pos:
            self.redeliv_at += 1
        return self.redeliv_at < self.n_redeliv and self.redeliv[2 * self.redeliv_at] == pos

    def close_files(self):
        self.take_prefill()
        self.unmap()
        if self.fd >= 0:
            c_close(self.fd)
            self.fd = -1
        if self.ack_fd >= 0:
            c_close(self.ack_fd)
            self.ack_fd = -1
        if self.rq_fd >= 0:
            c_close(self.rq_fd)
            self.rq_fd = -1

    @property
    def mapped(self):
        return self.base is not NULL


cdef inline int sp_cmp(SP a, SP b) noexcept nogil:
    if a.seg != b.seg:
        return -1 if a.seg < b.seg else 1
    if a.pos != b.pos:
        return -1 if a.pos < b.pos else 1
    return 0


def name_digest(str name):
    """A vhost's or a queue's directory name: LavinMQ's layout, the sha1 of its name."""
    return hashlib.sha1(name.encode("utf-8", "surrogateescape")).hexdigest()


def entity_dir(str parent, str name):
    return os.path.join(parent, name_digest(name))
