# A channel's hot state: the publish being assembled (method, header, body
# frames -> one store record), publisher confirms, the unacked deliveries
# (a C array sorted by delivery tag) and its consumers.
from libc.stdint cimport uint8_t, uint16_t, uint32_t, uint64_t
from lavinmq._core.buffer cimport WriteBuffer
from lavinmq._core.queue cimport Queue, ConsumerBase
from lavinmq._core.segment cimport SP
from lavinmq._core.routing cimport Exchange, RouteOut

cdef enum:
    FLOW_BACKLOG = 4096        # ready messages in a consumed queue before its publishers wait (flow.pyx)


cdef class ConnState:
    # What channels and consumers need of their connection, without
    # importing the connection module.
    cdef:
        public WriteBuffer wbuf
        public uint32_t frame_max
        public bint paused           # transport above its high-water mark
        public bint closed
        public uint64_t now_ms       # timestamp for records, set per read batch
        public uint64_t max_message_size
        public object conn           # the connection (flush, close)
        public bint dirty            # has output waiting for a flush
        public list confirm_dirty    # channels owing publisher confirms
        public uint64_t send_oct
        public uint64_t recv_oct
        public Queue flow_queue      # the queue it fed that is behind, for its line (flow.pyx)
        public object syncer         # lavinmq.sync.Syncer, None with sync off
        public bint set_timestamp    # give messages without a timestamp property the time of arrival
        public bint blocked          # resource alarm (disk): publishers are not read
        public uint64_t publishes    # messages published on this connection
        public bint acked            # acked (basic.ack/nack/reject) since its last confirms were taken
        public uint64_t assembling   # declared body bytes of the publishes being received
        public uint64_t tx_held      # bytes held by the open transactions of all its channels
        public bytes user_id         # a user_id property must equal this; None = any (impersonator)

    cdef int mark_dirty(self) except -1


cdef struct Unacked:
    uint64_t tag
    uint64_t delivered_at      # ms; 0 unless the queue times its consumers
    SP sp
    uint32_t queue_idx
    uint32_t consumer_idx      # NO_CONSUMER for basic.get
    uint8_t done


cdef class Consumer(ConsumerBase):
    cdef:
        public Channel channel
        bytes tag_bytes
        public uint32_t queue_idx
        public uint32_t slot
        public bint exclusive
        public object arguments
        public bint cancelled



cdef class Channel:
    cdef:
        public uint16_t id
        public ConnState state
        public bint closing          # sent channel.close, waiting for close-ok
        public bint flow_active
        # publish being assembled
        int pstate
        WriteBuffer rec
        Py_ssize_t props_off
        Py_ssize_t props_len
        uint64_t body_left
        bint mandatory
        bint immediate
        Exchange ex_cache
        Exchange ex_pending          # the exchange of the publish being assembled, checked up front
        public uint64_t body_declared    # its body size, counted in ConnState.assembling
        public uint64_t tx_bytes     # bytes held by the open transaction
        # confirms
        public bint confirm
        public uint64_t publish_seq
        public uint64_t confirmed_seq
        bint in_confirm_dirty
        public bytes direct_reply    # name of this channel's amq.rabbitmq.reply-to queue, or None
        list nack_seqs               # publishes to nack (store refused them), sorted; rare
        # transactions
        public bint tx
        public list tx_msgs
        public list tx_acks
        # deliveries
        public uint64_t next_tag
        Unacked *unacked
        Py_ssize_t u_head
        Py_ssize_t u_tail
        Py_ssize_t u_cap
        public uint32_t unacked_total
        public uint32_t prefetch_global
        public uint32_t prefetch_consumer
        public list queues           # index -> Queue, for unacked entries
        dict queue_idx
        public list consumer_slots   # index -> Consumer (kept while it has unacked)
        public dict consumers        # tag -> Consumer
        # stats
        public uint64_t publish_count
        public uint64_t deliver_count
        public uint64_t ack_count
        public uint64_t return_unroutable_count   # mandatory publishes that no queue took
        public uint64_t drop_unroutable_count     # other publishes that no queue took

    cdef int on_publish(self, const char *p, Py_ssize_t n) except -1
    cdef int on_header(self, const char *p, Py_ssize_t n) except -1
    cdef int fix_props(self) except -1
    cdef int on_body(self, const char *p, Py_ssize_t n) except -1
    cdef int publish_complete(self) except -1
    cdef int route_record(self, Exchange ex, const char *rec, Py_ssize_t n, Py_ssize_t props_len,
                          bint mandatory, bint immediate) except -1
    cdef int store_routed(self, Exchange ex, RouteOut out, const char *rec, Py_ssize_t n,
                          bint mandatory, bint immediate) except -1
    cdef Exchange exchange_for(self, const char *name, Py_ssize_t n)
    cdef uint32_t index_of(self, Queue q) except? 0xffffffff
    cdef int track(self, uint64_t tag, SP sp, uint32_t queue_idx, uint32_t consumer_idx,
                   uint64_t delivered_at) except -1
    cdef Py_ssize_t find_tag(self, uint64_t tag)
    cdef int settle(self, Unacked *u, int action) except -1
    cdef int on_ack(self, uint64_t tag, bint multiple, int action) except -1
    cdef int send_confirms(self) except -1
    cdef int ack_to(self, uint64_t seq) except -1
    cdef int ack_to_plain(self, uint64_t seq) except -1
    cdef int send_return(self, uint16_t code, bytes text, const char *rec) except -1


cdef int write_content(WriteBuffer wb, uint16_t channel, const char *rec, uint32_t frame_max) except -1
