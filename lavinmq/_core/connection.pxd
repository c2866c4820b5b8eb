# The connection's protocol core: fed bytes (BufferedProtocol reads straight
# into rbuf), it walks every complete frame of a read in one call. Publishes,
# content frames and acks stay in Cython; every other method is decoded and
# handed up to the Python subclass (lavinmq.amqp.connection) once.
from libc.stdint cimport int64_t, uint8_t, uint16_t, uint32_t, uint64_t
from lavinmq._core.channel cimport ConnState, Channel
from lavinmq._core.flow cimport FlowClient

cdef enum:
    # channel ids below this sit in a list; the rare higher ones (valid up to
    # 65535) in a dict, so one client cannot make us hold a 64k-slot list
    LOW_CHANNELS = 1024

cdef enum ConnPhase:
    PH_HEADER = 0      # waiting for the protocol header
    PH_HANDSHAKE = 1   # start/tune/open
    PH_OPEN = 2
    PH_CLOSING = 3     # we sent connection.close, waiting for close-ok
    PH_CLOSED = 4


cdef class CoreConnection(FlowClient):
    cdef:
        char *rbuf
        Py_ssize_t rcap
        Py_ssize_t rlen
        public list channels           # index = channel id (< LOW_CHANNELS), None if not open
        public dict channels_hi        # channel id -> Channel, for ids past the list
        public uint32_t open_count     # channels open, limited by channel_max
        public uint16_t channel_max
        public uint32_t frame_max
        public double last_recv        # monotonic seconds, per read batch
        public double last_send
        public uint64_t recv_frames
        readonly bint framing_lost              # a frame error: input is discarded from then on

    cdef int process(self) except -1
    cdef int handle_frame(self, uint8_t ftype, uint16_t ch, const char *p, uint32_t size) except -1
    cdef int handle_method(self, uint16_t ch, const char *p, uint32_t size) except -1
    cdef Channel channel_for_content(self, uint16_t ch)
    cdef Channel lookup(self, uint16_t ch)
    cdef void consume(self, Py_ssize_t pos) noexcept
    cdef int lose_framing(self) except -1
