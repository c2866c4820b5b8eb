# The message store of one queue: a series of mmap'd segment files
# (msgs.0000000001 ...) in LavinMQ's record layout, with one acks.N file per
# segment listing the positions of deleted messages. RAM use is per segment,
# never per message: the ready messages are found by walking the segments
# from a read cursor.
from libc.stdint cimport uint8_t, uint32_t, uint64_t
from lavinmq._core.buffer cimport le64

cdef enum:
    SCHEMA_VERSION = 4
    SEGMENT_HEADER = 4          # the u32 schema version at the start of a file
    APPEND_NO_SPACE = 1         # append's answer when the disk is full (no exception)

# A message's place in a store: segment id, byte position, record length.
cdef struct SP:
    uint32_t seg
    uint32_t pos
    uint32_t size


cdef inline uint64_t sp_key(SP sp) noexcept:
    return (<uint64_t>sp.seg << 32) | sp.pos


cdef class CountMap:
    # (segment, position) -> count without an object per entry (open
    # addressing): a queue's deliveries under a delivery limit, a store's
    # requeued messages (_count_map.pxi)
    cdef:
        uint64_t *keys
        uint32_t *vals
        Py_ssize_t cap
        readonly Py_ssize_t size
    cdef Py_ssize_t slot(self, uint64_t key) noexcept
    cdef uint32_t get(self, uint64_t key)
    cdef int put(self, uint64_t key, uint32_t val) except -1
    cdef void remove(self, uint64_t key)


cdef class Segment:
    cdef:
        readonly uint32_t id
        str path
        str ack_path
        int fd
        char *base              # NULL while unmapped
        Py_ssize_t mapped_len
        readonly Py_ssize_t size       # end of the last record
        Py_ssize_t capacity     # file length while it is the write segment
        Py_ssize_t allocated    # bytes backed by disk blocks: writes never go past it
        Py_ssize_t prepared     # write segment: bytes from the start backed by written blocks
        Py_ssize_t prefill_at   # the writer calls prefill() past this (<= prepared)
        void *prefill_job       # the next stretch of zeros on its way (a PrefillJob), or NULL
        Py_ssize_t zero_step    # bytes of zeros per pwrite (_prefill.pxi says why it varies)
        readonly uint32_t msg_count
        readonly uint32_t ack_count
        bint writable
        bint dropped            # files removed; the object may linger in lists
        int ack_fd
        uint32_t *pending       # deleted positions not yet written to acks.N
        Py_ssize_t n_pending
        Py_ssize_t cap_pending
        uint32_t *deleted       # sorted positions deleted before the reader got here (from boot)
        Py_ssize_t n_deleted
        # requeued.N: (position, deliveries) pairs of messages requeued, so
        # that redelivered and x-delivery-count outlive a restart. Only a
        # segment with a requeued message has the file.
        uint32_t *rq_pending    # pairs not yet written
        Py_ssize_t n_rq_pending
        Py_ssize_t cap_rq_pending
        int rq_fd
        bint rq_file            # requeued.N exists
        uint32_t *redeliv       # from boot: sorted (position, deliveries) pairs, ready messages only
        Py_ssize_t n_redeliv    # pairs
        Py_ssize_t redeliv_at   # the reader's place in them

    cdef int map(self) except -1
    cdef int prefill(self, Py_ssize_t upto) except -1
    cdef int prefill_now(self, Py_ssize_t upto) except -1
    cdef void take_prefill(self)
    cdef void unmap(self)
    cdef int add_pending(self, uint32_t pos) except -1
    cdef int flush_pending(self) except -1
    cdef bint is_deleted_at_boot(self, uint32_t pos)
    cdef int add_requeue(self, uint32_t pos, uint32_t deliveries) except -1
    cdef int flush_requeues(self) except -1
    cdef bint redelivered_at_boot(self, uint32_t pos)


cdef class MessageStore:
    cdef:
        str _dir                # None while the store is idle: then made from these two
        str dir_parent
        str dir_name
        list segs               # Segment or None, index = id - base_id (NO_SEGS: none yet)
        uint32_t base_id
        Segment wseg
        Segment rseg
        Py_ssize_t rpos
        SP *requeued            # sorted by (seg, pos): shifted before the cursor
        Py_ssize_t n_requeued
        Py_ssize_t cap_requeued
        readonly uint64_t ready
        readonly uint64_t ready_bytes
        # body bytes of the ready messages (RabbitMQ's max-length-bytes
        # counts bodies): kept only when a queue asks, it costs a walk
        public bint track_body
        readonly uint64_t ready_body
        Py_ssize_t segment_size
        list dirty              # segments with pending ack positions (None: none since the last flush)
        readonly bint closed
        readonly bint fresh     # the store made its directory: there was nothing to load
        public object log_name
        readonly object error   # why the store could not be opened (queue closed)
        # group commit (lavinmq.sync): set for durable queues when sync is on
        object group_commit     # the Syncer (the `syncer` property)
        bint sync_marked        # already in the syncer's list for the next flush
        bint sync_dir           # a file was created or removed since the last flush
        bint disk_full_logged   # one log line per disk-full episode
        bint touched            # written since the last unmap_idle
        # how far the commits already taken reach (lavinmq/commit.py): a
        # write past it goes into the next flush
        uint32_t sync_seg
        Py_ssize_t sync_pos
        # where the next commit record starts: the end of the newest commit
        # known complete. Flushes overlap (lavinmq/sync.py), so the one being
        # taken may follow one still on its way to the disk: it vouches for
        # that one's bytes too, and a power cut that tears both leaves the
        # store cut back to a commit that did complete
        uint32_t done_seg
        Py_ssize_t done_pos
        uint64_t commit_seq     # sequence number of the next commit record
        int settled_slots       # commit file slots (bit seq % SLOTS) a completed flush fdatasynced
        double last_commit_at   # monotonic time take_sync last took a commit
        Py_ssize_t zero_step    # what its write segments get: fine while commits come often
        set acks_to_sync        # ack files written since the last flush
        # messages requeued and not yet deleted -> deliveries, as their
        # segments' requeued.N files have them (None until a requeue)
        CountMap requeues

    cdef str path(self)
    cdef list more_segs(self)
    cdef Segment segment(self, uint32_t seg_id)
    cdef int open_new_segment(self, Py_ssize_t min_size) except -1
    cdef int allocate(self, Segment s, Py_ssize_t need) except -1
    cdef int append(self, const char *rec, Py_ssize_t n, SP *out) except -1
    cdef const char *shift(self, SP *out, bint *redelivered) except? NULL
    cdef const char *peek(self, SP *out) except? NULL
    cdef const char *read(self, SP sp) except NULL
    cdef int delete(self, SP sp) except -1
    cdef int requeue(self, SP sp, uint32_t deliveries=*) except -1
    cdef int note_requeue(self, SP sp, uint32_t deliveries) except -1
    cdef int flush_acks(self) except -1
    cdef void pace_zeros(self)
    cdef int maybe_drop_segment(self, Segment s) except -1
    cdef int mark_for_sync(self) except -1


# Record: ts i64 | exchange shortstr | routing key shortstr | properties |
#         body size u64 | body        (integers little-endian)
cdef Py_ssize_t record_len(const char *p, Py_ssize_t avail) except -2
cdef int record_parts(const char *rec, const char **ex, Py_ssize_t *exlen,
                      const char **rk, Py_ssize_t *rklen,
                      const char **props, Py_ssize_t *propslen,
                      const char **body, uint64_t *bodylen) except -1
