# The store of a stream queue: the same segment files and record layout as
# a classic queue (MessageStore), read by many cursors and never shrunk by
# acks. Every message has an offset: dense, starting at 1, stable across
# restarts. Each segment has a meta.N file with its first offset and its
# first and last timestamp, so offsets survive whole segments being dropped
# by retention (max-length, max-length-bytes, max-age).
from libc.stdint cimport uint32_t, uint64_t, int64_t
from lavinmq._core.segment cimport MessageStore, Segment


cdef class StreamStore(MessageStore):
    cdef:
        readonly uint64_t last_offset     # offset of the newest message; 0 before the first
        readonly uint64_t count           # messages in the live segments
        readonly uint64_t bytes           # their record bytes
        dict first_offsets                # segment id -> offset of its first message
        dict first_ts                     # sealed segment id -> ms timestamp of its first message
        dict last_ts                      # sealed segment id -> ms timestamp of its last message
        public int64_t w_first_ts         # the same two for the write segment
        public int64_t w_last_ts
        # retention, 0 = none
        public uint64_t max_length
        public uint64_t max_length_bytes
        public int64_t max_age_ms
        bint booted
        list meta_to_sync                 # meta files for the next group commit
        # server-side offsets of named consumers (x-stream-automatic-offset-tracking)
        readonly dict tracked             # consumer tag -> offset to resume from
        object offsets_fd                 # os-level fd, None until the first save
        Py_ssize_t offsets_size

    cdef int note_append(self, const char *rec, Py_ssize_t n) except -1
    cdef Segment next_segment(self, uint32_t after_id)
    cdef Segment first_segment(self)
    cdef uint64_t first_offset_of(self, Segment s) except? 0
    cdef int drop_segment(self, Segment s) except -1


# Walk n records from pos in s (mapped by the caller's segment): -> new pos
cdef Py_ssize_t skip_records(Segment s, Py_ssize_t pos, uint64_t n) except -1
