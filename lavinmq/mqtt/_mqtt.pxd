# MQTT 3.1.1 per-message path: the packet reader (fed bytes like the AMQP
# core), PUBLISH straight into amq.topic's routing and the queues' stores,
# and a session's consumer that writes PUBLISH packets out of the store.
# Python (lavinmq.mqtt.connection) sees CONNECT, SUBSCRIBE, UNSUBSCRIBE,
# DISCONNECT and retained publishes: once per packet, never per message.
from libc.stdint cimport uint8_t, uint16_t, uint32_t, uint64_t
from lavinmq._core.buffer cimport WriteBuffer
from lavinmq._core.channel cimport ConnState
from lavinmq._core.flow cimport FlowClient
from lavinmq._core.queue cimport Queue, ConsumerBase
from lavinmq._core.routing cimport Exchange
from lavinmq._core.segment cimport SP

cdef enum:
    # packet types (the high nibble of the first byte)
    T_CONNECT = 1
    T_CONNACK = 2
    T_PUBLISH = 3
    T_PUBACK = 4
    T_PUBREC = 5
    T_PUBREL = 6
    T_PUBCOMP = 7
    T_SUBSCRIBE = 8
    T_SUBACK = 9
    T_UNSUBSCRIBE = 10
    T_UNSUBACK = 11
    T_PINGREQ = 12
    T_PINGRESP = 13
    T_DISCONNECT = 14
    # MQTTCore.phase
    MP_CONNECT = 0      # waiting for CONNECT
    MP_OPEN = 1
    MP_CLOSED = 2       # DISCONNECT, an error, or closed by us: input is dropped
    # a session's in-flight delivery
    FL_DONE = 0
    FL_SENT = 1         # waiting for PUBACK (QoS 1) or PUBREC (QoS 2)
    FL_RELEASED = 2     # QoS 2: PUBREL sent, waiting for PUBCOMP
    MAX_PACKET_ID = 65535


cdef struct Flight:
    SP sp
    uint8_t state
    uint8_t qos


cdef class MQTTCore(FlowClient):
    cdef:
        char *rbuf
        Py_ssize_t rcap
        Py_ssize_t rlen
        public double last_recv          # monotonic seconds, per read batch
        public double last_send
        public uint32_t max_packet_size
        bint filled                      # the last read filled the buffer
        Py_ssize_t offered               # free bytes of the last get_buffer
        public bint may_publish          # permission_check_enabled: write on the exchange
        public bint output_held          # a retained message is being streamed: nothing else is written
        public Exchange exchange         # amq.topic of the session's vhost
        public bytearray qos2_in         # session state: packet ids of QoS 2 publishes awaiting PUBREL
        public SessionConsumer consumer  # the session's, once it has a queue
        WriteBuffer rec                  # the record being built (made at the first publish)
        WriteBuffer acks                 # PUBACK/PUBREC/PUBCOMP owed for this read batch (made when first owed)
        public uint32_t acks_deferred    # batches of acks waiting for a disk flush
        # stats
        public uint64_t publish_count    # PUBLISH received
        public uint64_t publish_qos0
        public uint64_t unroutable_count
        public uint64_t dropped_offline  # QoS 0 not kept for sessions without a client

    cdef int process(self) except -1
    cdef int handle(self, uint8_t first, const char *p, Py_ssize_t n) except -1
    cdef int on_publish(self, uint8_t flags, const char *p, Py_ssize_t n) except -1
    cdef int owe(self, uint8_t first, uint16_t pid) except -1
    cdef int publish_record(self, const char *topic, Py_ssize_t tlen, const char *body, Py_ssize_t blen,
                            int qos) except -1
    cdef int end_batch(self) except -1


cdef class SessionConsumer(ConsumerBase):
    cdef:
        public MQTTCore conn
        ConnState st
        Flight *ring                     # in-flight deliveries by tag: ring[i] has tag head_tag + i - head
        Py_ssize_t ring_cap
        Py_ssize_t head
        Py_ssize_t tail
        uint64_t head_tag                # tags start at 1; packet id = (tag - 1) % 65535 + 1
        public uint32_t window           # max_inflight_messages, at most 65535
        public uint32_t inflight         # entries not yet done
        public uint8_t qos_lo            # the lowest and highest QoS of the subscriptions
        public uint8_t qos_hi
        public bint dollar_check         # a filter starts with a wildcard: '$' topics need a look
        public list filters              # [(binding key bytes, qos)], for mixed QoS and '$' topics
        public object channel            # for the management API and vhost.delete_queue
        public bint exclusive
        public object arguments
        public uint64_t deliver_count
        public uint64_t ack_count

    cdef int track(self, SP sp, uint8_t qos) except -1
    cdef Py_ssize_t find(self, uint16_t pid)
    cdef int advance(self) except -1
    cdef int on_ack(self, uint8_t kind, uint16_t pid) except -1
    cdef int sub_qos(self, const char *rk, Py_ssize_t rklen, bint *deliver)
    cdef void settle_now(self, SP sp) noexcept
