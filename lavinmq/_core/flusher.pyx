# cython: language_level=3
# The group commit's disk work (lavinmq/sync.py) in threads that never take
# the GIL. A round is what one flush makes durable: the commit records of
# the stores it covers (lavinmq/commit.py's format: checksum the bytes the
# commit vouches for, pwrite the next slot), then an fdatasync per written
# file and an fsync per changed directory, side by side in the workers (a
# journal folds concurrent ones into one commit, though each still sends the
# disk a cache flush), or one syncfs(2) of the data directory's filesystem
# when a round names many files.
#
# Settled commits. Two fdatasyncs side by side (segment, commit file) each
# send the disk a cache flush, and the disk runs them one after the other:
# ~300 us on this machine against ~150 us for one (a publisher with 1,000
# unconfirmed and a consumer, LavinMQ's lavinmqperf: +7-13% without). So a
# commit whose slot's blocks, and their allocation, are already on the disk
# (a flush that fdatasynced the commit file after writing that slot
# completed: the store marks the job `settled`) is only written: sync_file_range(2) writes its
# page to the disk and waits for the write to complete, then the round's
# fdatasyncs run, and the cache flush each of them sends covers every
# write completed before it (the block layer's REQ_PREFLUSH), the slot's
# too. Nothing of the commit file's metadata changes by an overwrite, so
# nothing else is needed. Only where that holds: ext4, with or without a
# journal, sends that flush on every fdatasync (itself, or the journal
# commit it waits for, whose flush goes out after the call began;
# fdatasync_flushes_all). When the round has nothing else to fdatasync
# (its segments are gone), the commit file gets its own.
#
# Why not a Python thread pool: each hop between threads there (the loop ->
# an executor thread -> the fsync threads -> call_soon_threadsafe -> the
# loop) waits for the GIL, which the loop holds while it parses a read
# batch, so a confirm waited for the disk *and* for up to a switch interval
# per hop. Here a round is plain C data, the workers only lock a mutex, and
# the loop learns of a finished round from an eventfd it watches like a
# socket. Rounds finish in the order they were submitted (take_done hands
# them back in that order), so confirms go out in order even when rounds
# overlap.
from libc.stdint cimport uint8_t, uint16_t, uint32_t, uint64_t
from libc.stdlib cimport malloc, calloc, free
from libc.string cimport memcpy, memset, strlen
from libc.errno cimport errno, ENOENT, EINTR, EAGAIN
from libc.stdio cimport snprintf
from posix.fcntl cimport open as c_open, O_RDONLY, O_WRONLY, O_CREAT
from posix.unistd cimport close as c_close, fsync, fdatasync, pread, pwrite, read as c_read, write as c_write
from lavinmq._core.pthreads cimport (
    pthread_t, pthread_mutex_t, pthread_cond_t, pthread_create, pthread_detach, pthread_mutex_init,
    pthread_mutex_lock, pthread_mutex_unlock, pthread_cond_init, pthread_cond_wait, pthread_cond_signal,
    pthread_cond_broadcast)

cdef extern from "<fcntl.h>" nogil:
    enum: O_DIRECTORY
    enum: O_CLOEXEC
    enum: O_PATH
    int openat(int dirfd, const char *path, int flags, ...)

cdef extern from "<sys/eventfd.h>" nogil:
    int eventfd(unsigned int initval, int flags)
    enum: EFD_NONBLOCK
    enum: EFD_CLOEXEC

cdef extern from "<unistd.h>" nogil:
    int syncfs(int fd)

cdef extern from "<fcntl.h>" nogil:
    int sync_file_range(int fd, long long offset, long long nbytes, unsigned int flags)
    enum: SYNC_FILE_RANGE_WAIT_BEFORE
    enum: SYNC_FILE_RANGE_WRITE
    enum: SYNC_FILE_RANGE_WAIT_AFTER

cdef extern from "<sys/vfs.h>" nogil:
    struct statfs_t "statfs":
        long f_type
    int c_statfs "statfs"(const char *path, statfs_t *buf)

cdef extern from "<sys/stat.h>" nogil:
    enum: S_IRUSR
    enum: S_IWUSR
    enum: S_IRGRP
    enum: S_IROTH


# -- the commit record's layout (lavinmq/commit.py documents it) -----------

cdef enum:
    SLOT_SPACING = 65536
    SLOTS = 4                   # lavinmq/commit.py's SLOTS
    HEADER_SIZE = 40            # "<4sHHQ16sII"
    ENTRY_SIZE = 8              # end u32, crc u32
    MAX_ENTRIES = 8186          # (SLOT_SPACING - HEADER_SIZE - 4) // ENTRY_SIZE
    SEGMENT_HEADER = 4
    COMMIT_VERSION = 1
    WORKERS = 4                 # side-by-side fsyncs: a round's files, two rounds at once
    READ_CHUNK = 1 << 20


# CRC-32 (IEEE 802.3, reflected 0xEDB88320), the checksum zlib.crc32
# computes, slice-by-8: recovery checks these with zlib.crc32.
cdef uint32_t _crc_table[8][256]


cdef void _crc_init() noexcept nogil:
    cdef uint32_t c
    cdef int i, j, k
    for i in range(256):
        c = <uint32_t>i
        for j in range(8):
            c = (c >> 1) ^ (<uint32_t>0xEDB88320 if c & 1 else <uint32_t>0)
        _crc_table[0][i] = c
    for i in range(256):
        c = _crc_table[0][i]
        for k in range(1, 8):
            c = _crc_table[0][c & 0xff] ^ (c >> 8)
            _crc_table[k][i] = c


cdef uint32_t crc32_update(uint32_t crc, const uint8_t *p, size_t n) noexcept nogil:
    """zlib.crc32(data, crc): crc is the checksum of what came before."""
    cdef uint32_t c = ~crc
    cdef uint32_t lo, hi
    while n and (<size_t>p & 7):
        c = _crc_table[0][(c ^ p[0]) & 0xff] ^ (c >> 8)
        p += 1
        n -= 1
    while n >= 8:
        lo = (p[0] | (<uint32_t>p[1] << 8) | (<uint32_t>p[2] << 16) | (<uint32_t>p[3] << 24)) ^ c
        hi = p[4] | (<uint32_t>p[5] << 8) | (<uint32_t>p[6] << 16) | (<uint32_t>p[7] << 24)
        c = (_crc_table[7][lo & 0xff] ^ _crc_table[6][(lo >> 8) & 0xff]
             ^ _crc_table[5][(lo >> 16) & 0xff] ^ _crc_table[4][lo >> 24]
             ^ _crc_table[3][hi & 0xff] ^ _crc_table[2][(hi >> 8) & 0xff]
             ^ _crc_table[1][(hi >> 16) & 0xff] ^ _crc_table[0][hi >> 24])
        p += 8
        n -= 8
    while n:
        c = _crc_table[0][(c ^ p[0]) & 0xff] ^ (c >> 8)
        p += 1
        n -= 1
    return ~c


_crc_init()


def crc32(const uint8_t[:] data, uint32_t value=0):
    """For tests: the C checksum next to zlib.crc32."""
    if data.shape[0] == 0:
        return value
    return crc32_update(value, &data[0], data.shape[0])


# -- rounds ----------------------------------------------------------------

cdef struct Commit:
    int dirfd               # the queue's directory when the round was built (_open_in)
    char *dir               # its path, only where no descriptor could be had (DIR_BY_PATH)
    uint64_t seq
    uint32_t first          # segment id of ends[0]
    uint32_t start          # where this commit begins in the first segment
    int n
    uint32_t *ends          # per segment first + k: its end, 0 = gone
    bint settled            # its slot's blocks are on the disk already: written, not synced (below)


cdef struct Owner:
    int efd                 # the loop watches it; a worker writes when a round is done
    int inflight            # rounds submitted and not yet handed back
    bint dead               # its Flusher is gone: the last round frees it
    Round *head             # submission order
    Round *tail


cdef struct Round:
    uint64_t id
    Owner *owner
    int nfiles
    char **files
    uint8_t *is_dir
    int ncommits
    Commit *commits
    char *anchor            # a path on the data directory's filesystem, for syncfs
    uint8_t boot[16]
    bint use_syncfs
    int state               # 0 queued, 1 committing, 2 syncing files, 3 done
    int next_file           # next file a worker takes
    int pending             # files taken and not finished
    int synced              # files fsynced that were there (each flushed the disk's cache)
    int nsettled            # commits written without an fdatasync of their own
    int err                 # first errno, 0 = durable
    Round *next


cdef pthread_mutex_t _lock
cdef pthread_cond_t _work
cdef bint _started = False
cdef long _gate = -1        # tests: rounds the workers may still start (-1: any number)
cdef Round *_queue_head = NULL      # every owner's rounds, in submission order
cdef Round *_queue_tail = NULL
pthread_mutex_init(&_lock, NULL)
pthread_cond_init(&_work, NULL)


cdef void _set_err(Round *r, int err) noexcept nogil:
    if err and not r.err:
        r.err = err


cdef int _fsync_path(const char *path, bint directory, int *synced) noexcept nogil:
    """-> 0 or errno; a file gone since (a segment dropped when all its
    messages were acked, a queue deleted) has nothing left to keep.
    synced[0] counts the files that were there and were synced."""
    cdef int fd = c_open(path, O_RDONLY | O_CLOEXEC | (O_DIRECTORY if directory else 0))
    if fd < 0:
        return 0 if errno == ENOENT else errno
    return _fsync_fd(fd, directory, synced)


cdef int _fsync_fd(int fd, bint directory, int *synced) noexcept nogil:
    """_fsync_path's sync of an open descriptor, which it closes."""
    cdef int rc, e
    if directory:
        rc = fsync(fd)
    else:
        rc = fdatasync(fd)
    e = errno if rc != 0 else 0
    c_close(fd)
    if not e:
        synced[0] += 1
    return e


cdef int _sync_range(const char *path, unsigned int flags) noexcept nogil:
    """sync_file_range(2) over a whole file: -> 0 or errno (gone: 0)."""
    cdef int fd = c_open(path, O_RDONLY | O_CLOEXEC)
    if fd < 0:
        return 0 if errno == ENOENT else errno
    return _sync_range_fd(fd, flags)


cdef int _sync_range_fd(int fd, unsigned int flags) noexcept nogil:
    """_sync_range of an open descriptor, which it closes."""
    cdef int e = 0
    if sync_file_range(fd, 0, 0, flags) != 0:
        e = errno
    c_close(fd)
    return e


cdef uint64_t _settled_written = 0     # settled slots only written (tests: settled_stats)
cdef uint64_t _settled_alone = 0       # settled slots fdatasynced on their own


cdef enum:
    DIR_GONE = -1           # the directory was gone when the round was built: nothing to write
    DIR_BY_PATH = -2        # no descriptor (past the budget, or out of them): by path, as before
    DIR_FD_BUDGET = 256     # directory descriptors held by rounds in flight, at most

# The rounds' directory descriptors, counted across threads: a round is
# freed on the loop or, its Flusher gone, in a worker. A round that names
# thousands of queues (a fan-out) must not take as many descriptors, which
# the listener counts on for connections: past the budget it goes by path.
cdef extern from *:
    """
    static long lmq_dirfds = 0;
    static inline long lmq_dirfds_add(long n) { return __atomic_add_fetch(&lmq_dirfds, n, __ATOMIC_RELAXED); }
    """
    long lmq_dirfds_add(long n) nogil


cdef int _open_in(const Commit *c, const char *name, int flags) noexcept nogil:
    """A file of the directory the store had when the round was built. By
    its descriptor, not its path: a queue deleted and declared again gets a
    directory of the same name, and a round of the old store still in
    flight must not write its slot into the new queue's commit file (a
    deleted directory takes no new files: ENOENT). Out of descriptors the
    round goes by path: the commit must be written, the race is rare."""
    cdef char path[4096]
    if c.dirfd >= 0:
        return openat(c.dirfd, name, flags | O_CLOEXEC, S_IRUSR | S_IWUSR | S_IRGRP | S_IROTH)
    snprintf(path, sizeof(path), "%s/%s", c.dir, name)
    return c_open(path, flags | O_CLOEXEC, S_IRUSR | S_IWUSR | S_IRGRP | S_IROTH)


cdef int _settled_commits(Round *r, bint wait) noexcept nogil:
    """The settled commits' slots: written to the disk and waited for
    (wait), or fdatasynced when nothing else in the round flushed the
    disk's cache. -> 0 or errno."""
    global _settled_written, _settled_alone
    cdef int i, e, fd, err = 0, junk = 0, n = 0
    for i in range(r.ncommits):
        if not r.commits[i].settled or r.commits[i].dirfd == DIR_GONE:
            continue
        fd = _open_in(&r.commits[i], "commit", O_RDONLY)
        if fd < 0:
            e = 0 if errno == ENOENT else errno
        elif wait:
            e = _sync_range_fd(fd, SYNC_FILE_RANGE_WAIT_BEFORE | SYNC_FILE_RANGE_WRITE | SYNC_FILE_RANGE_WAIT_AFTER)
        else:
            e = _fsync_fd(fd, False, &junk)
        n += 1
        if e and not err:
            err = e
    pthread_mutex_lock(&_lock)
    if wait:
        _settled_written += n
    else:
        _settled_alone += n
    pthread_mutex_unlock(&_lock)
    return err


def dir_fds():
    """Tests: directory descriptors held by rounds now."""
    return lmq_dirfds_add(0)


def settled_stats():
    """Tests: (settled slots only written, settled slots fdatasynced on
    their own) since the process started."""
    pthread_mutex_lock(&_lock)
    out = (_settled_written, _settled_alone)
    pthread_mutex_unlock(&_lock)
    return out


cdef int _range_crc(const Commit *c, const char *name, uint64_t start, uint64_t end, uint32_t *out,
                    uint8_t *buf) noexcept nogil:
    """crc32 of bytes [start, end) of a file: 1 done, 0 gone or short."""
    cdef int fd = _open_in(c, name, O_RDONLY)
    cdef Py_ssize_t got
    cdef uint64_t pos = start, want
    cdef uint32_t crc = 0
    if fd < 0:
        return 0
    while pos < end:
        want = end - pos
        if want > READ_CHUNK:
            want = READ_CHUNK
        got = pread(fd, buf, want, pos)
        if got < 0 and errno == EINTR:
            continue
        if got <= 0:
            c_close(fd)
            return 0
        crc = crc32_update(crc, buf, got)
        pos += got
    c_close(fd)
    out[0] = crc
    return 1


cdef inline void _le16(uint8_t *p, uint16_t v) noexcept nogil:
    p[0] = v & 0xff
    p[1] = v >> 8


cdef inline void _le32(uint8_t *p, uint32_t v) noexcept nogil:
    cdef int i
    for i in range(4):
        p[i] = (v >> (8 * i)) & 0xff


cdef inline void _le64(uint8_t *p, uint64_t v) noexcept nogil:
    cdef int i
    for i in range(8):
        p[i] = (v >> (8 * i)) & 0xff


cdef int _write_commit(Commit *c, const uint8_t *boot, uint8_t *buf) noexcept nogil:
    """Checksum what the commit covers and write its slot (not synced: the
    round fdatasyncs the file with the segments). -> 0 or errno."""
    cdef uint8_t slot[SLOT_SPACING]
    cdef char name[32]
    cdef Py_ssize_t pos
    cdef int k, fd, e
    cdef uint32_t crc, cut_back
    cdef Py_ssize_t wrote
    if c.dirfd == DIR_GONE:
        return 0        # the queue was deleted before the round was built
    memcpy(slot, b"LMQC", 4)
    _le16(slot + 4, COMMIT_VERSION)
    _le16(slot + 6, <uint16_t>c.n)
    _le64(slot + 8, c.seq)
    memcpy(slot + 16, boot, 16)
    _le32(slot + 32, c.first)
    _le32(slot + 36, c.start)
    pos = HEADER_SIZE
    for k in range(c.n):
        crc = 0
        if c.ends[k]:
            # from where this commit began in its first segment, else from
            # byte 0 (the segment's header too), as commit.crc_from says
            cut_back = c.start if k == 0 else SEGMENT_HEADER
            snprintf(name, sizeof(name), "msgs.%010u", c.first + k)
            if _range_crc(c, name, 0 if cut_back == SEGMENT_HEADER else cut_back, c.ends[k], &crc, buf):
                _le32(slot + pos, c.ends[k])
                _le32(slot + pos + 4, crc)
            else:
                _le32(slot + pos, 0)
                _le32(slot + pos + 4, 0)
        else:
            _le32(slot + pos, 0)
            _le32(slot + pos + 4, 0)
        pos += ENTRY_SIZE
    _le32(slot + pos, crc32_update(0, slot, pos))
    pos += 4
    fd = _open_in(c, "commit", O_WRONLY | O_CREAT)
    if fd < 0:
        e = errno
        return 0 if e == ENOENT else e      # the queue was deleted meanwhile
    wrote = pwrite(fd, slot, pos, (c.seq % SLOTS) * SLOT_SPACING)
    e = errno if wrote != pos else 0
    if wrote >= 0 and wrote != pos:
        e = 5       # EIO: a short write of 1 KiB at most means something is wrong
    if not e and c.settled:
        sync_file_range(fd, 0, 0, SYNC_FILE_RANGE_WRITE)    # on its way while the rest is written
    c_close(fd)
    return e


cdef int _commit_and_syncfs(Round *r, uint8_t *buf) noexcept nogil:
    """A round's first step: its commit records, then (many files) one
    syncfs; settled commits' slots written to the disk (the module's doc)."""
    cdef int i, fd, err = 0, e
    for i in range(r.ncommits):
        e = _write_commit(&r.commits[i], r.boot, buf)
        if e and not err:
            err = e
    if r.nsettled and not r.use_syncfs and not err:
        # the other files' writes start now, beside the slots' (each
        # fdatasync below then only waits for them and flushes the cache)
        for i in range(r.nfiles):
            if not r.is_dir[i]:
                _sync_range(r.files[i], SYNC_FILE_RANGE_WRITE)
        err = _settled_commits(r, r.nfiles > 0)
    if r.use_syncfs and not err:
        fd = c_open(r.anchor, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
        if fd < 0:
            err = errno
        else:
            if syncfs(fd) != 0:
                err = errno
            c_close(fd)
    return err


cdef void _free_round(Round *r) noexcept nogil:
    cdef int i
    for i in range(r.nfiles):
        free(r.files[i])
    free(r.files)
    free(r.is_dir)
    for i in range(r.ncommits):
        free(r.commits[i].ends)
        if r.commits[i].dirfd >= 0:
            c_close(r.commits[i].dirfd)
            lmq_dirfds_add(-1)
        free(r.commits[i].dir)
    free(r.commits)
    free(r.anchor)
    free(r)


cdef void _dequeue(Round *r) noexcept nogil:
    """Under the lock: r leaves the work queue."""
    global _queue_head, _queue_tail
    cdef Round *p
    if _queue_head == r:
        _queue_head = r.next
        if _queue_head is NULL:
            _queue_tail = NULL
    else:
        p = _queue_head
        while p is not NULL and p.next is not r:
            p = p.next
        if p is not NULL:
            p.next = r.next
            if _queue_tail == r:
                _queue_tail = p
    r.next = NULL


cdef void _finish(Round *r) noexcept nogil:
    """Under the lock: r is durable (or failed). Off the work queue, onto
    its owner's finished list, and the owner's loop woken."""
    cdef uint64_t one = 1
    cdef Owner *o = r.owner
    r.state = 3
    _dequeue(r)
    if o.dead:
        # its Flusher is gone: nobody takes it
        o.inflight -= 1
        _free_round(r)
        if o.inflight == 0:
            free(o)
        return
    _owner_done(r)
    c_write(o.efd, &one, 8)


cdef void _owner_done(Round *r) noexcept nogil:
    """Insert r into its owner's finished list, in id order."""
    cdef Owner *o = r.owner
    cdef Round *p
    if o.head is NULL or o.head.id > r.id:
        r.next = o.head
        o.head = r
        if o.tail is NULL:
            o.tail = r
        return
    p = o.head
    while p.next is not NULL and p.next.id < r.id:
        p = p.next
    r.next = p.next
    p.next = r
    if r.next is NULL:
        o.tail = r


cdef Round *_next_task(int *file_idx) noexcept nogil:
    """Under the lock: a round to commit (file_idx -1) or a file of a round
    to sync; NULL if nothing is ready."""
    global _gate
    cdef Round *r = _queue_head
    while r is not NULL:
        if r.state == 0:
            if _gate == 0:
                return NULL     # held (tests): later rounds wait behind this one
            if _gate > 0:
                _gate -= 1
            r.state = 1
            file_idx[0] = -1
            return r
        if r.state == 2 and r.next_file < r.nfiles:
            file_idx[0] = r.next_file
            r.next_file += 1
            r.pending += 1
            return r
        r = r.next
    return NULL


cdef void *_worker(void *arg) noexcept nogil:
    cdef uint8_t *buf = <uint8_t *>malloc(READ_CHUNK)
    cdef Round *r
    cdef int idx, e, synced
    pthread_mutex_lock(&_lock)
    while True:
        r = _next_task(&idx)
        if r is NULL:
            pthread_cond_wait(&_work, &_lock)
            continue
        pthread_mutex_unlock(&_lock)
        if idx < 0:
            e = _commit_and_syncfs(r, buf)
            pthread_mutex_lock(&_lock)
            _set_err(r, e)
            if r.use_syncfs or r.nfiles == 0 or r.err:
                _finish(r)
            else:
                r.state = 2
                # its files side by side: this thread takes one, wake one
                # more for each of the others
                for e in range(1, r.nfiles if r.nfiles < WORKERS else WORKERS):
                    pthread_cond_signal(&_work)
        else:
            synced = 0
            e = _fsync_path(r.files[idx], r.is_dir[idx], &synced)
            pthread_mutex_lock(&_lock)
            _set_err(r, e)
            r.synced += synced
            r.pending -= 1
            if r.pending == 0 and r.next_file >= r.nfiles:
                if r.nsettled and not r.synced and not r.err:
                    # every file was gone: nothing flushed the slots
                    pthread_mutex_unlock(&_lock)
                    e = _settled_commits(r, False)
                    pthread_mutex_lock(&_lock)
                    _set_err(r, e)
                _finish(r)
    return NULL


cdef int _start_workers() except -1:
    global _started
    cdef pthread_t t
    cdef int i
    if _started:
        return 0
    for i in range(WORKERS):
        if pthread_create(&t, NULL, _worker, NULL) != 0:
            raise OSError("could not start the flush threads")
        pthread_detach(t)
    _started = True
    return 0


cdef char *_cstr(object path) except NULL:
    cdef bytes b = path if isinstance(path, bytes) else path.encode("utf-8", "surrogateescape")
    cdef Py_ssize_t n = len(b)
    cdef char *out = <char *>malloc(n + 1)
    if out is NULL:
        raise MemoryError()
    memcpy(out, <const char *>b, n)
    out[n] = 0
    return out


cdef Round *_build(uint64_t rid, Owner *owner, files, dirs, jobs, anchor, bytes boot, int syncfs_above,
                   bint settle) except NULL:
    """A round from the syncer's lists (built on the loop, per flush)."""
    cdef Round *r = <Round *>calloc(1, sizeof(Round))
    cdef Commit *c
    cdef int i, k
    if r is NULL:
        raise MemoryError()
    try:
        r.id = rid
        r.owner = owner
        r.anchor = _cstr(anchor)
        memcpy(r.boot, <const char *>boot, 16)
        r.commits = <Commit *>calloc(max(len(jobs), 1), sizeof(Commit))
        if r.commits is NULL:
            raise MemoryError()
        r.ncommits = len(jobs)
        for i in range(r.ncommits):
            r.commits[i].dirfd = DIR_GONE
        unsettled = []
        for i, job in enumerate(jobs):
            directory, seq, first, start, ends = job[:5]
            if len(ends) > MAX_ENTRIES:
                raise OSError(f"{directory}: {len(ends)} segments in one commit, at most {MAX_ENTRIES}")
            c = &r.commits[i]
            # opened here, on the loop, while the store is the directory's
            # (_open_in): one open per queue per flush
            d = directory.encode("utf-8", "surrogateescape")
            if lmq_dirfds_add(1) <= DIR_FD_BUDGET:
                c.dirfd = c_open(<bytes>d, O_PATH | O_DIRECTORY | O_CLOEXEC)
                if c.dirfd < 0:
                    e = errno
                    lmq_dirfds_add(-1)
                    c.dirfd = DIR_GONE if e == ENOENT else DIR_BY_PATH
            else:
                lmq_dirfds_add(-1)
                c.dirfd = DIR_BY_PATH
            if c.dirfd == DIR_BY_PATH:
                c.dir = _cstr(d)
            c.seq = seq
            c.first = first
            c.start = start
            c.ends = <uint32_t *>calloc(max(len(ends), 1), sizeof(uint32_t))
            if c.ends is NULL:
                raise MemoryError()
            c.n = len(ends)
            for k, (seg_id, end) in enumerate(ends):
                if seg_id != first + k:
                    raise ValueError("a commit's segments must follow one another")
                c.ends[k] = end
            c.settled = settle and len(job) > 5 and job[5]
            if c.settled:
                r.nsettled += 1
            else:
                unsettled.append(directory + "/commit")
        all_files = list(files) + unsettled
        r.use_syncfs = len(all_files) + len(dirs) > syncfs_above
        if not r.use_syncfs:
            r.nfiles = len(all_files) + len(dirs)
            r.files = <char **>calloc(max(r.nfiles, 1), sizeof(char *))
            r.is_dir = <uint8_t *>calloc(max(r.nfiles, 1), 1)
            if r.files is NULL or r.is_dir is NULL:
                raise MemoryError()
            for i, path in enumerate(all_files):
                r.files[i] = _cstr(path)
            for i, path in enumerate(dirs):
                r.files[len(all_files) + i] = _cstr(path)
                r.is_dir[len(all_files) + i] = 1
    except BaseException:
        _free_round(r)
        raise
    return r


cdef class Flusher:
    """One syncer's rounds. `fileno()` becomes readable when a round is
    done; `take_done()` then hands back the finished rounds, in the order
    they were submitted, as (round id, errno)."""
    cdef Owner *owner
    cdef uint64_t last_id
    cdef uint64_t taken         # the last round handed back
    cdef public int syncfs_above
    cdef public bint settle     # settled commits go without an fdatasync of their own

    def __cinit__(self, int syncfs_above=64, bint settle=False):
        self.owner = <Owner *>calloc(1, sizeof(Owner))
        if self.owner is NULL:
            raise MemoryError()
        self.owner.efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC)
        if self.owner.efd < 0:
            free(self.owner)
            self.owner = NULL
            raise OSError(errno, "eventfd")
        self.syncfs_above = syncfs_above
        self.settle = settle

    def __dealloc__(self):
        cdef Round *r
        cdef Round *n
        if self.owner is NULL:
            return
        pthread_mutex_lock(&_lock)
        # what finished and was never taken goes now; what still runs frees
        # itself (and the owner) when it finishes
        r = self.owner.head
        while r is not NULL:
            n = r.next
            self.owner.inflight -= 1
            _free_round(r)
            r = n
        self.owner.head = self.owner.tail = NULL
        c_close(self.owner.efd)
        self.owner.efd = -1
        if self.owner.inflight == 0:
            free(self.owner)
        else:
            self.owner.dead = True
        pthread_mutex_unlock(&_lock)

    def fileno(self):
        return self.owner.efd

    @property
    def inflight(self):
        return self.owner.inflight

    def submit(self, files, dirs, jobs, anchor, bytes boot):
        """Queue a round: jobs are commit.commit's (directory, seq, first
        segment, start, [(segment id, end)]). -> its id."""
        cdef Round *r
        _start_workers()
        self.last_id += 1
        r = _build(self.last_id, self.owner, files, dirs, jobs, anchor, boot, self.syncfs_above, self.settle)
        with nogil:
            pthread_mutex_lock(&_lock)
            _enqueue(r)
            self.owner.inflight += 1
            pthread_cond_signal(&_work)
            pthread_mutex_unlock(&_lock)
        return self.last_id

    def take_done(self):
        """-> [(round id, errno)]: the rounds done since the last call whose
        predecessors are all done too, in submission order."""
        cdef uint64_t junk
        cdef Round *r
        cdef list out = []
        c_read(self.owner.efd, &junk, 8)       # non-blocking: EAGAIN is fine
        pthread_mutex_lock(&_lock)
        r = self.owner.head
        while r is not NULL and r.id == self.taken + 1:
            self.owner.head = r.next
            if self.owner.head is NULL:
                self.owner.tail = NULL
            out.append((r.id, r.err))
            self.taken = r.id
            self.owner.inflight -= 1
            _free_round(r)
            r = self.owner.head
        pthread_mutex_unlock(&_lock)
        return out



cdef void _enqueue(Round *r) noexcept nogil:
    global _queue_head, _queue_tail
    r.next = NULL
    if _queue_tail is NULL:
        _queue_head = _queue_tail = r
    else:
        _queue_tail.next = r
        _queue_tail = r


def flush_now(files, dirs, jobs, anchor, bytes boot, int syncfs_above=64, bint settle=False):
    """One round in the calling thread, blocking (tools, tests, shutdown
    paths without a loop): the same steps a worker runs. Raises OSError."""
    cdef Round *r = _build(0, NULL, files, dirs, jobs, anchor, boot, syncfs_above, settle)
    cdef uint8_t *buf = <uint8_t *>malloc(READ_CHUNK)
    cdef int err = 0, e, i
    if buf is NULL:
        _free_round(r)
        raise MemoryError()
    with nogil:
        err = _commit_and_syncfs(r, buf)
        if not err and not r.use_syncfs:
            for i in range(r.nfiles):
                e = _fsync_path(r.files[i], r.is_dir[i], &r.synced)
                if e and not err:
                    err = e
            if not err and r.nsettled and r.nfiles and not r.synced:
                err = _settled_commits(r, False)    # every file gone (none: synced above)
        free(buf)
        _free_round(r)
    if err:
        raise OSError(err, _strerror(err))


EXT4_SUPER_MAGIC = 0xEF53


def fdatasync_flushes_all(path):
    """Whether an fdatasync of any file on path's filesystem flushes the
    disk's write cache after the call began, so that it also makes durable
    the other files' writes that completed before it (the settled commits,
    in the module's doc). ext4 does, with and without a journal: its
    fdatasync either waits for a journal commit whose cache flush is sent
    after the call began or sends one itself. Others are not relied on
    (XFS may only wait for a log write whose flush went out earlier)."""
    cdef statfs_t st
    cdef bytes b = path.encode("utf-8", "surrogateescape") if isinstance(path, str) else path
    if c_statfs(b, &st) != 0:
        return False
    return st.f_type == EXT4_SUPER_MAGIC


def _strerror(int err):
    import os
    return os.strerror(err)


def gate(long rounds):
    """Tests: from now on the workers start at most `rounds` more rounds
    (-1: no limit again); a round already running finishes."""
    global _gate
    pthread_mutex_lock(&_lock)
    _gate = rounds
    pthread_cond_broadcast(&_work)
    pthread_mutex_unlock(&_lock)


def open_gate(long rounds=1):
    """Tests: let `rounds` more rounds start."""
    global _gate
    pthread_mutex_lock(&_lock)
    if _gate >= 0:
        _gate += rounds
    pthread_cond_broadcast(&_work)
    pthread_mutex_unlock(&_lock)
