# cython: language_level=3
import logging
import os
import struct
import time

from libc.stdint cimport uint8_t, uint32_t, uint64_t, int64_t

from lavinmq._core.buffer cimport le64
from lavinmq.clustering import changes
from lavinmq._core.segment cimport MessageStore, Segment, SP, SEGMENT_HEADER, record_len

log = logging.getLogger("lavinmq.stream")

# meta.N, as LavinMQ: message count u32, first offset i64, first and last
# timestamp i64 (ms), little-endian
META = struct.Struct("<Iqqq")
OFFSET = struct.Struct("<q")
# the consumer offsets file is rewritten with only the latest entry per tag
# once it grows past this
OFFSETS_COMPACT_AT = 1024 * 1024


cdef Py_ssize_t skip_records(Segment s, Py_ssize_t pos, uint64_t n) except -1:
    cdef Py_ssize_t r
    if s.base is NULL:
        s.map()
    while n > 0 and pos < s.size:
        r = record_len(s.base + pos, s.size - pos)
        if r <= 0:
            raise OSError(f"{s.path}: corrupt record at byte {pos}")
        pos += r
        n -= 1
    return pos


cdef int scan_timestamps(Segment s, int64_t *first, int64_t *last) except -1:
    """First and last record timestamp of a segment (0 when it is empty)."""
    cdef Py_ssize_t pos = SEGMENT_HEADER, r
    cdef bint was_mapped = s.base is not NULL
    first[0] = 0
    last[0] = 0
    if s.size <= SEGMENT_HEADER:
        return 0
    s.map()
    while pos < s.size:
        r = record_len(s.base + pos, s.size - pos)
        if r <= 0:
            break
        if first[0] == 0:
            first[0] = <int64_t>le64(s.base + pos)
        last[0] = <int64_t>le64(s.base + pos)
        pos += r
    if not was_mapped and not s.writable:
        s.unmap()
    return 0


def now_ms():
    return int(time.time() * 1000)


cdef class StreamStore(MessageStore):
    """Segments of a stream with their offsets, timestamps and retention."""

    def __cinit__(self, *args, **kwargs):
        self._init_maps()

    def __init__(self, str directory, Py_ssize_t segment_size=8 * 1024 * 1024, log_name=None, syncer=None):
        MessageStore.__init__(self, directory, segment_size, log_name, syncer)
        if self.error is not None:
            return
        try:
            self._load_stream()
            self._load_tracked()
            if self.wseg is None:
                # unlike a classic queue (no segment until its first message),
                # a stream's readers always have a write segment to wait at
                self.open_new_segment(0)
        except Exception as exc:
            self.error = str(exc)
            log.error("stream %s closed: %s", self.log_name, exc)
            self.close()
            return
        self.rseg = None          # streams have no shared read cursor
        self.booted = True

    def _init_maps(self):
        # also called from the base class's constructor, before ours ran
        if self.first_offsets is None:
            self.first_offsets = {}
            self.first_ts = {}
            self.last_ts = {}
            self.tracked = {}
            self.meta_to_sync = []

    def take_sync(self, bint acks=True):
        paths, directory, job = MessageStore.take_sync(self, acks)
        if self.meta_to_sync:
            paths.extend(self.meta_to_sync)
            self.meta_to_sync = []
        return paths, directory, job

    # -- meta files ------------------------------------------------------------

    def _meta_path(self, uint32_t seg_id):
        return os.path.join(self.path(), "meta.%010d" % seg_id)

    def _write_meta(self, uint32_t seg_id, uint32_t count, uint64_t first, int64_t first_ts, int64_t last_ts):
        path = self._meta_path(seg_id)
        tmp = path + ".tmp"
        with open(tmp, "wb") as f:
            f.write(META.pack(count, first, first_ts, last_ts))
        os.replace(tmp, path)
        if self.syncer is not None:
            # what keeps the offsets after a power cut: synced by the group
            # commit with the segments (take_sync_paths), off the event loop
            self.meta_to_sync.append(path)
            self.sync_dir = True

    def _read_meta(self, uint32_t seg_id):
        try:
            with open(self._meta_path(seg_id), "rb") as f:
                data = f.read(META.size)
        except FileNotFoundError:
            return None
        if len(data) < META.size:
            return None
        return META.unpack(data)

    def _load_stream(self):
        cdef Segment s, prev = None
        cdef int64_t fts, lts
        cdef uint64_t first
        live = set()
        for seg_id in self.segment_ids():
            s = self.segment(seg_id)
            live.add(seg_id)
            meta = self._read_meta(seg_id)
            if prev is not None and prev.id + 1 == s.id:
                # the previous segment's count is exact (its records were walked)
                first = self.first_offsets[prev.id] + prev.msg_count
                if meta is not None and meta[1] != first:
                    log.warning("stream %s: %s says first offset %d, the segments before say %d",
                                self.log_name, self._meta_path(seg_id), meta[1], first)
            elif meta is not None and meta[1] > 0:
                first = meta[1]
            elif prev is not None:
                first = self.first_offsets[prev.id] + prev.msg_count
            else:
                if seg_id != 1:
                    log.warning("stream %s: no meta file for segment %d, its offsets start at 1",
                                self.log_name, seg_id)
                first = 1
            self.first_offsets[seg_id] = first
            if s is self.wseg:
                scan_timestamps(s, &fts, &lts)
                self.w_first_ts, self.w_last_ts = fts, lts
                if meta is None or meta[1] != first:
                    self._write_meta(seg_id, 0, first, 0, 0)
            else:
                if meta is not None and meta[0] == s.msg_count and meta[1] == first:
                    fts, lts = meta[2], meta[3]
                else:
                    scan_timestamps(s, &fts, &lts)
                    self._write_meta(seg_id, s.msg_count, first, fts, lts)
                self.first_ts[seg_id] = fts
                self.last_ts[seg_id] = lts
            self.count += s.msg_count
            self.bytes += s.size - SEGMENT_HEADER
            prev = s
        if prev is not None:
            self.last_offset = self.first_offsets[prev.id] + prev.msg_count - 1
        # meta files of segments that are gone (a crash between the two unlinks)
        for f in os.listdir(self.path()):
            if f.startswith("meta.") and f[5:].isdigit() and int(f[5:]) not in live:
                try:
                    os.unlink(os.path.join(self.path(), f))
                except OSError:
                    pass
        self.ready = 0
        self.ready_bytes = 0

    # -- segments --------------------------------------------------------------

    cdef int open_new_segment(self, Py_ssize_t min_size) except -1:
        cdef uint64_t first = self.last_offset + 1
        self._init_maps()
        MessageStore.open_new_segment(self, min_size)
        self.first_offsets[self.wseg.id] = first
        self.w_first_ts = 0
        self.w_last_ts = 0
        self._write_meta(self.wseg.id, 0, first, 0, 0)
        self.rseg = None
        if self.booted:
            self.apply_retention(now_ms())
        return 0

    def _seal(self, Segment s):
        MessageStore._seal(self, s)
        if not s.dropped and s.id in self.first_offsets:
            self.first_ts[s.id] = self.w_first_ts
            self.last_ts[s.id] = self.w_last_ts
            self._write_meta(s.id, s.msg_count, self.first_offsets[s.id], self.w_first_ts, self.w_last_ts)

    def _drop(self, Segment s):
        MessageStore._drop(self, s)
        try:
            os.unlink(self._meta_path(s.id))
        except FileNotFoundError:
            pass
        changes.removed(self._meta_path(s.id))
        if self.first_offsets is not None:
            self.first_offsets.pop(s.id, None)
            self.first_ts.pop(s.id, None)
            self.last_ts.pop(s.id, None)

    cdef int drop_segment(self, Segment s) except -1:
        self.count -= s.msg_count
        self.bytes -= s.size - SEGMENT_HEADER
        self._drop(s)
        return 0

    cdef Segment first_segment(self):
        for x in self.segs:
            if x is not None:
                return <Segment>x
        return None

    cdef Segment next_segment(self, uint32_t after_id):
        cdef Py_ssize_t idx = <Py_ssize_t>after_id + 1 - <Py_ssize_t>self.base_id
        cdef Py_ssize_t n = len(self.segs)
        if idx < 0:
            idx = 0
        while idx < n:
            x = self.segs[idx]
            if x is not None:
                return <Segment>x
            idx += 1
        return None

    cdef uint64_t first_offset_of(self, Segment s) except? 0:
        return self.first_offsets[s.id]

    cdef int note_append(self, const char *rec, Py_ssize_t n) except -1:
        """After MessageStore.append: the message's offset and timestamp.
        A stream has no "ready" messages in the classic sense (nothing is
        taken from it), so those counters stay 0 and never throttle
        publishers."""
        cdef int64_t ts = <int64_t>le64(rec)
        self.last_offset += 1
        self.count += 1
        self.bytes += n
        self.ready = 0
        self.ready_bytes = 0
        if self.w_first_ts == 0:
            self.w_first_ts = ts
        self.w_last_ts = ts
        return 0

    # -- retention -------------------------------------------------------------

    def apply_retention(self, int64_t now):
        """Drop whole sealed segments from the front while the rest still
        holds max-length messages / max-length-bytes bytes, or while their
        newest message is older than max-age. -> messages dropped."""
        cdef Segment s
        cdef uint64_t dropped = 0
        cdef bint drop
        if self.closed:
            return 0
        while True:
            s = self.first_segment()
            if s is None or s is self.wseg:
                break
            drop = False
            if self.max_length and self.count - s.msg_count >= self.max_length:
                drop = True
            elif self.max_length_bytes and self.bytes - (s.size - SEGMENT_HEADER) >= self.max_length_bytes:
                drop = True
            elif self.max_age_ms and self.last_ts.get(s.id, 0) < now - self.max_age_ms:
                drop = True
            if not drop:
                break
            dropped += s.msg_count
            self.drop_segment(s)
        if dropped:
            log.info("stream %s: retention dropped %d messages", self.log_name, dropped)
        return dropped

    def purge(self):
        """Drop every sealed segment (the write segment stays, as in
        LavinMQ). -> messages dropped."""
        cdef Segment s
        cdef uint64_t dropped = 0
        while True:
            s = self.first_segment()
            if s is None or s is self.wseg:
                break
            dropped += s.msg_count
            self.drop_segment(s)
        return dropped

    # -- finding offsets -------------------------------------------------------

    def end_position(self):
        """(segment, position, offset) after the newest message: "next"."""
        return self.wseg, self.wseg.size, self.last_offset + 1

    def first_position(self):
        cdef Segment s = self.first_segment()
        return s, SEGMENT_HEADER, self.first_offsets[s.id]

    def last_position(self):
        """The start of the newest segment that holds messages ("last", a
        chunk of recent messages), or the end if there are none."""
        cdef Segment s
        for x in reversed(self.segs):
            if x is not None and (<Segment>x).msg_count:
                s = x
                return s, SEGMENT_HEADER, self.first_offsets[s.id]
        return self.end_position()

    def locate(self, uint64_t target):
        """(segment, position, offset) of the message with offset target, the
        oldest one if target is older, the end if it is newer."""
        cdef Segment s
        cdef uint64_t first
        if target > self.last_offset:
            return self.end_position()
        for x in self.segs:
            if x is None:
                continue
            s = x
            first = self.first_offsets[s.id]
            if target < first + s.msg_count:
                if target < first:
                    target = first
                return s, skip_records(s, SEGMENT_HEADER, target - first), target
        return self.end_position()

    def locate_time(self, int64_t ts):
        """(segment, position, offset) of the first message stored at or
        after ts (ms since 1970), or the end."""
        cdef Segment s
        cdef Py_ssize_t pos, r
        cdef uint64_t offset
        cdef int64_t last
        for x in self.segs:
            if x is None:
                continue
            s = x
            if s.msg_count == 0:
                continue
            last = self.w_last_ts if s is self.wseg else self.last_ts.get(s.id, 0)
            if last < ts:
                continue
            s.map()
            pos = SEGMENT_HEADER
            offset = self.first_offsets[s.id]
            while pos < s.size:
                if <int64_t>le64(s.base + pos) >= ts:
                    return s, pos, offset
                r = record_len(s.base + pos, s.size - pos)
                if r <= 0:
                    raise OSError(f"{s.path}: corrupt record at byte {pos}")
                pos += r
                offset += 1
        return self.end_position()

    @property
    def first_offset(self):
        """Offset of the oldest message (last_offset + 1 when empty)."""
        s = self.first_segment()
        return self.first_offsets[s.id] if s is not None else self.last_offset + 1

    @property
    def first_timestamp(self):
        s = self.first_segment()
        if s is None or self.count == 0:
            return None
        if s is self.wseg:
            return self.w_first_ts
        return self.first_ts.get(s.id)

    @property
    def last_timestamp(self):
        if self.count == 0:
            return None
        if self.wseg is not None and self.wseg.msg_count:
            return self.w_last_ts
        for x in reversed(self.segs):
            if x is not None and (<Segment>x).msg_count:
                return self.last_ts.get((<Segment>x).id)
        return None

    def segment_offsets(self):
        """[(segment id, first offset, message count, bytes)], oldest first."""
        cdef Segment s
        out = []
        for x in self.segs:
            if x is not None:
                s = x
                out.append((s.id, self.first_offsets[s.id], s.msg_count, s.size - SEGMENT_HEADER))
        return out

    # -- consumer offsets (automatic offset tracking) -------------------------
    #
    # consumer_offsets, as LavinMQ: entries of consumer tag (shortstr) and
    # offset (i64 LE), appended; the last entry of a tag wins.

    def _offsets_path(self):
        return os.path.join(self.path(), "consumer_offsets")

    def _load_tracked(self):
        try:
            with open(self._offsets_path(), "rb") as f:
                data = f.read()
        except FileNotFoundError:
            return
        cdef Py_ssize_t pos = 0, n = len(data), klen
        while pos < n:
            klen = data[pos]
            if klen == 0 or pos + 1 + klen + 8 > n:
                break       # a zero-filled or torn tail
            tag = data[pos + 1:pos + 1 + klen].decode("utf-8", "surrogateescape")
            self.tracked[tag] = OFFSET.unpack_from(data, pos + 1 + klen)[0]
            pos += 1 + klen + 8
        self.offsets_size = pos
        if pos != n:
            os.truncate(self._offsets_path(), pos)

    def save_offsets(self, entries):
        """entries: [(consumer tag, offset)]: appended in one write."""
        if self.closed or not entries:
            return
        parts = []
        for tag, offset in entries:
            key = tag.encode("utf-8", "surrogateescape")[:255]
            parts.append(bytes((len(key),)) + key + OFFSET.pack(offset))
            self.tracked[tag] = offset
        if self.offsets_size + sum(len(p) for p in parts) > OFFSETS_COMPACT_AT:
            self._rewrite_offsets()
            return
        data = memoryview(b"".join(parts))
        if self.offsets_fd is None:
            self.offsets_fd = os.open(self._offsets_path(), os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        self.offsets_size += len(data)
        while data:
            data = data[os.write(self.offsets_fd, data):]
        changes.changed(self._offsets_path())

    def _rewrite_offsets(self):
        # offsets below the oldest message are of no use any more
        first = self.first_offset
        keep = {t: o for t, o in self.tracked.items() if o >= first}
        self.tracked = keep
        data = b"".join(bytes((len(k),)) + k + OFFSET.pack(o)
                        for k, o in ((t.encode("utf-8", "surrogateescape")[:255], o) for t, o in keep.items()))
        tmp = self._offsets_path() + ".tmp"
        with open(tmp, "wb") as f:
            f.write(data)
        self._close_offsets()
        os.replace(tmp, self._offsets_path())
        self.offsets_size = len(data)
        changes.changed(self._offsets_path())

    def unmap_idle(self):
        """Housekeeping (every few seconds): max-age retention also applies
        while nothing is published, then idle segments are unmapped."""
        if self.max_age_ms and not self.closed:
            self.apply_retention(now_ms())
        MessageStore.unmap_idle(self)

    def read_at(self, uint32_t seg_id, Py_ssize_t pos):
        """The record at a position, as bytes (tests, tools)."""
        cdef Segment s = self.segment(seg_id)
        cdef Py_ssize_t n
        if s is None or pos >= s.size:
            return None
        s.map()
        n = record_len(s.base + pos, s.size - pos)
        if n <= 0:
            raise OSError(f"{s.path}: corrupt record at byte {pos}")
        return s.base[pos:pos + n]

    # tests: append from Python, as a publish does
    def py_append(self, bytes rec):
        out = MessageStore.py_append(self, rec)
        self.note_append(rec, len(rec))
        return out

    def _close_offsets(self):
        if self.offsets_fd is not None:
            os.close(self.offsets_fd)
            self.offsets_fd = None

    def close(self):
        self._close_offsets()
        MessageStore.close(self)
