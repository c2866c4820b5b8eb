from libc.stdint cimport int64_t, uint64_t
from lavinmq._core.channel cimport ConnState
from lavinmq._core.queue cimport Queue

cdef class FlowLine:
    # the publishers waiting for one queue to catch up (flow.pyx)
    cdef:
        object waiting            # deque of FlowClient, first come first in
        uint64_t delivered_mark   # the queue's deliver_count at the last look
        int64_t credit            # messages it may take in now
        Py_ssize_t dead           # waiting connections that closed meanwhile

cdef class FlowClient:
    # what AMQP's and MQTT's connections share for pausing their reading
    cdef:
        public ConnState state
        public int phase
        int open_phase                  # `phase` once open (AMQP's PH_OPEN, MQTT's MP_OPEN)
        public object transport
        public bint paused_reading
        FlowLine flow_line              # the queue line it waits in, None when read
        uint64_t flow_batch             # publishes of the read batch that made it wait
        FlowLine flow_from              # the line that last let it in, and
        int64_t flow_reserved           #   the publishes that line counted on from it

cdef int flow_wait(FlowClient c, Queue q) except -1
cdef int flow_forget(FlowClient c) except -1
