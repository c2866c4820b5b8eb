# Included by segment.pyx: reading a message store back at boot — its
# segment files (a torn tail cut, records counted), their acks.N files,
# and the commit records that say what survived a power cut. Module
# functions over the store's fields: they run once per store, not per message.


cdef tuple load_store(MessageStore self):
    """Read a store back from its directory at boot.
    -> (the queue keeps commit records, recovered from a power cut)"""
    cdef Segment s
    names = os.listdir(self.path())
    ids = sorted(int(f[5:]) for f in names if f.startswith("msgs.") and f[5:].isdigit())
    requeued = {int(f[9:]) for f in names if f.startswith("requeued.") and f[9:].isdigit()}
    had_commits, slots = commits.read_slots(self.path())
    slot = slots[0] if slots else None
    verified = {}
    recovered = had_commits and (slot is None or not slot.intact)
    if recovered:
        # the machine went down since the last commit (or before the
        # first): keep what the commits vouch for (lavinmq/commit.py)
        keep, remove = commits.recovery_plan(self.path(), ids, slots)
        for seg_id in remove:
            for name in ("msgs.%010d", "acks.%010d", "requeued.%010d"):
                try:
                    os.unlink(os.path.join(self.path(), name % seg_id))
                except FileNotFoundError:
                    pass
        verified = {k: v for k, v in keep.items() if v is not None}
        if remove:
            log.warning("queue %s: the machine restarted since its last group commit: "
                        "%d segment(s) it never committed removed", self.log_name, len(remove))
        if ids:
            # a fresh segment must not reuse an id a commit record names
            self.base_id = max(ids) + 1
        ids = [i for i in ids if i in keep]
        self.sync_dir = True
    if slot is not None:
        self.commit_seq = slot.seq + 1
        if slot.first >= self.base_id:
            self.base_id = slot.first + max(len(slot.entries), 1)
    if not ids:
        return had_commits, recovered
    self.base_id = ids[0]
    if slot is not None and not recovered:
        # the page cache survived: everything loads as written, and the
        # next commit starts where the newest record did (the flush that
        # wrote it may not have completed)
        self.sync_seg, self.sync_pos = slot.first, slot.start
        if self.sync_seg < self.base_id:
            self.sync_seg, self.sync_pos = self.base_id, SEGMENT_HEADER
        self.done_seg, self.done_pos = self.sync_seg, self.sync_pos
    for i, seg_id in enumerate(ids):
        while self.base_id + len(self.segs) < seg_id:
            self.more_segs().append(None)
        s = Segment(seg_id, self.path())
        load_segment(self, s, i == len(ids) - 1, verified.get(seg_id, -1))
        if seg_id in requeued:
            load_requeued(self, s)
        self.more_segs().append(s)
    for i in range(len(self.segs) - 1):
        s = self.segs[i]
        if s is not None and s.ack_count == s.msg_count:
            self._drop(s)
    for x in self.segs:
        if x is not None:
            s = x
            self.ready += s.msg_count - s.ack_count
            if self.rseg is None:
                self.rseg = s
                self.rpos = SEGMENT_HEADER
    return had_commits, recovered

cdef int load_segment(MessageStore self, Segment s, bint last, Py_ssize_t verified_end) except -1:
    """Walk the records of a segment file: count them, cut a torn tail,
    and match the positions listed in its ack file. With verified_end
    >= 0 (after a power cut) only the records before it count and
    whatever lies past it is cleared."""
    cdef Py_ssize_t pos = SEGMENT_HEADER
    cdef Py_ssize_t n, file_len, limit
    cdef uint32_t *acked = NULL
    cdef Py_ssize_t n_acked = 0, i, j
    s.writable = last
    file_len = os.path.getsize(s.path)
    if file_len < SEGMENT_HEADER:
        # an empty file from a crash right after creation
        with open(s.path, "r+b") as f:
            f.truncate(SEGMENT_HEADER)
            f.write(SCHEMA_VERSION.to_bytes(4, "little"))
        file_len = SEGMENT_HEADER
    limit = file_len if verified_end < 0 else min(verified_end, file_len)
    s.size = file_len
    s.prepared = s.prefill_at = file_len
    s.capacity = max(file_len, self.segment_size) if last else file_len
    if last:
        s.fd = c_open(s.path.encode(), O_RDWR)
        if s.fd < 0:
            PyErr_SetFromErrno(OSError)
        if file_len < s.capacity and ftruncate(s.fd, s.capacity) != 0:
            PyErr_SetFromErrno(OSError)
    s.map()
    if s.fd >= 0:
        c_close(s.fd)
        s.fd = -1
    if le32(s.base) != SCHEMA_VERSION:
        raise CorruptSegment(f"{s.path}: unknown segment schema version {le32(s.base)}")
    n_acked = read_acks(s, &acked)
    j = 0
    try:
        while True:
            n = record_len(s.base + pos, limit - pos)
            if n == 0:
                if not last and not all_zero(s.base + pos, limit - pos):
                    raise CorruptSegment(f"{s.path}: data after the end mark at byte {pos}")
                break
            if n == RECORD_MALFORMED:
                raise CorruptSegment(f"{s.path}: malformed record at byte {pos}")
            if n < 0 and verified_end >= 0:
                break        # inside bytes a commit vouches for: corrupt (raised below)
            if n < 0:
                log.warning("%s: torn record at byte %d cut off", s.path, pos)
                if s.writable:
                    memset(s.base + pos, 0, s.capacity - pos)
                break
            while j < n_acked and acked[j] < pos:
                j += 1
            s.msg_count += 1
            if j < n_acked and acked[j] == pos:
                acked[s.ack_count] = <uint32_t>pos   # compact in place: only real record starts
                s.ack_count += 1
                j += 1
            pos += n
    finally:
        s.deleted = acked
        s.n_deleted = s.ack_count
    if verified_end >= 0 and pos != verified_end:
        raise CorruptSegment(f"{s.path}: records end at byte {pos}, its commit record at {verified_end}")
    s.size = pos
    s.allocated = pos       # blocks past the data may be holes (older files were sparse)
    if verified_end >= 0:
        if s.writable and zero_tail(s.base, pos, s.capacity) or not s.writable and file_len > pos:
            log.warning("%s: what was written past its last group commit (byte %d) is cut off",
                        s.path, pos)
    if not last:
        s.unmap()
        if file_len != pos:
            os.truncate(s.path, pos)
    else:
        self.wseg = s
    return 0

cdef Py_ssize_t read_acks(Segment s, uint32_t **out) except -1:
    """Sorted, unique positions from acks.N into a malloc'd array; a torn
    last entry or a zero-filled tail is ignored."""
    cdef uint32_t *arr
    cdef Py_ssize_t n, i, k
    try:
        with open(s.ack_path, "rb") as f:
            data = f.read()
    except FileNotFoundError:
        data = b""
    n = len(data) // 4
    arr = <uint32_t *>malloc(max(n, 1) * sizeof(uint32_t))
    if arr is NULL:
        raise MemoryError()
    memcpy(arr, <const char *>data, n * 4)
    qsort(arr, n, sizeof(uint32_t), cmp_u32)
    k = 0
    for i in range(n):
        if arr[i] >= SEGMENT_HEADER and (k == 0 or arr[k - 1] != arr[i]):
            arr[k] = arr[i]
            k += 1
    out[0] = arr
    return k

cdef int load_requeued(MessageStore self, Segment s) except -1:
    """requeued.N of a loaded segment: the messages still there (not acked,
    inside the records) come back redelivered, with their deliveries. The
    newest pair of a position counts. Pairs of messages that are gone are
    left out of a rewritten file, so that a record written later at the
    same position (after a power cut cut the segment back) is not taken
    for a requeued one."""
    cdef Py_ssize_t i, n
    cdef uint32_t *arr
    cdef SP sp
    s.rq_file = True
    with open(s.requeued_path, "rb") as f:
        data = f.read()
    n = len(data) // 8
    latest = {}
    for i in range(n):
        pos = int.from_bytes(data[8 * i:8 * i + 4], "little")
        latest[pos] = int.from_bytes(data[8 * i + 4:8 * i + 8], "little")
    live = sorted((pos, d) for pos, d in latest.items()
                  if SEGMENT_HEADER <= pos < s.size and not (s.n_deleted and s.is_deleted_at_boot(pos)))
    if len(live) != n:
        with open(s.requeued_path, "wb") as f:
            f.write(b"".join(pos.to_bytes(4, "little") + d.to_bytes(4, "little") for pos, d in live))
    if not live:
        return 0
    arr = <uint32_t *>malloc(len(live) * 2 * sizeof(uint32_t))
    if arr is NULL:
        raise MemoryError()
    if self.requeues is None:
        self.requeues = CountMap()
    sp.seg = s.id
    for i, (pos, d) in enumerate(live):
        arr[2 * i] = pos
        arr[2 * i + 1] = d
        sp.pos = pos
        self.requeues.put(sp_key(sp), d)
    s.redeliv = arr
    s.n_redeliv = len(live)
    return 0
