# A stream queue's hot half: one read cursor per consumer over the
# StreamStore's segments, deliveries that carry their x-stream-offset
# header, server-side filtering, and acks that only free credit (and move a
# tracked consumer's stored offset). Classic queues never touch this module.
from libc.stdint cimport uint8_t, uint16_t, uint32_t, uint64_t
from lavinmq._core.buffer cimport WriteBuffer
from lavinmq._core.segment cimport Segment, SP
from lavinmq._core.queue cimport Queue, ConsumerBase
from lavinmq._core.channel cimport Consumer
from lavinmq._core.stream_store cimport StreamStore


# A delivered message the consumer has not settled yet, or one it requeued.
cdef struct InFlight:
    SP sp
    uint64_t offset
    uint8_t done


# What a consumer filter compares (LavinMQ's StreamFilter kinds).
cdef enum FilterKind:
    F_VALUE = 0     # a value of x-stream-filter-value
    F_PAIR          # a header = value pair
    F_RADIUS        # x-geo-lat/x-geo-lon within radius km of a point
    F_BBOX          # ... within a latitude/longitude box
    F_POLYGON       # ... inside a polygon (its box first)


cdef struct Filter:
    FilterKind kind
    const char *key         # F_PAIR: the header's name
    Py_ssize_t klen
    const char *value       # F_VALUE, F_PAIR: what it must equal
    Py_ssize_t vlen
    double g[4]             # F_RADIUS: lat, lon, km; F_BBOX/F_POLYGON: min_lat, max_lat, min_lon, max_lon
    const double *points    # F_POLYGON: lat, lon pairs
    Py_ssize_t n_points


cdef class StreamConsumer(Consumer):
    cdef:
        Segment seg                 # the cursor: segment, byte position,
        Py_ssize_t pos              # and the offset of the record there
        public uint64_t offset
        InFlight *inflight          # sorted by (segment, position) = by offset
        Py_ssize_t if_head
        Py_ssize_t if_tail
        Py_ssize_t if_cap
        InFlight *requeued          # sorted, redelivered before the cursor moves on
        Py_ssize_t n_requeued
        Py_ssize_t cap_requeued
        # filters
        public bint filtered
        public bint match_all
        public bint match_unfiltered
        Filter *filters
        Py_ssize_t n_filters
        bint geo                    # a filter reads x-geo-lat/x-geo-lon
        list filter_refs            # the bytes objects the Filter pointers point into
        # automatic offset tracking
        public bint track_offset
        public uint64_t committed   # where a reconnect resumes (0: nothing stored)
        bint offset_dirty
        public uint64_t last_delivered
        public bint with_timestamp  # x-stream-timestamp: true, the store time as a header too

    cdef int push_inflight(self, SP sp, uint64_t offset) except -1
    cdef Py_ssize_t find_inflight(self, SP sp)
    cdef int add_requeued(self, SP sp, uint64_t offset) except -1
    cdef uint64_t commit_point(self)
    cdef bint matches(self, const char *rec)
    cdef int deliver_at(self, const char *rec, SP sp, uint64_t offset, bint redelivered) except -1


cdef class StreamQueue(Queue):
    cdef:
        public StreamStore sstore
        list dirty_offsets          # tracked consumers whose committed offset moved

    cdef const char *advance(self, StreamConsumer c, SP *sp, uint64_t *offset) except? NULL
    cdef int leave_segment(self, StreamConsumer c, Segment s) except -1
    cdef Py_ssize_t deliver_to(self, StreamConsumer c, Py_ssize_t limit) except -1


cdef int write_stream_content(WriteBuffer wb, uint16_t channel, const char *rec, uint32_t frame_max,
                              uint64_t offset, bint with_ts) except -1
