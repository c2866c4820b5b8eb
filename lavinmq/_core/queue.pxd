# The hot half of a queue: its message store, its consumers, the delivery
# loop that moves ready messages to consumers in batches, and the queue
# semantics that act per message (TTL, length limits, dead-lettering).
# Control (declare, policies, auto-delete, expiry of the queue) lives in the
# Python subclass.
from libc.stdint cimport uint32_t, uint64_t, int64_t
from lavinmq._core.segment cimport MessageStore, SP, CountMap
from lavinmq._core.routing cimport Exchange, RoutingVersion
from lavinmq._core.dedup cimport Deduper

cdef enum:
    OVERFLOW_DROP_HEAD = 0
    OVERFLOW_REJECT_PUBLISH = 1
    OVERFLOW_REJECT_PUBLISH_DLX = 2
    # Queue.publish's answers besides 0 (flags: route_record ORs them)
    PUBLISH_NO_SPACE = 1        # segment.APPEND_NO_SPACE: the disk is full
    PUBLISH_REJECTED = 2        # x-overflow reject-publish(-dlx) at the limit
    # expiry checks run at most this often per queue (ms)
    EXPIRY_MIN_INTERVAL = 10
    EXPIRY_BUDGET = 16384       # messages one expiry pass drops before yielding to the loop


cdef class ConsumerBase:
    # Implemented by channel.Consumer; declared here so that the queue can
    # deliver without importing the channel module.
    cdef:
        public int priority
        public bint no_ack
        public object tag
        public Queue queue
        public uint32_t prefetch
        public uint32_t unacked
        public uint64_t deliver_time     # ms, set by the queue before deliver() when it times consumers
    cdef bint has_capacity(self)
    cdef int deliver(self, const char *rec, SP sp, bint redelivered) except -1


cdef class QueueExtras:
    # What only some queues use (TTLs, limits, dead-lettering, a delivery
    # limit, single active consumer, deduplication): made when a queue first
    # needs one, so that an idle plain queue does not carry ~130 bytes of it
    cdef:
        int64_t ttl                 # ms, -1: none
        bint msg_ttl                # a message with its own expiration was stored
        int64_t max_length          # -1: none
        int64_t max_length_bytes    # -1: none
        int overflow
        bytes dlx                   # None: no dead-lettering
        bytes dlrk                  # None: the message's own routing key
        Exchange dlx_ex
        uint64_t dlx_ver
        uint64_t expiry_at          # ms of the armed head check, 0: none
        object expiry_timer
        ConsumerBase active         # the single active consumer
        list subscribed             # consumers in subscription order (single active only)
        int64_t delivery_limit      # -1: none
        CountMap deliveries         # sp -> deliveries so far, with a delivery limit
        Deduper dedup               # x-message-deduplication, or None


cdef class Queue:
    cdef:
        public str name
        public object vhost
        public MessageStore store
        public list consumers       # ConsumerBase, highest priority first (NO_CONSUMERS: none yet)
        Py_ssize_t rr               # round-robin cursor
        bint scheduled
        public bint closed
        # queue semantics: `ext` is set when a TTL, a length limit,
        # dead-lettering or deduplication is on (then x is not None), so
        # that a queue that uses none pays one test per message
        readonly bint ext
        public bint expiry_behind           # expired messages wait: publishers into it are slowed
        public bint paused                  # delivers nothing (LavinMQ's pause)
        readonly bint single_active         # x-single-active-consumer (x.active, x.subscribed)
        # streams: an ack or reject goes to the consumer that got the
        # message (its own cursor), not to the shared store
        readonly bint per_consumer_acks
        QueueExtras x                       # None until the queue needs one of its fields
        public uint64_t consumer_timeout    # ms, 0: none
        public uint64_t unacked_count
        public uint64_t unacked_bytes
        # counters for stats
        public uint64_t publish_count
        public uint64_t deliver_count
        public uint64_t get_count
        public uint64_t ack_count
        public uint64_t redeliver_count
        public uint64_t expired_count
        public uint64_t dead_lettered_count
        public uint64_t rejected_publish_count
        public uint64_t dropped_count
        public uint64_t deliver_no_ack_count   # part of deliver_count (API: deliver vs deliver_no_ack)
        public uint64_t get_no_ack_count       # part of get_count
        public uint64_t get_empty_count
        bytes _name_bytes                   # made when dead-lettering first needs it
        public RoutingVersion routing_version

    cdef QueueExtras extras(self)
    cdef bytes name_b(self)
    cdef int publish(self, const char *rec, Py_ssize_t n) except -1
    cdef int publish_ext(self, const char *rec, Py_ssize_t n) except -1
    cdef ConsumerBase next_consumer(self)
    cdef int deliver_pending(self) except -1
    cdef const char *get(self, SP *sp, bint *redelivered, bint no_ack) except? NULL
    cdef int ack(self, SP sp) except -1
    cdef int reject(self, SP sp, bint requeue) except -1
    cdef int schedule(self) except -1
    cdef int64_t expires_at(self, const char *rec)
    cdef bint is_expired(self, const char *rec, uint64_t now, bint zero_expires)
    cdef int drop(self, const char *rec, SP sp, int reason) except -1
    cdef int dead_letter(self, const char *rec, int reason) except -1
    cdef int over_limit(self)
    cdef int expire_head(self, uint64_t now, bint zero_expires) except -1
    cdef int arm_expiry(self, uint64_t now) except -1
    cdef void update_ext(self)
    cdef const char *count_delivery(self, const char *rec, SP sp) except NULL
    cdef int consumer_settled(self, ConsumerBase c, SP sp, bint acked, bint requeue) except -1


cdef int schedule_queue(Queue q) except -1
