# The hot half of a queue: its message store, its consumers, and the
# delivery loop that moves ready messages to consumers in batches. Control
# (declare, policies, auto-delete) lives in the Python subclass.
from libc.stdint cimport uint32_t, uint64_t
from lavinmq._core.segment cimport MessageStore, SP


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
    cdef bint has_capacity(self)
    cdef int deliver(self, const char *rec, SP sp, bint redelivered) except -1


cdef class Queue:
    cdef:
        public str name
        public object vhost
        public MessageStore store
        public list consumers       # ConsumerBase, highest priority first
        Py_ssize_t rr               # round-robin cursor
        bint scheduled
        public bint closed
        public uint64_t unacked_count
        public uint64_t unacked_bytes
        # counters for stats
        public uint64_t publish_count
        public uint64_t deliver_count
        public uint64_t get_count
        public uint64_t ack_count
        public uint64_t redeliver_count
        # streams: an ack or reject goes to the consumer that got the
        # message (its own cursor), not to the shared store
        readonly bint per_consumer_acks

    cdef int publish(self, const char *rec, Py_ssize_t n) except -1
    cdef ConsumerBase next_consumer(self)
    cdef int deliver_pending(self) except -1
    cdef const char *get(self, SP *sp, bint *redelivered) except? NULL
    cdef int ack(self, SP sp) except -1
    cdef int reject(self, SP sp, bint requeue) except -1
    cdef int schedule(self) except -1
    cdef int consumer_settled(self, ConsumerBase c, SP sp, bint acked, bint requeue) except -1


cdef int schedule_queue(Queue q) except -1
