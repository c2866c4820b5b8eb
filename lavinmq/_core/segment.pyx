# cython: language_level=3
# The message store of a queue (MessageStore: append, shift, ack, requeue,
# group commit) over its segment files. Four topic files are included:
# _segment_file.pxi (one segment file, its ack file and its requeued file),
# _prefill.pxi (its zeros ahead of the writer, from a thread),
# _store_boot.pxi (reading a store back at boot) and _count_map.pxi.
import hashlib
import logging
import os

from libc.stdint cimport uint8_t, uint32_t, uint64_t
from libc.stdlib cimport malloc, calloc, realloc, free, qsort
from libc.string cimport memcpy, memset, memmove
from posix.mman cimport mmap, munmap, PROT_READ, PROT_WRITE, MAP_SHARED, MAP_FAILED
from posix.unistd cimport close as c_close, ftruncate, write as c_write, pwrite
from posix.fcntl cimport open as c_open, O_RDWR, O_CREAT, O_WRONLY, O_APPEND, O_RDONLY, posix_fallocate
from posix.unistd cimport unlink
from lavinmq._core.clock cimport monotonic_s
from cpython.exc cimport PyErr_SetFromErrno

from lavinmq._core.buffer cimport le32, le64, put_le32, put_le64
from lavinmq._core.codec cimport props_convert
from lavinmq._core.props cimport record_body_len
from lavinmq import commit as commits, store_dirs
from lavinmq.clustering import changes

log = logging.getLogger("lavinmq.store")


cdef enum:
    PREFILL_CHUNK = 256 * 1024

cdef char *ZEROS = <char *>calloc(PREFILL_CHUNK, 1)


class CorruptSegment(OSError):
    """A segment file that is not what this broker wrote: its queue is
    closed and its files are left for the operator."""

cdef extern from "errno.h":
    int errno
    int ENOSPC
    int EDQUOT
    int ENOMEM

# called when a map fails for want of mappings: the server unmaps idle segments
cdef object _map_pressure = None


def on_map_pressure(fn):
    global _map_pressure
    _map_pressure = fn

# Disk blocks are reserved ahead of the writer in steps that grow with the
# segment (64 KiB, 128 KiB, ... 4 MiB): a write into a mapped page with no
# block behind it is a SIGBUS when the disk is full, a failed fallocate is
# an error we can answer. Small queues keep small files on disk.
cdef enum:
    ALLOC_MIN = 64 * 1024
    ALLOC_MAX = 4 * 1024 * 1024


class DiskFull(OSError):
    """No space for a new segment or its first blocks."""


include "_count_map.pxi"
include "_prefill.pxi"
include "_segment_file.pxi"
include "_store_boot.pxi"


# the segment list of every store that has none yet: a store never appends
# to it (see more_segs), so 100,000 idle queues share one empty list
cdef list NO_SEGS = []


cdef class MessageStore:
    """All messages of one queue. Not thread-safe: the event loop owns it."""

    def __cinit__(self, *args, **kwargs):
        self.segs = NO_SEGS
        self.dirty = None
        self.acks_to_sync = None        # a set once an ack is written (216 bytes an idle queue saves)
        self.zero_step = PREFILL_CHUNK
        self.last_commit_at = -1e9

    @property
    def dir(self):
        return self.path()

    cdef str path(self):
        if self._dir is None:
            return entity_dir(self.dir_parent, self.dir_name)
        return self._dir

    def forget_path(self, str parent, str name):
        """The store is at entity_dir(parent, name): while it holds no
        segment it keeps those two (shared with the vhost and the queue)
        instead of its own path string, and makes the path when it needs it."""
        if entity_dir(parent, name) != self.path():
            raise ValueError(f"{self.path()} is not the directory of {name!r} in {parent}")
        self.dir_parent = parent
        self.dir_name = name
        if self.segs is NO_SEGS:
            self._dir = None

    cdef list more_segs(self):
        # the list to append a segment to: the store's own
        if self.segs is NO_SEGS:
            self.segs = []
        return self.segs

    def __init__(self, str directory, Py_ssize_t segment_size=8 * 1024 * 1024, log_name=None,
                 syncer=None):
        # loading is in __init__ (not __cinit__) so that a store made of
        # other stores (prio_store) can subclass this one without it
        self._dir = directory
        self.segment_size = segment_size
        self.log_name = log_name or directory
        self.error = None
        try:
            try:
                os.mkdir(directory)
                self.fresh = True
            except FileExistsError:
                pass
            except FileNotFoundError:
                os.makedirs(directory, exist_ok=True)
                self.fresh = True
            # a directory this store made holds nothing to load (a declare
            # skips the listing and the commit files' lookups)
            had_commits, recovered = (False, False) if self.fresh else load_store(self)
            if self.wseg is None and syncer is not None and not had_commits:
                # a new queue: its commit file comes before its first
                # segment (journals keep creations in order), so a segment
                # never exists without the record that judges it
                self.sync_seg = self.done_seg = self.base_id if self.base_id else 1
                self.sync_pos = self.done_pos = SEGMENT_HEADER
                commits.write_slot(self.path(), commits.Slot(0, commits.BOOT_ID, self.sync_seg,
                                                          SEGMENT_HEADER, []), sync=False)
                changes.changed(commits.commit_path(self.path()))
                self.commit_seq = 1
                had_commits = True
            # no segment until the first message: an empty queue is a directory
            # (100,000 queues cost no maps, no disk blocks, no descriptors)
            if syncer is not None:
                self._start_commits(syncer, had_commits, recovered)
            elif had_commits:
                self._stop_commits(recovered)
        except Exception as exc:
            # one damaged or unreadable queue must not stop the broker, nor
            # lose its definition: the queue stays declared but closed
            self.error = str(exc)
            log.error("queue %s closed: %s", self.log_name, exc)
            self.close()
            return
        if self.rseg is None and self.segs:
            self.rseg = <Segment>self.segs[0]
            self.rpos = SEGMENT_HEADER

    def __dealloc__(self):
        free(self.requeued)

    # -- segments ------------------------------------------------------------

    cdef Segment segment(self, uint32_t seg_id):
        cdef Py_ssize_t idx = <Py_ssize_t>seg_id - <Py_ssize_t>self.base_id
        if idx < 0 or idx >= len(self.segs):
            return None
        return <Segment>self.segs[idx]

    cdef int open_new_segment(self, Py_ssize_t min_size) except -1:
        cdef uint32_t seg_id
        cdef Segment s
        cdef char hdr[4]
        cdef int rc
        if self.wseg is not None:
            self._seal(self.wseg)
            seg_id = self.wseg.id + 1
        elif self.segs:
            seg_id = self.base_id + len(self.segs)
        else:
            seg_id = self.base_id if self.base_id else 1
            self.base_id = seg_id
        if self._dir is None:
            self._dir = self.path()     # no longer idle: the path is used per segment and commit
        s = Segment(seg_id, self._dir)
        s.writable = True
        s.capacity = max(self.segment_size, min_size + SEGMENT_HEADER)
        s.fd = c_open(s.path.encode(), O_RDWR | O_CREAT, 0o644)
        if s.fd < 0:
            PyErr_SetFromErrno(OSError)
            return -1
        if ftruncate(s.fd, s.capacity) != 0:
            PyErr_SetFromErrno(OSError)
            return -1
        rc = posix_fallocate(s.fd, 0, _alloc_step(0, min_size + SEGMENT_HEADER + 8, s.capacity))
        if rc != 0:
            # no room for even the first blocks: leave no file behind, the
            # previous segment stays the writer (sealed files are not reopened)
            c_close(s.fd)
            s.fd = -1
            unlink(s.path.encode())
            if self.wseg is not None and not self.wseg.writable:
                self._unseal(self.wseg)
            raise DiskFull(rc, f"{s.path}: {os.strerror(rc)}")
        s.allocated = _alloc_step(0, min_size + SEGMENT_HEADER + 8, s.capacity)
        # the header goes in with pwrite: a first write *fault* into a fresh
        # sparse file costs ext4 ~3 ms (block allocation under the fault),
        # which made queue.declare 40x slower
        put_le32(hdr, SCHEMA_VERSION)
        if pwrite(s.fd, hdr, 4, 0) != 4:
            PyErr_SetFromErrno(OSError)
            return -1
        s.prepared = s.prefill_at = SEGMENT_HEADER
        s.zero_step = self.zero_step
        s.map()
        # the mapping keeps the file: no fd per queue (10k queues, 10k fds otherwise)
        c_close(s.fd)
        s.fd = -1
        s.size = SEGMENT_HEADER
        self.sync_dir = True     # the new file's directory entry must reach the disk too
        while self.base_id + len(self.segs) < seg_id:
            self.more_segs().append(None)
        self.more_segs().append(s)
        self.wseg = s
        if self.rseg is None:
            self.rseg = s
            self.rpos = SEGMENT_HEADER
        return 0

    cdef int allocate(self, Segment s, Py_ssize_t need) except -1:
        """Reserve disk blocks up to at least `need` bytes of the write
        segment. -> 0, or APPEND_NO_SPACE when the disk is full."""
        cdef Py_ssize_t upto = _alloc_step(s.allocated, need, s.capacity)
        cdef int fd = c_open(s.path.encode(), O_RDWR)
        cdef int rc
        if fd < 0:
            PyErr_SetFromErrno(OSError)
            return -1
        rc = posix_fallocate(fd, s.allocated, upto - s.allocated)
        c_close(fd)
        if rc == ENOSPC or rc == EDQUOT:
            return APPEND_NO_SPACE
        if rc != 0:
            raise OSError(rc, f"{s.path}: {os.strerror(rc)}")
        s.allocated = upto
        return 0

    def _unseal(self, Segment s):
        """A new segment could not be created: the sealed one (cut to its
        data) goes on as the writer, at its own length."""
        s.writable = True
        s.unmap()
        s.capacity = s.size
        s.allocated = s.size

    def log_disk_full(self, exc):
        # once per episode, not per refused message
        if not self.disk_full_logged:
            self.disk_full_logged = True
            log.error("queue %s: disk full, messages refused until space returns%s", self.log_name,
                      f" ({exc})" if exc is not None else "")

    def _seal(self, Segment s):
        """The write segment is full: cut the file to its data."""
        s.take_prefill()        # zeros written after the cut would lengthen the file again
        s.writable = False
        if s is not self.rseg:
            s.unmap()
        os.truncate(s.path, s.size)
        s.capacity = s.size
        self.maybe_drop_segment(s)

    def _drop(self, Segment s):
        cdef Py_ssize_t idx = <Py_ssize_t>s.id - <Py_ssize_t>self.base_id
        if s.dropped:
            return
        s.dropped = True
        s.n_pending = 0      # its ack file goes with it
        s.n_rq_pending = 0
        self.sync_dir = True
        s.close_files()
        for p in ((s.path, s.ack_path, s.requeued_path) if s.rq_file else (s.path, s.ack_path)):
            try:
                os.unlink(p)
            except FileNotFoundError:
                pass
            changes.removed(p)
        self.segs[idx] = None
        while self.segs and self.segs[0] is None:
            del self.segs[0]
            self.base_id += 1

    cdef int maybe_drop_segment(self, Segment s) except -1:
        # a sealed segment whose every message is deleted, and that the
        # reader has left, is removed with its ack file
        if s is not self.wseg and s is not self.rseg and s.ack_count == s.msg_count:
            self._drop(s)
        return 0

    # -- group commit --------------------------------------------------------
    #
    # With sync on, a durable queue's writes (records and acks) are made
    # durable by the syncer's next flush, and each flush that covers new
    # records also writes the queue's next commit record (the file `commit`:
    # where the flush started, where each segment it covers ends, a crc32 of
    # those bytes). Recovery after a power cut keeps exactly what a commit
    # record vouches for; after a mere crash (same boot) the page cache is
    # intact and everything written loads as before. lavinmq/commit.py has
    # the format and the reasoning; none of it runs per message.

    cdef int mark_for_sync(self) except -1:
        # once per store per flush round, not per message
        self.sync_marked = True
        self.group_commit.mark(self)
        return 0

    @property
    def syncer(self):
        return self.group_commit

    @syncer.setter
    def syncer(self, value):
        self.set_syncer(value)

    def set_syncer(self, syncer):
        """Join (or leave) the group commit after the store was opened. A
        queue gets its syncer at construction, so that a new queue's commit
        file comes before its first segment; joining later commits the store
        as it stands, synchronously."""
        if syncer is not None and self.group_commit is None:
            self._start_commits(syncer, os.path.exists(commits.commit_path(self.path())), False)
        elif syncer is None and self.group_commit is not None:
            self.group_commit = None
            self._stop_commits(False)

    def _start_commits(self, syncer, bint had_commits, bint recovered):
        self.group_commit = syncer
        if not had_commits or recovered:
            # records older than any commit (an upgrade, a run with sync
            # off), or a tail just cut back after a power cut: make the
            # segments as they are now durable, then a record that says so
            self._commit_now()

    def _stop_commits(self, bint recovered):
        """Sync off: no record would follow the writes, so a stale one must
        not judge them after the next power cut."""
        if recovered:
            self._sync_segments()
        try:
            os.unlink(commits.commit_path(self.path()))
        except FileNotFoundError:
            pass
        self.settled_slots = 0
        fsync_dir(self.path())

    def _sync_segments(self):
        for x in self.segs:
            if x is not None:
                fd = os.open((<Segment>x).path, os.O_RDONLY)
                try:
                    os.fdatasync(fd)
                finally:
                    os.close(fd)
        fsync_dir(self.path())
        fsync_dir(os.path.dirname(self.path()))

    def _commit_now(self):
        """Synchronous commit of the store as it stands (rare: see callers)."""
        if self.wseg is None:
            return          # no segment yet (a full disk at start): the first write commits
        self._sync_segments()
        commits.write_slot(self.path(), commits.Slot(self.commit_seq, commits.BOOT_ID, self.wseg.id,
                                                  self.wseg.size, []))
        self.settled_slots |= 1 << (self.commit_seq % commits.SLOTS)
        self.commit_seq += 1
        self.sync_seg, self.sync_pos = self.done_seg, self.done_pos = self.wseg.id, self.wseg.size
        self.sync_dir = False

    def take_sync(self, bint acks=True):
        """-> (files, directory or None, commit job or None): what the
        syncer's next flush must make durable: segment files written since
        the last flush and their commit record (lavinmq.commit.commit runs
        the job), the ack files written (unless `acks` is false: then they
        wait for take_acks), the directory if a file came or went. Resets
        the marks, so writes from here on go into the following flush."""
        cdef Segment w = self.wseg
        cdef Segment s
        if self.closed or w is None:
            self.sync_marked = False
            return [], None, None
        self.flush_acks()
        files = self.take_acks() if acks else []
        job = None
        if w.id != self.sync_seg or w.size != self.sync_pos:
            ends = []
            for seg_id in range(self.done_seg, w.id + 1):
                s = self.segment(seg_id)
                if s is not None and not s.dropped:
                    files.append(s.path)
                    ends.append((seg_id, s.size))
                else:
                    ends.append((seg_id, 0))
            # settled: the slot's blocks were fdatasynced by a flush that
            # completed, so this one may go with the cache flush of the
            # segments' fdatasync (lavinmq/_core/flusher.pyx)
            job = (self.path(), self.commit_seq, self.done_seg, self.done_pos, ends,
                   bool(self.settled_slots & (1 << (self.commit_seq % commits.SLOTS))))
            self.commit_seq += 1
            self.sync_seg, self.sync_pos = w.id, w.size
            self.pace_zeros()
        directory = self.path() if self.sync_dir else None
        self.sync_marked = False
        self.sync_dir = False
        return files, directory, job

    cdef void pace_zeros(self):
        """A commit was taken: its write segments' zeros go in fine writes
        while commits come often (_prefill.pxi says why)."""
        cdef double now = monotonic_s()
        self.zero_step = ZERO_STEP_FINE if now - self.last_commit_at < FINE_WITHIN else PREFILL_CHUNK
        self.last_commit_at = now
        if self.wseg is not None:
            self.wseg.zero_step = self.zero_step

    def take_acks(self):
        """-> the ack files written and not yet made durable (take_sync
        without acks leaves them here), and forgets them."""
        files = list(self.acks_to_sync) if self.acks_to_sync and not self.closed else []
        self.acks_to_sync = None
        return files

    @property
    def unsynced_acks(self):
        return bool(self.acks_to_sync)

    def commit_done(self, job):
        """The flush that carried `job` (from take_sync) is on the disk:
        later commits start where it ended. Flushes complete in the order
        they were taken; a synchronous commit since (_commit_now) may
        already reach further."""
        cdef uint32_t seg = job[4][-1][0]
        cdef Py_ssize_t end = job[4][-1][1]
        if not job[5]:
            self.settled_slots |= 1 << (job[1] % commits.SLOTS)     # the flush fdatasynced its slot
        if end == 0:
            return      # the segment is gone (all acked): the next commit's own range says so
        if seg > self.done_seg or (seg == self.done_seg and end > self.done_pos):
            self.done_seg, self.done_pos = seg, end

    def pending_sync_bytes(self):
        """Bytes of records written since the last flush took this store's
        marks (a rough count across a segment change): what the next flush
        would carry."""
        cdef Segment w = self.wseg
        if w is None or self.closed:
            return 0
        if w.id != self.sync_seg:
            return w.size
        return w.size - self.sync_pos

    def commit_again(self):
        """The flush that carried this store's commit could not run (out of
        descriptors): the next flush takes a commit afresh, from the newest
        one that completed, rather than the stale one again."""
        self.sync_seg, self.sync_pos = self.done_seg, self.done_pos
        if self.group_commit is not None and not self.sync_marked and not self.closed:
            self.mark_for_sync()

    # -- messages ------------------------------------------------------------

    cdef int append(self, const char *rec, Py_ssize_t n, SP *out) except -1:
        """-> 0, or APPEND_NO_SPACE (nothing written) when the disk is full."""
        cdef Segment s = self.wseg
        if s is None or s.size + n + 8 > s.capacity:
            try:
                self.open_new_segment(n + 8)
            except DiskFull as exc:
                self.log_disk_full(exc)
                return APPEND_NO_SPACE
            s = self.wseg
        if s.size + n + 8 > s.allocated:
            if self.allocate(s, s.size + n + 8) == APPEND_NO_SPACE:
                self.log_disk_full(None)
                return APPEND_NO_SPACE
        if s.size + n + 8 > s.prefill_at:
            s.prefill(s.size + n + 8)       # zeros ahead, in the page cache: cheap write faults
        if s.base is NULL:          # unmapped while the queue was idle
            try:
                s.map()
            except OSError as exc:
                log.error("queue %s: cannot map %s: %s", self.log_name, s.path, exc)
                return APPEND_NO_SPACE
        self.touched = True
        # body first, timestamp last: a record cut short by a crash keeps a
        # zero timestamp and reads as the end of data
        memcpy(s.base + s.size + 8, rec + 8, n - 8)
        memcpy(s.base + s.size, rec, 8)
        out.seg = s.id
        out.pos = <uint32_t>s.size
        out.size = <uint32_t>n
        if self.group_commit is not None and not self.sync_marked:
            self.mark_for_sync()
        s.size += n
        s.msg_count += 1
        self.disk_full_logged = False
        self.ready += 1
        self.ready_bytes += n
        if self.track_body:
            self.ready_body += record_body_len(rec)
        return 0

    cdef const char *shift(self, SP *out, bint *redelivered) except? NULL:
        """Take the next ready message: requeued ones first (they were
        delivered before anything still ahead of the cursor), then the
        cursor's. Returns NULL when the queue is empty."""
        cdef Segment s
        cdef Py_ssize_t n
        cdef const char *rec
        if self.n_requeued:
            out[0] = self.requeued[0]
            self.n_requeued -= 1
            memmove(self.requeued, self.requeued + 1, self.n_requeued * sizeof(SP))
            redelivered[0] = True
            self.ready -= 1
            self.ready_bytes -= out.size
            rec = self.read(out[0])
            if self.track_body:
                self.ready_body -= record_body_len(rec)
            return rec
        redelivered[0] = False
        while self.ready:
            s = self.rseg
            if self.rpos < s.size:
                if s.base is NULL:
                    s.map()
                n = record_len(s.base + self.rpos, s.size - self.rpos)
                if n <= 0:
                    raise OSError(f"{s.path}: corrupt record at byte {self.rpos}")
                out.seg = s.id
                out.pos = <uint32_t>self.rpos
                out.size = <uint32_t>n
                self.rpos += n
                if s.n_deleted and s.is_deleted_at_boot(out.pos):
                    continue
                if s.n_redeliv and s.redelivered_at_boot(out.pos):
                    redelivered[0] = True
                self.ready -= 1
                self.ready_bytes -= n
                if self.track_body:
                    self.ready_body -= record_body_len(s.base + out.pos)
                return s.base + out.pos
            if s is self.wseg:
                return NULL
            self._advance_reader()
        return NULL

    def peek_head(self):
        """The next ready record as bytes, without taking it (None if there
        is none): for the API's head_message_timestamp, once per request."""
        cdef SP sp
        cdef const char *rec = self.peek(&sp)
        if rec is NULL:
            return None
        return rec[:sp.size]

    def _advance_reader(self):
        cdef Segment old = self.rseg
        cdef Segment nxt = None
        cdef uint32_t i = old.id + 1
        while nxt is None and i <= self.wseg.id:
            nxt = self.segment(i)
            i += 1
        self.rseg = nxt
        self.rpos = SEGMENT_HEADER
        free(old.deleted)
        old.deleted = NULL
        old.n_deleted = 0
        free(old.redeliv)
        old.redeliv = NULL
        old.n_redeliv = 0
        if not old.writable:
            old.unmap()
        self.maybe_drop_segment(old)

    cdef const char *peek(self, SP *out) except? NULL:
        """The message shift() would take next, left in place (NULL when
        the queue is empty). May step the cursor over records deleted
        before a restart, which shift() skips anyway."""
        cdef Segment s
        cdef Py_ssize_t n
        if self.n_requeued:
            out[0] = self.requeued[0]
            return self.read(out[0])
        while self.ready:
            s = self.rseg
            if self.rpos < s.size:
                if s.base is NULL:
                    s.map()
                n = record_len(s.base + self.rpos, s.size - self.rpos)
                if n <= 0:
                    raise OSError(f"{s.path}: corrupt record at byte {self.rpos}")
                out.seg = s.id
                out.pos = <uint32_t>self.rpos
                out.size = <uint32_t>n
                if s.n_deleted and s.is_deleted_at_boot(out.pos):
                    self.rpos += n
                    continue
                return s.base + out.pos
            if s is self.wseg:
                return NULL
            self._advance_reader()
        return NULL

    cdef const char *read(self, SP sp) except NULL:
        cdef Segment s = self.segment(sp.seg)
        if s is None:
            raise KeyError(f"segment {sp.seg} is gone")
        if s.base is NULL:
            s.map()
        return s.base + sp.pos

    cdef int delete(self, SP sp) except -1:
        """The message is acked (or dropped): record its position in the
        segment's ack file (written per batch by flush_acks)."""
        cdef Segment s = self.segment(sp.seg)
        if s is None:
            return 0
        if s.n_pending == 0 and s.n_rq_pending == 0:
            if self.dirty is None:
                self.dirty = []
            self.dirty.append(s)
        if self.requeues is not None and self.requeues.size:
            self.requeues.remove(sp_key(sp))
        s.add_pending(sp.pos)
        s.ack_count += 1
        if self.group_commit is not None and not self.sync_marked:
            self.mark_for_sync()     # acks reach the disk with the next flush too
        return 0

    cdef int note_requeue(self, SP sp, uint32_t deliveries) except -1:
        """The message goes back to the queue after `deliveries` deliveries
        (at least one): its segment's requeued.N says so from the next
        flush on, unless it says so already. Once per message for a queue
        without a delivery limit; with one, once per delivery, which the
        limit bounds."""
        cdef uint64_t key = sp_key(sp)
        cdef Segment s
        if deliveries == 0:
            deliveries = 1
        if self.requeues is None:
            self.requeues = CountMap()
        elif self.requeues.get(key) == deliveries:
            return 0
        s = self.segment(sp.seg)
        if s is None:
            return 0
        self.requeues.put(key, deliveries)
        if s.n_pending == 0 and s.n_rq_pending == 0:
            if self.dirty is None:
                self.dirty = []
            self.dirty.append(s)
        s.add_requeue(sp.pos, deliveries)
        if self.group_commit is not None and not self.sync_marked:
            self.mark_for_sync()
        return 0

    cdef int requeue(self, SP sp, uint32_t deliveries=1) except -1:
        cdef Py_ssize_t lo = 0, hi = self.n_requeued, mid
        cdef SP *n
        self.note_requeue(sp, deliveries)
        if self.n_requeued == self.cap_requeued:
            self.cap_requeued = self.cap_requeued * 2 if self.cap_requeued else 16
            n = <SP *>realloc(self.requeued, self.cap_requeued * sizeof(SP))
            if n is NULL:
                raise MemoryError()
            self.requeued = n
        while lo < hi:
            mid = (lo + hi) >> 1
            if sp_cmp(self.requeued[mid], sp) < 0:
                lo = mid + 1
            else:
                hi = mid
        memmove(self.requeued + lo + 1, self.requeued + lo, (self.n_requeued - lo) * sizeof(SP))
        self.requeued[lo] = sp
        self.n_requeued += 1
        self.ready += 1
        self.ready_bytes += sp.size
        if self.track_body:
            self.ready_body += record_body_len(self.read(sp))
        return 0

    cdef int flush_acks(self) except -1:
        cdef Segment s
        if not self.dirty:
            return 0
        dirty = self.dirty
        self.dirty = None
        for x in dirty:
            s = <Segment>x
            if s.dropped:
                continue
            if s.n_rq_pending:
                if self.group_commit is not None:
                    if s.rq_fd < 0:
                        self.sync_dir = True
                    if self.acks_to_sync is None:
                        self.acks_to_sync = set()
                    self.acks_to_sync.add(s.requeued_path)
                if s.flush_requeues():
                    if self.dirty is None:
                        self.dirty = []
                    self.dirty.append(s)    # disk full: try again on the next flush
                if s.n_pending == 0:
                    continue
            if self.group_commit is not None:
                if s.ack_fd < 0:
                    self.sync_dir = True     # the ack file may be new: its name too
                if self.acks_to_sync is None:
                    self.acks_to_sync = set()
                self.acks_to_sync.add(s.ack_path)
            s.flush_pending()
            if s.ack_count == s.msg_count:
                # every message gone: dropping the files frees space, and
                # needs no ack entries written first
                self.maybe_drop_segment(s)
                if s.dropped:
                    continue
            if s.flush_pending():
                if self.dirty is None:
                    self.dirty = []
                self.dirty.append(s)    # disk full: try again on the next flush
        return 0

    # -- Python-facing -------------------------------------------------------

    def purge(self):
        """Delete every ready message; returns how many."""
        cdef SP sp
        cdef bint redelivered
        cdef uint64_t count = 0
        while self.shift(&sp, &redelivered) is not NULL:
            self.delete(sp)
            count += 1
        self.flush_acks()
        return count

    def count_body_bytes(self):
        """Start keeping ready_body: one walk over the ready messages (the
        requeued ones, then everything from the read cursor on), in place."""
        cdef Segment s
        cdef Py_ssize_t i, pos, n
        cdef uint64_t total = 0
        cdef uint32_t seg_id
        if self.track_body or self.closed:
            return
        for i in range(self.n_requeued):
            total += record_body_len(self.read(self.requeued[i]))
        if self.rseg is not None:
            seg_id = self.rseg.id
            pos = self.rpos
            while seg_id <= self.wseg.id:
                s = self.segment(seg_id)
                if s is not None:
                    if s.base is NULL:
                        s.map()
                    while pos < s.size:
                        n = record_len(s.base + pos, s.size - pos)
                        if n <= 0:
                            break
                        if not (s.n_deleted and s.is_deleted_at_boot(<uint32_t>pos)):
                            total += record_body_len(s.base + pos)
                        pos += n
                    if s is not self.rseg and s is not self.wseg:
                        s.unmap()
                seg_id += 1
                pos = SEGMENT_HEADER
        self.ready_body = total
        self.track_body = True

    def redelivery_counts(self):
        """-> [(sp key, deliveries)] of the messages requeued and still
        here (from requeued.N at boot, and since): a queue that starts
        counting deliveries (a delivery limit) starts from these. Once per
        queue, not per message."""
        cdef CountMap m = self.requeues
        cdef Py_ssize_t i
        if m is None or not m.size:
            return []
        return [(m.keys[i], m.vals[i]) for i in range(m.cap) if m.keys[i]]

    def unmap_idle(self):
        """Unmap every segment but the reader's and the writer's, and those
        too when nothing was written since the last call: RSS stays flat
        however deep the queue is, and idle queues hold no mapping (the
        kernel allows ~65k)."""
        cdef Segment s
        cdef bint idle = not self.touched
        self.touched = False
        for x in self.segs:
            if x is not None and (idle or (x is not self.wseg and x is not self.rseg)):
                s = x
                s.unmap()

    def close(self):
        if self.closed:
            return
        self.flush_acks()
        for x in self.segs:
            if x is not None:
                (<Segment>x).close_files()
        self.closed = True

    def destroy(self):
        """Close and remove every file of the store (queue deleted)."""
        self.close()
        store_dirs.remove(self.path())
        changes.removed(self.path())

    def write_segments(self):
        """[(path, end of its data)] of the segment written to: its file is
        longer (preallocated for the map). Replication's full sync asks."""
        if self.closed or self.wseg is None or not self.wseg.writable:
            return []
        return [(self.wseg.path, self.wseg.size)]

    @property
    def segment_count(self):
        return sum(1 for s in self.segs if s is not None)

    def segment_ids(self):
        """Ids of the segments that exist, oldest first."""
        return [(<Segment>x).id for x in self.segs if x is not None]

    @property
    def mapped_segments(self):
        return sum(1 for s in self.segs if s is not None and s.mapped)

    def prefill_state(self):
        """Tests: the write segment's zeros ahead, as (end of data, zeros
        written up to, a stretch on its way, that stretch done)."""
        cdef Segment w = self.wseg
        cdef PrefillJob *job
        if w is None:
            return None
        job = <PrefillJob *>w.prefill_job
        return (w.size, w.prepared, job is not NULL, job is not NULL and prefill_done(job))

    # test helpers: append/shift/ack from Python with bytes records
    def py_append(self, bytes rec):
        cdef SP sp
        self.append(rec, len(rec), &sp)
        return (sp.seg, sp.pos, sp.size)

    def py_shift(self):
        cdef SP sp
        cdef bint redelivered
        cdef const char *p = self.shift(&sp, &redelivered)
        if p is NULL:
            return None
        return (sp.seg, sp.pos, sp.size), p[:sp.size], redelivered

    def py_delete(self, tuple sp):
        cdef SP s
        s.seg, s.pos, s.size = sp
        self.delete(s)

    def py_requeue(self, tuple sp, uint32_t deliveries=1):
        cdef SP s
        s.seg, s.pos, s.size = sp
        self.requeue(s, deliveries)

    def py_flush(self):
        self.flush_acks()


def bench_append_shift(MessageStore store, bytes rec, int n):
    """Benchmarks: append n copies of rec, then shift and delete them all."""
    cdef SP sp
    cdef bint redelivered
    cdef int i
    for i in range(n):
        store.append(rec, len(rec), &sp)
    for i in range(n):
        store.shift(&sp, &redelivered)
        store.delete(sp)
    store.flush_acks()
