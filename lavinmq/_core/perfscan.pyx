# cython: language_level=3
"""Frame scanning for the load generator (lavinmqperf): counts deliveries in
a received chunk without building Python objects per frame, so the
measuring client is never the bottleneck."""
from libc.stdint cimport uint8_t, uint16_t, uint32_t, uint64_t
from libc.string cimport memchr, memcmp

from lavinmq._core.buffer cimport be16, be32, be64
from posix.time cimport clock_gettime, timespec, CLOCK_MONOTONIC

cdef enum:
    LATENCY_SAMPLE_EVERY = 16     # one body in 16 carries a latency sample


cdef inline uint64_t monotonic_ns() noexcept nogil:
    cdef timespec ts
    clock_gettime(CLOCK_MONOTONIC, &ts)
    return <uint64_t>ts.tv_sec * 1000000000 + ts.tv_nsec


cdef class FrameScanner:
    """Fed raw bytes; counts basic.deliver / get-ok, publisher acks/nacks,
    and hands every other method frame back for Python to look at."""
    cdef:
        bytearray pending
        public uint64_t deliveries
        public uint64_t last_delivery_tag
        public uint64_t confirms_acked_upto
        public uint64_t nacks
        public uint64_t bodies
        public uint64_t body_bytes
        public uint64_t latency_sum_us
        public object others
        public bint measure_latency
        list samples
        public bytes expected_body     # -V: every body must equal this
        public uint64_t bad_bodies

    def __init__(self):
        self.pending = bytearray()
        self.others = []
        self.samples = []

    def feed(self, data):
        """Scan every complete frame; returns the method frames it did not
        count, as (channel, class_id, method_id, payload bytes)."""
        cdef const uint8_t[:] view
        cdef Py_ssize_t pos = 0, n
        cdef uint32_t size
        cdef uint8_t ftype
        cdef uint16_t cid, mid
        cdef const char *p
        cdef list others = []
        self.pending += data
        n = len(self.pending)
        if n == 0:
            return others
        view = self.pending
        p = <const char *>&view[0]
        while n - pos >= 7:
            ftype = <uint8_t>p[pos]
            size = be32(p + pos + 3)
            if n - pos < <Py_ssize_t>size + 8:
                break
            if ftype == 1 and size >= 4:
                cid = be16(p + pos + 7)
                mid = be16(p + pos + 9)
                if cid == 60 and mid == 60:
                    self.deliveries += 1
                    # consumer tag shortstr, then the delivery tag
                    self.last_delivery_tag = be64(p + pos + 12 + <uint8_t>p[pos + 11])
                elif cid == 60 and mid == 71:
                    self.deliveries += 1
                    self.last_delivery_tag = be64(p + pos + 11)
                elif cid == 60 and (mid == 80 or mid == 120):
                    if mid == 120:
                        self.nacks += 1
                    self.confirms_acked_upto = be64(p + pos + 11)
                else:
                    others.append((be16(p + pos + 1), cid, mid, bytes(self.pending[pos + 11:pos + 7 + size])))
            elif ftype == 3:
                self.bodies += 1
                self.body_bytes += size
                if self.expected_body is not None:
                    if size != len(self.expected_body) or memcmp(p + pos + 7, <const char *>self.expected_body, size) != 0:
                        self.bad_bodies += 1
                if self.measure_latency and size >= 8 and self.bodies % LATENCY_SAMPLE_EVERY == 0:
                    # bodies start with the publisher's CLOCK_MONOTONIC in ns
                    self.samples.append(monotonic_ns() - be64(p + pos + 7))
            pos += size + 8
        del view
        if pos:
            del self.pending[:pos]
        return others

    def latency_samples(self):
        return self.samples
